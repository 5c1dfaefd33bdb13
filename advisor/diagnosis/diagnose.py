"""Diagnose: a Timeline -> verdict, phase, component, numbers and evidence, decided by the rules.

The decision comes from the final failure: the first signal of the strongest kind after the last
real progress (an explicit OOM beats a kill, a kill beats another error, any of them beats the
launcher's cascade). Earlier failures the run recovered from are only counted.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from ..evidence import signals as sig
from ..evidence.frames import read_frame
from .phase import QUOTE_LINES, infer_phase, quoted_call
from ..evidence.lines import NEW_RECORD
from ..core.record import Record
from .rules import Facts as RuleFacts, marginally_fragmented, match
from ..evidence.timeline import Facts, Timeline
from ..evidence.traceback import decisive_frames, frames_of, parse_frame
from ..core.units import fmt_gib, round_gib

SCHEMA = "oom-doctor/diagnosis/v1"
_DEFAULT_COMPONENT = {"load": "weights", "first_step": "activations", "mid_training": "activations",
                      "evaluation": "eval_outputs", "checkpoint_save": "weights", "inference": "activations"}
_NUMBERED = ("caching_allocator", "mps", "malloc_async", "cpu_allocator", "oom_exception", "pinned_host", "tf_allocator",
             "xla_hbm", "mindspore", "paddle", "metal")


@dataclass
class Evidence(Record):
    line: int
    text: str
    marker: str
    approximate: bool = False          # big files: the line number was estimated (see fastpath.py)


@dataclass
class Diagnosis(Record):
    """DESIGN §3's JSON contract, field for field (plus additions: keys may be added, never renamed)."""
    source: str
    verdict: str
    accelerator: str
    phase: str
    component: str
    confidence: float
    rule: str
    summary: str
    evidence: List[Evidence]
    memory: dict
    facts: dict
    budget: Optional[dict] = None
    plan: Optional[list] = None
    patch: Optional[str] = None
    title: str = ""
    explanation: str = ""
    lang: str = "en"
    earlier_failures: int = 0
    ranks: List[int] = field(default_factory=list)
    snippet: Optional[str] = None
    command: Optional[str] = None          # the log's launch command with the plan's changes (no --config)
    conflicts: List[dict] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    basis: dict = field(default_factory=dict)      # what decided the phase and the component
    run_folder: Optional[dict] = None              # the files a run folder's diagnosis used (runfolder.py)
    snapshot: Optional[dict] = None                # read from a PyTorch memory snapshot (memsnap_diag.py)
    hypotheses: List[dict] = field(default_factory=list)   # readings the numbers allow when the log says little
    needs: List[str] = field(default_factory=list)         # the inputs that would decide (readings.py)

    def to_json_dict(self):
        out = {"schema": SCHEMA, **self.model_dump()}
        if out["run_folder"] is None:       # only a run folder's report has it: a log's JSON is as before
            del out["run_folder"]
        return out


def _decisive(signals):
    strong = [s for s in signals if s.kind != sig.CASCADE]
    if not strong:
        return None
    best = min(sig.STRENGTH[s.kind] for s in strong)
    first = [s for s in strong if sig.STRENGTH[s.kind] == best]
    # kernel assertions come before the exception that reports them: that exception (and its
    # traceback) decides, and the assertions only when the paste was cut before it; IPython's header: the message below it decides when the paste kept it
    return next((s for s in first if s.dialect not in ("device_assert", "ipython_header")), first[0])


def _index_of(window, line_no):
    """The last line with that number: output glued after a bar shares the bar's number."""
    found = None
    for i, ln in enumerate(window):
        if ln.no == line_no:
            found = i
        elif ln.no > line_no:
            break
    return found


def _error_block(window, idx, limit=6):
    """The error line and the lines that continue its message (not frames, not blank). A signal
    line that reads as the middle of a sentence (a wrap the reader could not prove) takes the line
    above as the head of its message."""
    text = [window[idx].text]
    head = window[idx - 1].text if idx > 0 else ""
    if (text[0][:1].islower() or text[0][:1] in ".,;:)") and head.strip() and not parse_frame(head) and not NEW_RECORD.match(text[0]):
        text.insert(0, head)
    for ln in window[idx + 1:idx + limit]:
        if not ln.text.strip() or parse_frame(ln.text) or ln.text.startswith("Traceback"):
            break
        text.append(ln.text)
    return "\n".join(text)


_HEADER = "Traceback (most recent call last):"


def _opens_traceback(text):
    """A traceback's header, or the start of one where the paste ends ("…it/s]Traceback (most r")."""
    return _HEADER[:-1] in text or len(text) >= 11 and _HEADER.startswith(text.rstrip())


def _memory(t, window):
    """Numbers of the first OOM message of the final failure that carries numbers."""
    empty = sig.parse_numbers("")
    count = 0
    found = None
    for s in t.signals:
        if s.kind not in (sig.DEVICE_OOM, sig.HOST_OOM) or s.dialect not in _NUMBERED:
            continue
        count += 1
        if found is None:
            idx = _index_of(window, s.line)
            block = sig.oom_block(window, idx) if idx is not None else s.text
            mem = sig.parse_numbers(block)
            if any(v is not None for v in mem.values()):
                found = (mem, s, block)
    mem, s, block = found or (empty, None, "")
    out = {k: round_gib(v, 4) for k, v in mem.items()}
    out["oom_messages"] = count
    out["device_index"] = sig.device_index(block) if block else None
    # distinct devices across the final failure's messages: several GPUs even when no line says so
    seen = {sig.device_index(s.text) for s in t.signals if s.kind == sig.DEVICE_OOM}
    out["devices_seen"] = sorted(i for i in seen if i is not None)
    return out, s


def _accelerator(decisive, t):
    if decisive is not None and decisive.kind == sig.DEVICE_OOM:
        acc = sig.accelerator_of(decisive.text)
        if acc != "unknown":
            return acc
    for s in t.signals:
        acc = sig.accelerator_of(s.text)
        if acc != "unknown":
            return acc
    if t.facts.accelerator:
        return t.facts.accelerator
    text = " ".join(ln.text for ln in t.window[-200:])
    for needle, acc in (("torch_npu", "npu"), ("Ascend", "npu"), ("ROCm", "rocm"), ("HIP", "rocm"),
                        ("NCCL", "cuda"), ("cuda", "cuda"), ("CUDA", "cuda")):
        if needle in text:
            return acc
    # host RAM ran out and nothing names a device: the memory that failed is the CPU's
    return "cpu" if decisive is not None and decisive.kind in (sig.HOST_OOM, sig.HOST_KILL) else "unknown"


def _last_progress_line(t):
    marker = t.context.last_marker
    return marker.line if marker is not None and marker.kind == "step" else 0


UNKNOWN = {"en": "unknown", "zh": "未知"}      # what a number the log does not give reads as: never "?"


class _Missing(dict):
    def __init__(self, values, lang):
        super().__init__(values)
        self.lang = lang

    def __missing__(self, key):
        return UNKNOWN.get(self.lang, UNKNOWN["en"])


def fill(template, values, lang="en"):
    """A rule text with its {placeholders} filled; one the log does not give reads 'unknown'."""
    try:
        return template.format_map(_Missing(values, lang))
    except (ValueError, IndexError):
        return template


# the allocator's numbers a rule's words may name: {tried} is memory["tried_gib"]…
TEXT_NUMBERS = (("tried", "tried_gib"), ("total", "total_gib"), ("free", "free_gib"),
                ("reserved_unallocated", "reserved_unallocated_gib"), ("allocated", "allocated_by_pytorch_gib"),
                ("other", "other_processes_gib"))


def text_values(memory, step=None, total_steps=None, phase="unknown", lang="en"):
    """What a rule's summary and explanation may name: {tried}, {total}, {step}…"""
    unknown = UNKNOWN.get(lang, UNKNOWN["en"])
    gib = {name: fmt_gib(memory.get(key), missing=unknown) for name, key in TEXT_NUMBERS}
    return {**gib, "step": unknown if step is None else step, "total_steps": total_steps or unknown, "phase": phase}


def diagnose_timeline(t: Timeline, lang="en", facts: Optional[Facts] = None, rules=None, config=None) -> Diagnosis:
    window = t.window
    decisive = _decisive(t.signals)
    frames = frames_of(window)
    boundaries = [s.line for s in t.signals if s.kind != sig.CASCADE]
    memory, numbered = _memory(t, window)
    from ..evidence.tables import add_tables                   # memory_summary() and nvidia-smi pasted with the log
    add_tables(memory, [ln.text for ln in window])

    if decisive is not None:
        # copies of the message, and a logger's "… failed to start" right below it, do not end its trace
        repeats = {s.line for s in t.signals if s.kind == decisive.kind or s.dialect == "logger"}
        dframes = decisive_frames(frames, decisive.line, decisive.rank, boundaries, repeats)
        idx = _index_of(window, decisive.line)
        error_text = _error_block(window, idx) if idx is not None else decisive.text
        signal = (decisive.kind, decisive.dialect)
    else:
        after = _last_progress_line(t)
        dframes = [f for f in frames if f.line > after]
        error_text = ""
        # on the last bar's own line too: a traceback glued after it shares its number
        traceback_open = any(_opens_traceback(ln.text) for ln in window if ln.no >= after)
        cascades = [s for s in t.signals if s.kind == sig.CASCADE]
        signal = ("incomplete", "cascade" if cascades else "traceback") if dframes or traceback_open or cascades \
            else ("none", "none")

    merged = t.facts.model_copy()           # what the log shows ran beats what the config asked for
    if facts is not None:
        for name, value in facts.model_dump().items():
            if getattr(merged, name) is None and value is not None:
                setattr(merged, name, value)
    quoted = _quoted(window, idx, error_text) if decisive is not None else []
    phase, phase_basis = infer_phase(dframes, t.context, memory, quoted, t.facts.script,
                                     decisive.text if decisive is not None else "", merged)
    window_text = "\n".join(ln.text for ln in window)
    marker = t.context.last_marker.kind if t.context.last_marker is not None else None
    named = named_component(dframes, quoted)
    rf = RuleFacts(signal, error_text, window_text, dframes, phase, memory, marker, named[0] if named else None)
    rule, hits = match(rf, rules)
    if rule is None:                        # rules/ always holds catch-alls; this guards a broken set
        raise RuntimeError("no rule matched; the rule set lacks its catch-all rules")

    final_phase = phase if rule.phase == "auto" else rule.phase
    if rule.phase != "auto" and rule.phase != phase:
        phase_basis = f"rule {rule.id} ({rule.name})"
    job_kind = job_basis = None
    if rule.verdict in ("device_oom", "host_oom"):
        from .jobkind import ENGINE_KINDS, decide
        # the whole failing traceback: a chained one (Ray's RayTaskError) keeps the engine's frames below
        start = dframes[0].line if dframes else 0
        job_kind, job_basis = decide([f for f in frames if f.line >= start], [ln.text for ln in window], t.command,
                                     config, final_phase)
        if job_kind in ENGINE_KINDS and final_phase == "unknown":   # an engine's job is inference throughout
            final_phase, phase_basis = "inference", f"job: {job_kind} ({job_basis})"
    component, component_basis = _component(rule, final_phase, named)
    if component == "eval_outputs" and not named and not rule.when.frames and _eval_barely_begun(t.context):
        # outputs pile up batch by batch: in an evaluation's first batches the batch's own forward failed
        c = t.context
        component, component_basis = "activations", f"progress: evaluation batch {c.eval_step} of {c.eval_total}"
    if rule.verdict == "no_failure":
        final_phase, phase_basis = "none", ""

    if merged.step is None:
        merged.step = t.context.step
    merged.job_kind = job_kind
    if job_kind in ("serving", "offline_generation", "rl_rollout"):
        from .jobkind import engine_settings
        merged.engine = engine_settings([ln.text for ln in window]) or None

    evidence = _evidence(decisive, numbered, hits, dframes, t, rule)
    if t.exact_lines is not None:
        for e in evidence:
            e.approximate = e.line > t.exact_lines
    values = text_values(memory, merged.step, merged.total_steps, final_phase, lang)
    trend = memory_trend(t.memory_series)
    if trend is not None:
        memory["trend"] = trend
    return Diagnosis(
        source=t.source, verdict=rule.verdict, accelerator=_accelerator(decisive, t), phase=final_phase,
        component=component, confidence=rule.confidence, rule=rule.id,
        summary=fill(getattr(rule.summary, lang), values, lang), evidence=evidence, memory=memory,
        facts=merged.model_dump(), title=getattr(rule.title, lang),
        explanation=fill(getattr(rule.explanation, lang), values, lang), lang=lang,
        earlier_failures=t.earlier_failures, ranks=t.ranks,
        basis={"phase": phase_basis or "nothing in the log shows it", "component": component_basis,
               **({"job_kind": job_basis} if job_kind else {})},
        notes=_second_readings(rule, component, memory, lang)
        + (_trend_note(trend, lang) if rule.verdict == "device_oom" and final_phase == "mid_training" else []),
    )


def memory_trend(series):
    """How per-step memory records moved before the failure: `growing` (a leak: something kept from
    step to step), `flat` (the failing batch itself was larger: a long sample, an eval or a save), or
    None with fewer than four records or no clear shape. A dict with the figures, for the JSON."""
    values = [gib for _, gib in series]
    if len(values) < 4 or max(values) <= 0:
        return None
    first, last, top = values[0], values[-1], max(values)
    rising = sum(b >= a for a, b in zip(values, values[1:])) / (len(values) - 1)
    kind = "growing" if last >= 1.15 * first and rising >= 0.7 else \
        "flat" if top - min(values) <= 0.1 * top else None
    return {"kind": kind, "records": len(values), "first_gib": round(first, 2), "last_gib": round(last, 2),
            "max_gib": round(top, 2)} if kind else None


def _trend_note(trend, lang):
    if trend is None:
        return []
    n, a, b = trend["records"], trend["first_gib"], trend["last_gib"]
    if trend["kind"] == "growing":
        return [f"显存记录在 {n} 次记录中从 {a} GiB 持续涨到 {b} GiB：每步都有东西被留了下来（泄漏：跨步保留的张量，"
                f"例如没有 .item() 就累加的 loss，或累积的评估输出），而不是某个样本太长。" if lang == "zh" else
                f"Per-step memory grew steadily from {a} to {b} GiB over {n} records: something is kept from step "
                f"to step (a leak: tensors held across steps, such as losses summed without .item(), or "
                f"accumulated eval outputs), not one long sample."]
    return [f"显存记录在 {n} 次记录中基本持平（约 {trend['max_gib']} GiB）：失败的那一批本身更大——很可能是一条特别长的样本，"
            f"或紧随其后的评估/保存。" if lang == "zh" else
            f"Per-step memory was flat (about {trend['max_gib']} GiB over {n} records): the batch that failed was "
            f"itself larger — most likely one long sample, or the evaluation or save that followed."]


def _second_readings(rule, component, memory, lang):
    """A reading close to its threshold is named beside the primary one, not silently dropped."""
    if rule.verdict != "device_oom" or component == "fragmentation" or not marginally_fragmented(memory):
        return []
    cached = fmt_gib(memory.get("reserved_unallocated_gib") or memory.get("async_pool_gib"))
    if lang == "zh":
        return [f"PyTorch 还缓存着 {cached} 已预留但未分配的显存，多于这次申请：碎片可能也有份，"
                f"可同时设置 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True。"]
    return [f"PyTorch also holds {cached} reserved but unallocated, more than the request: fragmentation may "
            f"play a part too, and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True costs nothing to try."]


def _quoted(window, idx, error_text):
    """Source lines a cut paste kept above the error (their `File` headers lost), and the
    error's own lines (a message can carry the source line it failed on)."""
    if idx is None:
        return [error_text]
    above = [ln.text for ln in window[max(0, idx - QUOTE_LINES):idx] if not parse_frame(ln.text)]
    return above + [error_text]


def named_component(frames, quoted):
    """(component, basis) that the innermost frame naming one, else a quoted call, names; or None."""
    for frame in reversed(frames):
        r = read_frame(frame)
        if r is not None and r.component:
            return r.component, f"frame {r.what}"
    call = quoted_call(frames, quoted)
    if call is not None and call.component:
        return call.component, f"quoted call {call.what}"
    return None


def _eval_barely_begun(context):
    done, total = context.eval_step, context.eval_total
    return done is not None and (done <= 2 or bool(total) and done <= 0.1 * total)


def _component(rule, phase, named):
    """(component, basis): the rule's own, else the ladder — what the frames or a quoted call
    name, then the course's phase table (DESIGN §6); `unknown` when nothing says."""
    if rule.verdict in ("no_failure", "not_oom"):
        return "none", f"rule {rule.id} ({rule.name})"
    if rule.component != "auto":
        return rule.component, f"rule {rule.id} ({rule.name})"
    if named:
        return named
    if phase in _DEFAULT_COMPONENT:
        return _DEFAULT_COMPONENT[phase], f"phase table: {phase} → {_DEFAULT_COMPONENT[phase]}"
    return "unknown", "nothing in the log names it"


def _evidence(decisive, numbered, hits, dframes, t, rule):
    ev = []
    if decisive is not None:
        marker = {"device_oom": "oom_error", "host_oom": "host_oom", "host_kill": "killed"}.get(decisive.kind, "error")
        ev.append(Evidence(line=decisive.line, text=decisive.text[:400], marker=marker))
    if numbered is not None and (decisive is None or numbered.line != decisive.line):
        ev.append(Evidence(line=numbered.line, text=numbered.text[:400], marker="oom_numbers"))
    shown = set()
    for f in (hits or dframes[-2:]):
        if f.line not in shown:
            shown.add(f.line)
            ev.append(Evidence(line=f.line, text=f"{f.path}: {f.func}" + (f" — {f.source}" if f.source else ""),
                               marker="frame"))
    marker = t.context.last_marker
    if marker is not None:
        ev.append(Evidence(line=marker.line, text=marker.text[:300], marker=marker.kind))
    if not ev and t.signals:
        s = t.signals[0]
        ev.append(Evidence(line=s.line, text=s.text[:400], marker="cascade"))
    return ev
