"""HTML report: one self-contained page (inline CSS and SVG, no script, no network), from jinja2 templates.

Geometry is computed here and markup lives in `advisor/templates/`. Every bar shares one scale per
picture (`scale` GiB = BAR_W user units), so the card's capacity and the 20 % margin line sit at the
same x on every bar. The SVGs stretch to the page width (preserveAspectRatio="none") and carry no
text: labels are HTML, so they wrap on a phone and translate with `--lang`.
"""

import functools
import os

from ..memory.budget import MARGIN, RESERVE_GIB, estimate
from ..core.i18n import HTML_WORDS as WORDS, action_name, colon, label

BAR_W = 1000                                   # SVG user units of a bar's full width
COMPONENTS = ("weights", "gradients", "optimizer_states", "activations", "logits", "working_buffers", "overhead")
ALLOC_PARTS = ("allocated", "reserved", "others", "context")
TL_LOAD = (0.0, 150.0)                         # timeline zones in user units: loading, then training
TL_TRAIN = (170.0, 1000.0)
_END_MARKERS = {"oom_error", "error", "killed", "host_oom"}       # evidence markers of the failure itself



def word(key, lang, **kw):
    text = WORDS.get(lang, WORDS["en"]).get(key) or label(key, lang)
    return text.format(**kw) if kw else text


def gib(x):
    if x is None:
        return "—"
    return f"{x * 1024:.0f} MiB" if abs(x) < 1 else f"{x:.2f} GiB"


# ---- geometry --------------------------------------------------------------------------------------
def segments(parts, scale):
    """[(key, GiB)] -> SVG rect specs laid end to end; zero parts get no rect."""
    out, x = [], 0.0
    for key, value in parts:
        if not value or value <= 0:
            continue
        w = BAR_W * value / scale
        out.append({"key": key, "gib": value, "x": round(x, 2), "w": round(w, 2), "name": key})
        x += w
    return out


def budget_parts(b):
    return [(k, b.get(f"{k}_gib") or 0.0) for k in COMPONENTS]


def alloc_parts(m):
    """The allocator's own split of the card: PyTorch's, cached, other processes, the rest; free is the track."""
    total, free = m.get("total_gib"), m.get("free_gib")
    alloc, res, others = (m.get(k) or 0.0 for k in ("allocated_by_pytorch_gib", "reserved_unallocated_gib",
                                                     "other_processes_gib"))
    used = total - free if total is not None and free is not None else alloc + res + others
    if total is not None:
        used = min(used, total)
    rest = max(0.0, round(used - alloc - res - others, 4))
    return [("allocated", alloc), ("reserved", res), ("others", others), ("context", rest)], used


def picture(rows, capacity=None, usable=None, lang="en"):
    """Rows [{name, parts, total, ...}] -> one shared scale, rect specs per row, capacity and margin x."""
    if capacity and usable is None:
        usable = capacity - RESERVE_GIB
    ends = [r.get("end") or sum(v for _, v in r["parts"]) for r in rows]
    scale = max([capacity or 0.0] + ends) / 0.96 or 1.0
    x = lambda g: round(BAR_W * g / scale, 2)  # noqa: E731
    for r in rows:
        for key in ("note", "delta", "tried", "tried_x", "tried_w", "items"):
            r.setdefault(key, None)
        r["segs"] = segments(r["parts"], scale)
        for s in r["segs"]:
            s["name"] = _part_name(r, s["key"], lang)
        if r["tried"]:
            r["tried_x"], r["tried_w"] = x(r["used"]), x(r["tried"])
    margin = (1 - MARGIN) * usable if usable else None
    return {"rows": rows, "scale": round(scale, 4), "bar_w": BAR_W, "capacity": capacity, "usable": usable,
            "capacity_x": x(capacity) if capacity else None, "margin_gib": margin,
            "margin_x": x(margin) if margin else None,
            "legend": _legend(rows, lang)}


def _part_name(row, key, lang):
    return (row.get("names") or {}).get(key) or (word(key, lang) if key in ALLOC_PARTS else label(key + "_gib", lang))


def _legend(rows, lang):
    seen, out = set(), []
    for r in rows:
        for s in r["segs"]:
            if s["key"] not in seen:
                seen.add(s["key"])
                out.append({"key": s["key"], "text": s["name"]})
    return out


def budget_row(name, b, lang, **extra):
    parts = budget_parts(b)
    return dict(name=name, kind="budget", parts=parts, total=b.get("total_gib"), fits=b.get("fits"),
                items=[(label(k + "_gib", lang), gib(v)) for k, v in parts if v], **extra)


def alloc_row(m, lang):
    parts, used = alloc_parts(m)
    tried = m.get("tried_gib")
    row = dict(name=word("row_alloc", lang), kind="alloc", parts=parts, total=used, used=used, tried=tried,
               end=used + (tried or 0.0), fits=None)
    ctx_word = "context" if m.get("other_processes_gib") is not None else "context_or_others"
    row["names"] = {"context": word(ctx_word, lang)}
    row["items"] = [(word(ctx_word if k == "context" else k, lang), gib(v)) for k, v in parts if v] + \
        [(word("free", lang), gib(m.get("free_gib")))] + ([(word("tried", lang), gib(tried))] if tried else [])
    return row


def snapshot_row(d, lang):
    """What a memory snapshot saw live at the OOM, by component, then the cache, then the request."""
    snap, mem = d.snapshot, d.memory or {}
    live = dict(snap["live_by_component_gib"])
    other = sum(live.pop(k, 0.0) or 0.0 for k in list(live) if k not in COMPONENTS)
    parts = [(k, live.get(k) or 0.0) for k in COMPONENTS] + [("overhead", other),
                                                               ("reserved", mem.get("reserved_unallocated_gib") or 0.0)]
    used = sum(v for _, v in parts)
    tried = mem.get("tried_gib")
    holes = ", ".join(gib(h) for h in snap["largest_free_blocks_gib"][:3]) or "—"
    row = dict(name=label("snapshot", lang), kind="snapshot", parts=parts, total=used, used=used, tried=tried,
               end=used + (tried or 0.0), fits=None,
               names={"overhead": label("unknown", lang), "reserved": word("reserved", lang)})
    row["items"] = [(label(k, lang) if k not in ("reserved", "overhead") else row["names"][k], gib(v))
                    for k, v in parts if v] + [(label("snap_holes", lang), holes)] + \
        ([(word("tried", lang), gib(tried))] if tried else []) + \
        [(t["site"], f"{label(t['component'], lang)} {gib(t['gib'])}") for t in snap["top_allocations"][:3]]
    return row


# ---- the "after the plan" estimate ---------------------------------------------------------------
def spec_of(d):
    """The Spec behind d.budget, rebuilt from the facts (None when it does not reproduce the budget)."""
    from ..plans.runspec import spec_from_facts
    b = d.budget
    try:
        spec, _ = spec_from_facts(d.facts, d.memory, model=b.get("model"))
        if spec is None or spec.model.name != b.get("model"):
            spec, _ = spec_from_facts(d.facts, d.memory, params=f"{b.get('params_b')}B")
    except Exception:
        return None
    if spec is None:
        return None
    spec = spec.model_copy(update={"capacity_gib": b.get("capacity_gib")})
    return spec if abs(estimate(spec).total_gib - b["total_gib"]) <= 0.02 * b["total_gib"] + 0.05 else None


def after_plan(d, spec):
    """(Budget, [actions applied]): the plan's main steps (not the alternatives) applied in order."""
    from ..plans.plan import BUILDERS, Context, observed_need
    c = Context(d, spec, None, d.lang)
    seen = observed_need(d.memory or {})
    c.gap = max(0.0, seen - estimate(spec).total_gib) if seen else 0.0
    current, applied = spec, []
    for step in d.plan or []:
        if step.get("alternative") or step["action"] not in BUILDERS:
            continue
        built = BUILDERS[step["action"]](c, current)
        if built and built[1]:
            current = current.model_copy(update=built[1])
            applied.append(step["action"])
    return estimate(current), applied


# ---- timeline ------------------------------------------------------------------------------------
def timeline(d, lang):
    f = d.facts or {}
    step, total = f.get("step"), f.get("total_steps")
    if step is None and d.phase == "first_step":
        step = 0
    l0, l1 = TL_LOAD
    t0, t1 = TL_TRAIN
    kind = {"no_failure": "end", "incomplete": "cut"}.get(d.verdict, "fail")
    tl = {"load_x": l0, "load_w": l1 - l0, "train_x": t0, "train_w": t1 - t0, "step": step, "total": total,
          "kind": kind, "load_pct": round(100 * (l1 - l0) / BAR_W, 2), "trained": d.phase != "load"}
    if d.phase == "load":
        x, where = l0 + 0.8 * (l1 - l0), label("load", lang)
        tl["load_done_w"] = x - l0
    elif step is not None:
        frac = min(1.0, step / total) if total else 0.5
        x = t0 + (t1 - t0) * frac
        where = word("step_of", lang, step=step, total=total) if total else word("step_only", lang, step=step)
        tl["load_done_w"] = l1 - l0
    else:
        x, where = None, word("where_unknown", lang)
        tl["load_done_w"] = l1 - l0 if d.phase not in ("unknown", "none", "inference") else 0
    tl["x"] = round(x, 2) if x is not None else None
    tl["done_w"] = round(max(0.0, x - t0), 2) if x is not None and x >= t0 else 0
    tl["pct"] = round(100 * x / BAR_W, 2) if x is not None else None
    head = word({"fail": "failed_at", "cut": "cut_at", "end": "ended_at"}[kind], lang)
    phase = f" · {label(d.phase, lang)}" if d.phase not in ("none", "unknown", "load") else ""
    tl["caption"] = f"{head}{colon(lang)}{where}{phase}"
    tl["events"] = _events(d, lang)
    return tl


def _events(d, lang):
    out = []
    for e in sorted(d.evidence, key=lambda e: e.line):
        if e.marker in ("frame", "oom_numbers") or e.line == 0:     # line 0: a snapshot's record, not a log line
            continue
        key = "ev_end" if e.marker in _END_MARKERS else f"ev_{e.marker}"
        name = word(key, lang) if key in WORDS["en"] else marker_name(e.marker, lang)
        out.append({"line": e.line, "name": name, "end": key == "ev_end", "text": e.text})
    return out


def marker_name(marker, lang):
    """An evidence marker's name for a reader ('frame' -> '调用栈'); an unknown one as it is."""
    for key in (f"ev_{marker}", f"mk_{marker}"):
        if key in WORDS["en"]:
            return word(key, lang)
    return word("ev_end", lang) if marker in _END_MARKERS else marker


# ---- pages ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _env():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")
    env = Environment(loader=FileSystemLoader(here), autoescape=select_autoescape(["html", "j2"], default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["gib"] = gib
    return env


def _page(template, lang, **ctx):
    from .. import __version__
    L = lambda k, **kw: word(k, lang, **kw)  # noqa: E731
    P = lambda text: f"（{text}）" if lang == "zh" else f" ({text})"  # noqa: E731
    return _env().get_template(template).render(lang=lang, html_lang="zh-CN" if lang == "zh" else "en", L=L,
                                                C=colon(lang), P=P, pct=" %" if lang != "zh" else "%",
                                                M=lambda m: marker_name(m, lang), version=__version__, **ctx)


def diff_lines(patch):
    out = []
    for ln in (patch or "").rstrip("\n").splitlines():
        cls = "file" if ln.startswith(("+++", "---")) else "hunk" if ln.startswith("@@") else \
              "add" if ln.startswith("+") else "del" if ln.startswith("-") else "ctx"
        out.append((cls, ln))
    return out


def render_html(d, lang="en"):
    from .text import fact_rows, memory_rows
    mem = d.memory or {}
    rows, note, pic = [], None, None
    capacity = mem.get("total_gib") or (d.budget or {}).get("capacity_gib")
    if d.budget:
        from .budget_text import observed_line
        seen = observed_line(d.budget, mem, lang)    # the estimate fits, the allocator saw more: say so
        rows.append(budget_row(word("row_estimate", lang), d.budget, lang, note=seen.strip() if seen else None))
        if seen:
            rows[-1]["fits"] = False
    if mem.get("total_gib") is not None and (mem.get("allocated_by_pytorch_gib") is not None or
                                              mem.get("free_gib") is not None):
        rows.append(alloc_row(mem, lang))
    if d.snapshot and d.snapshot.get("live_by_component_gib"):
        rows.append(snapshot_row(d, lang))
    if d.budget:
        spec = spec_of(d)
        if spec is not None and d.plan:
            after, applied = after_plan(d, spec)
            if applied:
                moves = "、".join(action_name(a, lang) for a in applied) if lang == "zh" else ", ".join(applied)
                rows.append(budget_row(word("row_after", lang), after.to_json_dict(), lang,
                                       note=word("after_note", lang, moves=moves)))
                judged = [s["fits_after"] for s in d.plan if not s.get("alternative") and s.get("fits_after") is not None]
                if judged:                    # the plan's own verdict (it adds what the allocator saw beyond the estimate)
                    rows[-1]["fits"] = judged[-1]
            else:
                note = word("after_unknown", lang)
    elif rows:
        note = word("needs_model", lang)
    if rows:
        usable = (d.budget or {}).get("usable_gib") if d.budget and d.budget.get("capacity_gib") == capacity else None
        pic = picture(rows, capacity, usable, lang)
    elif d.verdict == "device_oom":
        note = word("no_picture", lang)
    from ..core.i18n import FACTS, fact_value
    from .text import applies_text, bases, change_text, conflict_text, fits_text, headline, saves_text
    plan = [dict(s, n=i, change=change_text(s, lang), name=action_name(s["action"], lang),
                 saves=saves_text(s, lang, basis), fits=fits_text(s, lang, basis), applies=applies_text(s, lang))
            for i, (s, basis) in enumerate(zip(d.plan or [], bases(d.plan)), 1)]
    facts = [(FACTS.get(k, k) if lang == "zh" else k, fact_value(k, v, lang)) for k, v in fact_rows(d.facts or {})]
    return _page("diagnose.html.j2", lang, d=d, pic=pic, pic_note=note, tl=timeline(d, lang), plan=plan,
                 headline=headline(d, lang), conflicts=[conflict_text(c, lang) for c in d.conflicts],
                 diff=diff_lines(d.patch), memory=memory_rows(mem, lang), facts=facts,
                 bad=d.verdict in ("device_oom", "host_oom"), warn=d.verdict in ("not_oom", "incomplete"))


# ---- budget ----------------------------------------------------------------------------------------
def what_ifs(spec, lang):
    """One single-step variant per lever the run still has: [(label, Spec)]."""
    from ..memory.budget import optimizer_kind
    out = []
    if spec.batch > 1:
        out.append((word("wi_batch", lang, a=spec.batch, b=spec.batch // 2), {"batch": spec.batch // 2}))
    if not spec.grad_ckpt:
        out.append((word("wi_ckpt", lang), {"grad_ckpt": True}))
    if spec.seq > 256:
        out.append((word("wi_seq", lang, a=spec.seq, b=spec.seq // 2), {"seq": spec.seq // 2}))
    if spec.precision == "fp32":
        new = "fp16" if spec.bf16_native is False else "bf16"
        out.append((word("wi_precision", lang, a="fp32", b=new), {"precision": new}))
    elif spec.precision == "bf16" and spec.bf16_native is not False:
        out.append((word("wi_precision", lang, a="bf16", b="pure_bf16"), {"precision": "pure_bf16"}))
    if spec.method != "qlora" and spec.quant_bits != 4:
        out.append((word("wi_quant", lang), {"method": "qlora", "quant_bits": 4}))
    if spec.method == "full":
        out.append((word("wi_lora", lang), {"method": "lora"}))
    if spec.method in ("full", "freeze") and optimizer_kind(spec.optim) == "adamw":
        out.append((word("wi_optim", lang), {"optim": "paged_adamw_8bit"}))
    if spec.gpus > 1 and spec.zero < 3:
        out.append((word("wi_zero", lang, n=spec.gpus), {"zero": 3}))
    return [(name, spec.model_copy(update=update)) for name, update in out]


def render_budget_html(budget, spec, lang="en"):
    b = budget.to_json_dict() if hasattr(budget, "to_json_dict") else dict(budget)
    rows = [budget_row(word("row_planned", lang), b, lang)]
    for name, variant in what_ifs(spec, lang):
        v = estimate(variant).to_json_dict()
        delta = round(b["total_gib"] - v["total_gib"], 2)
        rows.append(budget_row(name, v, lang, delta=word("saves_gib" if delta >= 0 else "adds_gib", lang,
                                                          gib=gib(abs(delta)))))
    pic = picture(rows, b.get("capacity_gib"), b.get("usable_gib"), lang)
    verdict = {"fits": "verdict_fits", "tight": "verdict_tight", "short": "verdict_short"}.get(b.get("fit"),
                                                                                           "verdict_nocard")
    from ..core.i18n import assumption_text
    # tight fits without the margin: neither the green of a fit nor the red of a card too small
    shown = {"fits": True, "short": False}.get(b.get("fit"))
    return _page("budget.html.j2", lang, b=b, pic=pic, verdict=word(verdict, lang), fits=shown,
                 assumptions=[assumption_text(a, lang) for a in b.get("assumptions") or []])


# ---- triage ----------------------------------------------------------------------------------------
def hbars(counts, lang):
    top = max(counts.values(), default=0) or 1
    return [{"key": k, "text": word("none_key", lang) if k == "none" else label(k, lang), "n": n,
             "w": round(100 * n / top, 2)} for k, n in counts.items()]


def render_triage_html(report, lang="en"):
    s = report.get("summary") or {}
    charts = [(word(f"by_{k}", lang), hbars(s.get(f"by_{k}") or {}, lang)) for k in ("verdict", "phase", "component")]
    groups = []
    for i, g in enumerate(report.get("groups") or [], 1):
        mem = g.get("memory") or {}
        groups.append(dict(g, n=i, anchor=f"g-{g.get('id', i)}", mem=[
            (word(k, lang), gib(mem.get(k))) for k in ("capacity_gib", "tried_gib") if mem.get(k) is not None] + [
            (label(k, lang), gib(mem.get(k))) for k in ("allocated_by_pytorch_gib", "reserved_unallocated_gib")
            if mem.get(k) is not None]))
    return _page("triage.html.j2", lang, s=s, charts=charts, groups=groups, errors=report.get("errors") or [])


# ---- --open ----------------------------------------------------------------------------------------
def temp_report_path():
    import tempfile
    fd, path = tempfile.mkstemp(prefix="oom-doctor-", suffix=".html")
    os.close(fd)
    return path


def open_in_browser(path):
    """Open `path` in the default browser when one exists; never raises. True when a browser took it."""
    import sys
    import webbrowser
    from pathlib import Path
    if sys.platform.startswith("linux") and not any(os.environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY",
                                                                                  "BROWSER")):
        return False                  # only console browsers (lynx, w3m) could answer: they cannot show the page
    try:
        return bool(webbrowser.get().open(Path(path).resolve().as_uri()))
    except Exception:
        return False
