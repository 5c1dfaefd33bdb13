"""Plain-text report for a terminal; colour only when asked (a TTY without NO_COLOR)."""

from ..i18n import label
from ..units import fmt_gib

_COLORS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2", "cyan": "36"}


def _c(text, color, on):
    return f"\x1b[{_COLORS[color]}m{text}\x1b[0m" if on else text




def memory_rows(memory, lang):
    keys = ("total_gib", "free_gib", "tried_gib", "allocated_by_pytorch_gib", "reserved_unallocated_gib",
            "process_in_use_gib", "other_processes_gib", "other_allocations_gib")
    return [(label(k, lang), fmt_gib(memory.get(k))) for k in keys if memory.get(k) is not None]


def fact_rows(facts):
    keys = ("framework", "model", "method", "precision", "quantization_bit", "batch", "grad_accum", "seq_len",
            "grad_ckpt", "deepspeed", "num_gpus", "step", "total_steps", "eval_batch", "gpu")
    return [(k, facts[k]) for k in keys if facts.get(k) is not None]


def render_text(d, lang="en", color=False):
    L = lambda k: label(k, lang)  # noqa: E731
    bad = d.verdict in ("device_oom", "host_oom")
    out = [_c(f"{L(d.verdict)}: {d.title}", "red" if bad else "green", color), "", d.summary, ""]
    out.append(f"  {L('phase')}: {L(d.phase)}    {L('component')}: {L(d.component)}    "
               f"{L('rule')}: {d.rule} ({L('confidence')} {d.confidence:.2f})")
    rows = memory_rows(d.memory, lang)
    if rows:
        out += ["", _c(L("numbers"), "bold", color)]
        from .budget_text import pad
        out += [f"  {pad(k, 28)} {v}" for k, v in rows]
    if d.budget:
        from .budget_text import budget_lines
        out += ["", _c(L("budget"), "bold", color)] + budget_lines(d.budget, lang, d.memory)
    if d.plan:
        out += ["", _c(L("plan"), "bold", color)]
        for i, step in enumerate(d.plan, 1):
            out.append(f"  {i}. {step_line(step, lang)}")
            if step.get("why"):
                out.append(_c(f"     {step['why']}", "dim", color))
    if d.patch:
        out += ["", _c(L("patch"), "bold", color)]
        for ln in d.patch.rstrip("\n").splitlines():
            col = "green" if ln.startswith("+") and not ln.startswith("+++") else \
                  "red" if ln.startswith("-") and not ln.startswith("---") else None
            out.append("  " + (_c(ln, col, color) if col else ln))
    if d.command:
        out += ["", _c(L("command"), "bold", color)] + ["  " + ln for ln in d.command.rstrip("\n").splitlines()]
    if d.conflicts:
        out += ["", _c(L("conflicts"), "yellow", color)]
        out += [f"  {c['fact']}: log {c['log']} / config {c['config']}" for c in d.conflicts]
    for note in d.notes:
        out += ["", _c("! " + note, "yellow", color)]
    out += ["", _c(L("evidence"), "bold", color)]
    out += [f"  {L('line')} {('~' if e.approximate else '') + str(e.line):>7}  {e.text[:160]}" for e in d.evidence]
    facts = fact_rows(d.facts)
    if facts:
        out += ["", _c(L("facts"), "bold", color), "  " + ", ".join(f"{k}={v}" for k, v in facts)]
    if d.earlier_failures:
        out += ["", f"  {L('earlier')}: {d.earlier_failures}"]
    return "\n".join(out) + "\n"


def show_value(value):
    if value is None:
        return "unset"
    return str(value).lower() if isinstance(value, bool) else str(value)


def change_text(step):
    """A step's changes as 'key: old → new' lines, or what to do outside the config."""
    changes = step.get("changes") or {}
    return [f"{k}: {show_value(v[0])} → {show_value(v[1])}" for k, v in changes.items()] or [step.get("display") or ""]


def step_line(step, lang):
    change = ", ".join(t for t in change_text(step) if t)
    bits = [step["action"]]
    if change:
        bits.append(change)
    if step.get("saves_gib"):
        bits.append(f"{label('saves', lang)} ~{step['saves_gib']:.1f} GiB")
    if step.get("fits_after") is not None:
        bits.append(label("fits", lang) if step["fits_after"] else label("not_fit", lang))
    if step.get("applicability"):
        bits.append(f"[{label(step['applicability'], lang)}]")
    return " — ".join(bits)
