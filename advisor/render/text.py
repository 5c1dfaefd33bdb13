"""Plain-text report for a terminal; colour only when asked (a TTY without NO_COLOR)."""

from ..core.i18n import basis_line, action_name, colon, facts_line, label, steps_ref
from ..core.units import fmt_gib
from .wrap import clip, report_width, wrap, wrap_command

_COLORS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2", "cyan": "36"}


def _c(text, color, on):
    return f"\x1b[{_COLORS[color]}m{text}\x1b[0m" if on else text




def memory_rows(memory, lang):
    keys = ("total_gib", "free_gib", "tried_gib", "allocated_by_pytorch_gib", "reserved_unallocated_gib", "reserved_gib",
            "pending_free_gib", "largest_free_block_gib", "non_releasable_gib",
            "process_in_use_gib", "other_processes_gib", "other_allocations_gib")
    return [(label(k, lang), fmt_gib(memory.get(k))) for k in keys if memory.get(k) is not None]


def snapshot_lines(snap, lang):
    """What a memory snapshot measured: live memory by component, the largest holes, the top sites."""
    zh, L = lang == "zh", (lambda k: label(k, lang))  # noqa: E731
    sep = "；" if zh else "; "
    live = " · ".join(f"{L(k)} {fmt_gib(v)}" for k, v in snap["live_by_component_gib"].items()) or "—"
    holes = ", ".join(fmt_gib(h) for h in snap["largest_free_blocks_gib"][:3]) or "—"
    out = [f"  {L('snap_live')}{colon(lang)}{live}",
           f"  {L('snap_holes')}{colon(lang)}{holes}{sep}{L('snap_inactive')} {fmt_gib(snap['inactive_gib'])}"]
    for t in snap["top_allocations"][:5]:
        out.append(f"  {L('snap_site')}{colon(lang)}{t['site']} — {L(t['component'])} {fmt_gib(t['gib'])} ×{t['count']}")
    return out


def snapshot_head(snap, lang):
    if lang == "zh":
        return f"{label('snapshot', lang)}（PyTorch {snap['layout']} 格式，设备 {snap['device']}，{snap['segments']} 个段）"
    return f"{label('snapshot', lang)} (PyTorch {snap['layout']} layout, device {snap['device']}, {snap['segments']} segments)"


def evidence_where(e, lang):
    """A line number, or 'snapshot' for what a memory snapshot recorded (it has no lines)."""
    if e.line == 0 and e.marker in ("oom_error", "frame"):
        return label("snapshot_short", lang)
    return ("~" if e.approximate else "") + str(e.line)


def fact_rows(facts):
    keys = ("framework", "model", "method", "precision", "quantization_bit", "batch", "grad_accum", "seq_len",
            "grad_ckpt", "deepspeed", "num_gpus", "step", "total_steps", "eval_batch", "gpu")
    rows = [(k, facts[k]) for k in keys if facts.get(k) is not None]
    if facts.get("job_kind") not in (None, "training"):      # the plan follows the job: say which
        rows.insert(0, ("job_kind", facts["job_kind"]))
    return rows


def headline(d, lang):
    """'GPU out of memory: title', without the verdict again when the title already starts with it."""
    verdict = label(d.verdict, lang)
    if d.title.startswith(verdict) or not d.title:
        return d.title or verdict
    return verdict + colon(lang) + d.title


def conflict_text(c, lang):
    if lang == "zh":
        from ..core.i18n import FACTS
        return f"{FACTS.get(c['fact'], c['fact'])}：日志 {c['log']} / 配置 {c['config']}"
    return f"{c['fact']}: log {c['log']} / config {c['config']}"


def render_text(d, lang="en", color=False, width=None):
    """The report for a person: what failed and what to change first (the plan and the patch), then
    the numbers, the budget and the evidence behind them; prose wrapped to `width` columns (the
    terminal's by default), the patch and the command never (they are pasted as they are)."""
    L = lambda k: label(k, lang)  # noqa: E731
    zh = lang == "zh"
    sep = colon(lang)
    width = width or report_width()
    bad = d.verdict in ("device_oom", "host_oom")
    out = []

    def add(line="", col=None):
        out.extend(_c(piece, col, color) if col else piece for piece in wrap(line, width))

    add(headline(d, lang), "red" if bad else "green")
    if d.run_folder:                        # which files of the run folder were read, in one line (paths)
        out.append(_c(d.run_folder["line"], "dim", color))
    add()
    add(d.summary)
    add()
    conf = f"（{L('confidence')} {d.confidence:.2f}）" if zh else f" ({L('confidence')} {d.confidence:.2f})"
    add(f"  {L('phase')}{sep}{L(d.phase)}    {L('component')}{sep}{L(d.component)}    {L('rule')}{sep}{d.rule}{conf}")
    if basis_line(d, lang):
        add("  " + basis_line(d, lang), "dim")
    for ln in readings_lines(d, lang):
        add(ln)
    if d.plan:
        add()
        add(L("plan"), "bold")
        for i, (step, basis) in enumerate(zip(d.plan, bases(d.plan)), 1):
            add(f"  {i}. {step_line(step, lang, basis)}")
            if step.get("why"):
                add(f"     {step['why']}", "dim")
    if d.patch:
        out.extend(["", _c(L("patch"), "bold", color)])
        for ln in d.patch.rstrip("\n").splitlines():
            col = "green" if ln.startswith("+") and not ln.startswith("+++") else \
                  "red" if ln.startswith("-") and not ln.startswith("---") else None
            out.append("  " + (_c(ln, col, color) if col else ln))
    if d.command:
        out += ["", _c(L("command"), "bold", color)]
        for ln in d.command.rstrip("\n").splitlines():       # long ones continued with ` \`, as a shell reads them
            out += ["  " + piece for piece in (wrap_command(ln, width - 2) if not ln.endswith("\\") else [ln])]
    rows = memory_rows(d.memory, lang)
    if rows:
        add()
        add(L("numbers"), "bold")
        from .budget_text import pad
        for k, v in rows:
            add(f"  {pad(k, 28)} {v}")
    if d.snapshot:
        add()
        add(snapshot_head(d.snapshot, lang), "bold")
        for ln in snapshot_lines(d.snapshot, lang):
            add(ln)
    if d.budget:
        from .budget_text import assumed_lines, budget_lines
        add()
        add(L("budget"), "bold")
        for ln in budget_lines(d.budget, lang, d.memory) + assumed_lines(d.budget, lang):
            add(ln)
    if d.conflicts:
        add()
        add(L("conflicts"), "yellow")
        for c in d.conflicts:
            add(f"  {conflict_text(c, lang)}")
    for note in d.notes:
        add()
        add("! " + note, "yellow")
    add()
    add(L("evidence"), "bold")
    for e in d.evidence:                    # quotes of the log: one line each, cut to the width
        n = evidence_where(e, lang)
        if not n[-1:].isdigit():
            line = f"  {n:>10}  {e.text[:160]}" if zh else f"  {n:>12}  {e.text[:160]}"
        else:
            line = f"  {'第 ' + n + ' 行':>10}  {e.text[:160]}" if zh else f"  {L('line')} {n:>7}  {e.text[:160]}"
        out.append(clip(line, width))
    facts = fact_rows(d.facts)
    if facts:
        add()
        add(L("facts"), "bold")
        add("  " + facts_line(facts, lang))
    if d.earlier_failures:
        add()
        add(f"  {L('earlier')}{sep}{d.earlier_failures}")
    return "\n".join(out) + "\n"


NEEDS = {"en": {"lines above the traceback": "the lines above the traceback", "config": "the training config",
                "model": "the model's name (--model) or size (--params)", "gpu": "the GPU (--gpu)"},
         "zh": {"lines above the traceback": "报错上方的几行日志", "config": "训练配置文件",
                "model": "模型名称（--model）或参数量（--params）", "gpu": "显卡型号（--gpu）"}}


def readings_lines(d, lang="en"):
    """When the log says little: the readings the numbers allow (most likely first) and what would decide."""
    zh = lang == "zh"
    out = []
    if d.hypotheses:
        sep = "；" if zh else "; "
        said = sep.join(f"{label(h['component'], lang)}{'：' if zh else ': '}{h['why']}" for h in d.hypotheses[:3])
        out.append(("  数字支持的解读：" if zh else "  The numbers allow: ") + said)
        out.append(("  可以这样确认：" if zh else "  To confirm: ") + d.hypotheses[0]["confirm"])
    if d.needs:
        words = NEEDS["zh" if zh else "en"]
        joined = ("、" if zh else ", ").join(words.get(n, n) for n in d.needs)
        out.append(("  能确定原因的信息：" if zh else "  What would decide it: ") + joined)
    return out


def show_value(value, lang="en"):
    if value is None:
        return "（未设置）" if lang == "zh" else "unset"
    return str(value).lower() if isinstance(value, bool) else str(value)


def change_text(step, lang="en"):
    """A step's changes as 'key: old → new' lines, or what to do outside the config."""
    changes = step.get("changes") or {}
    return [f"{k}: {show_value(v[0], lang)} → {show_value(v[1], lang)}" for k, v in changes.items()] or \
        [step.get("display") or ""]


def bases(plan):
    """For each step, the earlier main steps its estimate already includes.

    The plan applies its main steps one after another, so a main step's saving and its "fits" are
    on top of the main steps above it; alternatives are estimated on top of all main steps. Steps
    outside the estimate (no `fits_after`) change nothing it measures and are not counted.
    """
    out, main = [], []
    for i, step in enumerate(plan or [], 1):
        out.append(list(main))
        if not step.get("alternative") and step.get("fits_after") is not None:
            main.append(i)
    return out


def saves_text(step, lang, basis=()):
    gib = step.get("saves_gib")
    if not gib:
        return ""
    if step["action"] == "expandable_segments":
        return f"最多可回收约 {gib:.1f} GiB 已预留未分配的显存" if lang == "zh" else \
            f"frees up to ~{gib:.1f} GiB held as reserved but unallocated"
    if lang == "zh":
        return (f"在{steps_ref(basis, lang)}之上再节省约 {gib:.1f} GiB" if basis else f"节省约 {gib:.1f} GiB")
    return f"saves ~{gib:.1f} GiB" + (f" on top of {steps_ref(basis, lang)}" if basis else "")


def fits_text(step, lang, basis=()):
    fits = step.get("fits_after")
    if fits is None:
        return ""
    if lang == "zh":
        with_ = f"连同{steps_ref(basis, lang)}" if basis else ""
        return with_ + ("放得下（留 20% 余量）" if fits else "仍然放不下")
    with_ = f" with {steps_ref(basis, lang)}" if basis else ""
    return ("fits" + with_ + " (20 % margin)") if fits else ("still short" + with_)


def applies_text(step, lang):
    from ..plans.planwords import MANUAL
    key = step.get("applicability") or ""
    if key == "display" and step["action"] in MANUAL:
        key = "manual"
    return label(key, lang) if key else ""


def step_line(step, lang, basis=()):
    zh = lang == "zh"
    name = action_name(step["action"], lang)
    if step.get("alternative"):
        name = "备选：" + name if zh else name + " (alternative)"
    change = ("，" if zh else ", ").join(t for t in change_text(step, lang) if t)
    rest = [t for t in (saves_text(step, lang, basis), fits_text(step, lang, basis)) if t]
    tag = applies_text(step, lang)
    if zh:
        line = name + ("：" + change if change else "") + "".join("；" + t for t in rest)
        return line + (f"【{tag}】" if tag else "")
    return " — ".join([name] + ([change] if change else []) + rest + ([f"[{tag}]"] if tag else []))
