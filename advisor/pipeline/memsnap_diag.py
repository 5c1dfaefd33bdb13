"""A memory snapshot -> the usual Diagnosis: what filled the card at the OOM, measured, not guessed.

The snapshot's numbers are written as the OOM message PyTorch would have printed, with the OOM
entry's Python stack as its traceback, and that text goes through the same rules as a log: one
decision procedure, whatever the witness. What only a snapshot knows then replaces the estimates:
the exact allocator numbers, the live memory by component (from each block's own stack), the
largest free hole against the request (fragmentation measured, not inferred from totals), and the
phase from what is live (no optimizer state yet: the first step).
"""

import io
import re
from collections import defaultdict

from ..diagnosis.diagnose import Evidence, fill, text_values
from ..evidence.frames import read_frame
from ..read.memsnap import ACTIVE, INACTIVE, PENDING, SMALL_SIZE, load, parse
from ..evidence.timeline import Frame
from ..core.units import round_gib

GIB = 2**30
# The autograd engine's thread has no Python stack: its C++ frame names are all there is
_GRAD_CPP = re.compile(r"AccumulateGrad|autograd::Engine|autograd::generated|evaluate_function|Backward\d*::apply")
_LOAD_ONLY = {"load": "weights", "train": "activations", "first_step": "activations"}
TOP = 8


def _py(frames):
    return [f for f in frames if str(f.get("filename", "")).endswith(".py")]


def _frame(f):
    return Frame(path=str(f.get("filename", "")), func=str(f.get("name", "")), line=0, source="", rank=None)


def component_of(frames):
    """(component, what decided) for one allocation's stack, innermost frame first."""
    readings = [(f, read_frame(_frame(f))) for f in _py(frames)]
    for f, r in readings:                    # anything allocated under an evaluation loop is its output
        if r is not None and r.phase == "evaluation":
            return "eval_outputs", r.what
    for f in frames:
        name, path = str(f.get("name", "")), str(f.get("filename", ""))
        if path.endswith(".py"):
            r = read_frame(_frame(f))
            if r is not None and r.component:
                return r.component, r.what
        elif _GRAD_CPP.search(name):
            return "gradients", name[:80]
    for f, r in readings:
        if r is not None and r.phase in _LOAD_ONLY:
            return _LOAD_ONLY[r.phase], r.what
    return "unknown", ""


def site_of(frames, comp="unknown", what=""):
    """Where an allocation came from, for grouping: the innermost frame outside torch itself, but
    the optimizer's or the autograd engine's own frame for their states and gradients."""
    if comp in ("optimizer_states", "gradients") and what:
        return what.split("(", 1)[0]
    py = _py(frames)
    mine = [f for f in py if "/torch/" not in str(f.get("filename", "")).replace("\\", "/")]
    f = (mine or py or frames or [None])[0]
    if f is None:
        return "<no stack recorded>"
    return f"{str(f.get('filename', '')).rsplit('/', 1)[-1]}:{f.get('line', '?')}:{f.get('name', '?')}"


def _classify(frames, seen):
    """(component, site) of one stack; a training loop allocates from the same few stacks over and
    over, so each distinct stack is read once."""
    try:
        key = tuple((f.get("filename"), f.get("name"), f.get("line")) for f in frames)
    except AttributeError:                   # a damaged file: a frame that is not a dict is skipped
        frames = [f for f in frames if isinstance(f, dict)]
        key = tuple((f.get("filename"), f.get("name"), f.get("line")) for f in frames)
    hit = seen.get(key)
    if hit is None:
        comp, what = component_of(frames)
        hit = seen[key] = (comp, site_of(frames, comp, what))
    return hit


def measure(snap):
    """The allocator's state on the OOM device (else the fullest one), as plain numbers and tables."""
    devices = {s.device for s in snap.segments}
    dev = snap.oom_device if snap.oom_device is not None else max(
        devices, key=lambda d: sum(s.total for s in snap.segments if s.device == d), default=0)
    segs = [s for s in snap.segments if s.device == dev]
    request = snap.oom.get("size") if snap.oom else None
    # a request above 1 MiB can only be served by the large pool (CUDACachingAllocator get_pool)
    large = request is None or request > SMALL_SIZE
    sums, by_comp, sites, holes, seen = defaultdict(int), defaultdict(int), {}, [], {}
    for s in segs:
        for b in s.blocks:
            sums[b.state] += b.size
            if b.state == INACTIVE and s.large == large:
                holes.append(b.size)
            if b.state != ACTIVE:
                continue
            for p in b.parts or [None]:
                size, frames = (p.size, p.frames) if p is not None else (b.size, [])
                comp, where = _classify(frames, seen)
                by_comp[comp] += size
                site = sites.setdefault(where, {"component": comp, "bytes": 0, "count": 0})
                site["bytes"] += size
                site["count"] += 1
    holes.sort(reverse=True)
    reserved = sum(s.total for s in segs)
    top = sorted(sites.items(), key=lambda kv: -kv[1]["bytes"])[:TOP]
    return {
        "device": dev, "layout": snap.layout, "segments": len(segs), "reserved": reserved,
        "allocated": sums[ACTIVE], "pending_free": sums[PENDING], "inactive": sums[INACTIVE],
        "request": request, "device_free": snap.oom.get("device_free") if snap.oom else None,
        "largest_free": holes[0] if holes else 0, "holes": holes[:5], "by_component": dict(by_comp),
        "top": [{"site": k, **v} for k, v in top], "oom_frames": [f for f in (snap.oom or {}).get("frames") or [] if isinstance(f, dict)],
        "expandable_segments": snap.settings.get("expandable_segments"), "oom_count": snap.oom_count,
    }


def _mib(n):
    return f"{n / 2**20:.2f} MiB"


def as_log(m, total_gib=None):
    """The OOM message PyTorch prints (2.3+ wording when the card's size is known, else 1.x's)."""
    lines = [f"# read from a CUDA memory snapshot: device {m['device']}, {m['segments']} segments"]
    if m["request"] is None:
        return "\n".join(lines + ["# the snapshot records no out-of-memory event"]) + "\n"
    py = _py(m["oom_frames"])
    if py:
        lines.append("Traceback (most recent call last):")
        lines += [f'  File "{f.get("filename")}", line {f.get("line", 0)}, in {f.get("name")}' for f in reversed(py)]
    tried, free = _mib(m["request"]), _mib(m["device_free"] or 0)
    alloc, unalloc = _mib(m["allocated"]), _mib(m["reserved"] - m["allocated"])
    if total_gib:
        lines.append(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {m['device']} has a "
                     f"total capacity of {total_gib * 1024:.2f} MiB of which {free} is free. Of the allocated memory "
                     f"{alloc} is allocated by PyTorch, and {unalloc} is reserved by PyTorch but unallocated.")
    else:
        lines.append(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried} (GPU {m['device']}; "
                     f"{alloc} already allocated; {free} free; {_mib(m['reserved'])} reserved in total by PyTorch)")
    return "\n".join(lines) + "\n"


def fragmented(m):
    """Measured: the inactive cache could hold the request, yet no single hole can."""
    return m["request"] is not None and m["inactive"] >= m["request"] > m["largest_free"]


def diagnose_snapshot(stream, source, config_path=None, lang="en", gpu=None, model=None, params=None,
                      with_plan=True):
    from ..evidence.fastpath import timeline_of
    from ..diagnosis.diagnose import diagnose_timeline
    from ..plans.runspec import resolve_gpu
    m = measure(parse(load(stream, source)))
    card, _ = resolve_gpu(gpu=gpu) if gpu else (None, None)
    total = card.capacity_gib if card is not None else None
    t = timeline_of(io.BytesIO(as_log(m, total).encode()), source)
    live = m["by_component"]
    if m["request"] is not None:
        # the phase from what is live: optimizer states exist once a step has reached the optimizer,
        # and AdamW's _init_group creating them is that first step
        if not live.get("optimizer_states"):
            t.context.step = 1
        elif not any(f.get("name") == "_init_group" for f in m["oom_frames"]):
            t.context.step = 2
    config = None
    if config_path:
        from ..read.config import load_config
        config = load_config(config_path)
    d = diagnose_timeline(t, lang=lang, facts=config.facts if config else None)
    _refine(d, m, lang)
    d.facts["step"] = None                  # the step above was a phase hint; the snapshot has no step number
    if config is not None:
        d.conflicts = config.conflicts_with(t.facts)
    if with_plan:
        from ..plans.advise import complete
        complete(d, config=config, gpu=gpu, model=model, params=params)
    return d


def _refine(d, m, lang):
    from ..diagnosis.rules import rules_by_id
    g = lambda n: None if n is None else round_gib(n / GIB, 4)  # noqa: E731
    live = {k: g(v) for k, v in sorted(m["by_component"].items(), key=lambda kv: -kv[1])}
    d.memory.update({"reserved_gib": g(m["reserved"]), "pending_free_gib": g(m["pending_free"]),
                     "largest_free_block_gib": g(m["largest_free"]), "live_by_component_gib": live})
    if m["request"] is not None:
        d.memory.update({"tried_gib": g(m["request"]), "free_gib": g(m["device_free"]),
                         "allocated_by_pytorch_gib": g(m["allocated"]),
                         "reserved_unallocated_gib": g(m["reserved"] - m["allocated"]), "device_index": m["device"]})
    d.snapshot = {"layout": m["layout"], "device": m["device"], "segments": m["segments"],
                  "oom_events": m["oom_count"], "live_by_component_gib": live,
                  "largest_free_blocks_gib": [g(h) for h in m["holes"]], "inactive_gib": g(m["inactive"]),
                  "fragmented": fragmented(m), "expandable_segments": m["expandable_segments"],
                  "top_allocations": [{"site": s["site"], "component": s["component"], "gib": g(s["bytes"]),
                                       "count": s["count"]} for s in m["top"]]}
    if d.verdict != "device_oom":
        return
    if fragmented(m) and d.rule != "OOM501":
        rule = rules_by_id()["OOM501"]
        values = text_values(d.memory, d.facts.get("step"), d.facts.get("total_steps"), d.phase)
        d.rule, d.title, d.confidence = rule.id, getattr(rule.title, lang), rule.confidence
        d.summary, d.explanation = fill(getattr(rule.summary, lang), values), fill(getattr(rule.explanation, lang), values)
    named = component_of(m["oom_frames"])
    if fragmented(m):
        d.component = "fragmentation"
        d.basis["component"] = (f"snapshot: largest free block {_mib(m['largest_free'])} < request "
                                f"{_mib(m['request'])}, though {_mib(m['inactive'])} is cached and free")
    elif named[0] != "unknown":
        d.component, d.basis["component"] = named[0], f"snapshot: the failed allocation's stack ({named[1]})"
    elif live:
        top = max((k for k in live if k != "unknown"), key=lambda k: live[k], default=None)
        if top:
            d.component, d.basis["component"] = top, f"snapshot: largest live component ({top}, {live[top]} GiB)"
    if d.phase in ("first_step", "mid_training") and "progress: step" in d.basis.get("phase", ""):
        why = "optimizer states live: a step had completed" if d.phase == "mid_training" else \
            "no optimizer state live yet"
        d.basis["phase"] = re.sub(r"progress: step \d+", f"snapshot: {why}", d.basis["phase"])
    d.evidence = _evidence(m)
    if m["expandable_segments"] and d.component == "fragmentation":
        d.notes.append("expandable_segments 已经开启：碎片来自别处（例如多个 stream 或 CUDA graph 的私有池）。" if lang == "zh"
                       else "expandable_segments is already on: the fragmentation comes from elsewhere "
                            "(several streams, or a CUDA graph's private pool).")


def _evidence(m):
    if m["request"] is None:
        return []
    ev = [Evidence(line=0, text=f"snapshot oom event: request {_mib(m['request'])}, CUDA free "
                   f"{_mib(m['device_free'] or 0)}, device {m['device']}", marker="oom_error")]
    py = _py(m["oom_frames"])
    # the allocating frame, and the first frame of the program or framework that called into torch
    mine = [f for f in py if "/torch/" not in str(f.get("filename", "")).replace("\\", "/")]
    for f in ([py[0]] if py else []) + [f for f in mine[:1] if f is not (py[0] if py else None)]:
        ev.append(Evidence(line=0, text=f"{f.get('filename')}: {f.get('name')}", marker="frame"))
    return ev
