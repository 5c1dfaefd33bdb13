"""Rules: data files in rules/, one schema, one matcher. The highest priority match decides.

A rule's `when` holds conditions that must all hold (each list: any item may match):
  signal   kind of the decisive failure: device_oom, host_oom, host_kill, error, incomplete, none,
           or kind:dialect such as device_oom:driver (see signals.py)
  error    regexes searched in the decisive error message and the lines that continue it
  window   regexes searched in the failure window (frames, source lines, messages)
  frames   "PATH_REGEX:FUNC_REGEX" matched against the decisive traceback's frames
  phase    the phase inferred from frames and markers
  checks   named predicates over the allocator's numbers (all must hold; see CHECKS)
  marker   kind of the last phase marker before the failure (load, load_done, setup, train_start,
           step, eval_start, eval_done, save, train_done, predict, inference)
  component  the memory component the decisive frames or a quoted source line name (data/frames.yaml)
`unless` has the same keys; a rule whose `unless` holds entirely does not match.
"""

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from ..evidence.anchors import compiled, gated
from ..core.vocab import ACTIONS, COMPONENTS, MARKERS, PHASES, VERDICTS  # noqa: F401  (the rules' schema)

RULES_DIR = Path(__file__).resolve().parents[1] / "rules"
_FORBID = {"extra": "forbid"}           # read by pydantic when a rule file is validated (validate_rule)


class RuleError(Exception):
    """A broken rule file, named with the field at fault."""


# ---- the schema: typed dataclasses, validated by pydantic (types, unknown keys) and check_rule ---
@dataclass
class Text:
    __pydantic_config__ = _FORBID
    en: str
    zh: str


@dataclass
class Conditions:
    __pydantic_config__ = _FORBID
    signal: List[str] = field(default_factory=list)
    error: List[str] = field(default_factory=list)
    window: List[str] = field(default_factory=list)
    frames: List[str] = field(default_factory=list)
    phase: List[str] = field(default_factory=list)
    checks: List[str] = field(default_factory=list)
    marker: List[str] = field(default_factory=list)
    component: List[str] = field(default_factory=list)

    def stated(self):
        return {k: v for k, v in vars(self).items() if v}


@dataclass
class Samples:
    __pydantic_config__ = _FORBID
    trigger: List[str]
    ignore: List[str] = field(default_factory=list)


@dataclass
class Rule:
    __pydantic_config__ = _FORBID
    id: str
    name: str
    priority: int
    verdict: str
    component: str                      # a fixed component, or auto: by phase
    confidence: float
    title: Text
    summary: Text
    explanation: Text
    when: Conditions
    samples: Samples
    phase: str = "auto"                 # a fixed phase, or auto: the phase inferred from frames/markers
    actions: List[str] = field(default_factory=list)      # what the plan should start with, in order
    unless: Optional[Conditions] = None
    since: str = "0.1.0"


def trusted_rule(data):
    """A Rule from data already validated (the snapshot): no pydantic at run time."""
    d = dict(data)
    for key in ("title", "summary", "explanation"):
        d[key] = Text(**d[key])
    d["when"] = Conditions(**d["when"])
    d["unless"] = Conditions(**d["unless"]) if d.get("unless") else None
    d["samples"] = Samples(**d["samples"])
    return Rule(**d)


def validate_rule(data):
    """A Rule from a rule file's data; raises ValueError naming the field at fault."""
    from pydantic import TypeAdapter, ValidationError
    try:
        rule = TypeAdapter(Rule).validate_python(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise ValueError(f"field '{'.'.join(str(x) for x in err['loc'])}': {err['msg']}") from None
    check_rule(rule)
    return rule


def check_rule(rule):
    """What types cannot say: ids, vocabularies, regexes that compile, checks that exist."""
    def bad(name, value, allowed):
        raise ValueError(f"field '{name}': {value!r} is not one of {allowed}")

    if not re.fullmatch(r"OOM\d{3}", rule.id):
        raise ValueError("field 'id': rule ids look like OOM201")
    if rule.verdict not in VERDICTS:
        bad("verdict", rule.verdict, VERDICTS)
    if rule.phase != "auto" and rule.phase not in PHASES:
        bad("phase", rule.phase, ("auto",) + PHASES)
    if rule.component != "auto" and rule.component not in COMPONENTS:
        bad("component", rule.component, ("auto",) + COMPONENTS)
    for action in rule.actions:
        if action not in ACTIONS:
            bad("actions", action, ACTIONS)
    for where, cond in (("when", rule.when), ("unless", rule.unless)):
        if cond is None:
            continue
        for pat in cond.error + cond.window + [p.rpartition(":")[0] for p in cond.frames] + \
                [p.rpartition(":")[2] or ".*" for p in cond.frames]:
            try:
                re.compile(pat)
            except re.error as e:
                raise ValueError(f"field '{where}': bad regex {pat!r}: {e}") from None
        for name, values, allowed in (("phase", cond.phase, PHASES), ("marker", cond.marker, MARKERS),
                                      ("component", cond.component, COMPONENTS),
                                      ("checks", [c.lstrip("!") for c in cond.checks], tuple(CHECKS))):
            for value in values:
                if value not in allowed:
                    bad(f"{where}.{name}", value, allowed)
    if not rule.samples.trigger:
        raise ValueError("field 'samples.trigger': every rule needs samples that trigger it")


# ---- named checks over the allocator numbers (memory dict, GiB) ------------------------------
FRAGMENTED_SHARE = 0.05     # of what PyTorch reserved: below it, cached memory is the allocator's normal slack


def _cached(m):
    """Reserved but unallocated: the caching allocator's figure, or cudaMallocAsync's pool."""
    ru = m.get("reserved_unallocated_gib")
    return m.get("async_pool_gib") if ru is None else ru


def _fragmented(m):
    """More cached-but-unused memory than the failed request, and a real share of what PyTorch
    reserved (LABELS 3): it would have fit had the cache not been cut into pieces."""
    ru, tried, alloc = _cached(m), m.get("tried_gib"), m.get("allocated_by_pytorch_gib")
    if ru is None or tried is None:
        return False
    share = ru / (ru + (alloc or 0.0)) if ru else 0.0
    # a cache many times the request that still could not serve it is cut up, even at a smaller share
    return ru > tried and (share >= FRAGMENTED_SHARE or share >= 0.03 and ru >= 8 * tried)


def marginally_fragmented(m):
    """Cached memory above the request that does not reach the fragmentation reading: worth a note."""
    ru, tried, alloc = _cached(m), m.get("tried_gib"), m.get("allocated_by_pytorch_gib")
    return bool(ru and tried and ru > tried and ru >= 0.02 * (ru + (alloc or 0.0))) and not _fragmented(m)


def _unaccounted(m):
    total, free, alloc = m.get("total_gib"), m.get("free_gib"), m.get("allocated_by_pytorch_gib")
    if total is None or free is None or alloc is None:
        return None
    return total - free - alloc - (_cached(m) or 0.0)


def _other_process(m):
    """Much of the card is held outside this process's PyTorch allocator (beyond its CUDA context)."""
    total = m.get("total_gib")
    if not total:
        return False
    floor = max(2.0, 0.25 * total)
    others = m.get("other_processes_gib")
    unaccounted = _unaccounted(m)
    return (others is not None and others >= floor) or (unaccounted is not None and unaccounted >= floor)


def _giant(m):
    """One request of at least half the card: a single huge tensor (logits, eager attention, a concat)."""
    tried, total = m.get("tried_gib"), m.get("total_gib")
    return tried is not None and total is not None and tried >= 0.5 * total


def _overflowed(m):
    """A request a hundred cards long or more is a size computed wrong, not memory (LABELS 6); a
    message that names no card is measured against the largest card there is."""
    tried, total = m.get("tried_gib"), m.get("total_gib")
    if tried is None:
        return False
    if total is None:
        from ..memory.catalog import gpus
        total = max(g.capacity_gib for g in gpus())
    return tried >= 100 * total


CHECKS = {
    "overflowed_request": _overflowed,
    "fragmentation": _fragmented,
    "other_process": _other_process,
    "giant_request": _giant,
    "has_numbers": lambda m: m.get("tried_gib") is not None,
}


# ---- loading ----------------------------------------------------------------------------------
def _rule_sources(directory):
    """(file name, parsed data or the exception that stopped parsing, trusted) per rule file. The
    shipped set comes from the snapshot, validated when it was built; a directory is validated now."""
    if directory is None:
        from ..core.snapshot import snapshot
        snap = snapshot()
        return [(name, data, snap["trusted"]) for name, data in sorted(snap["rules"].items())]
    from ruamel.yaml import YAML
    yaml = YAML(typ="safe")
    out = []
    for path in sorted(Path(directory).glob("OOM*.yaml")):
        try:
            out.append((path.name, yaml.load(path.read_text(encoding="utf-8")), False))
        except Exception as e:  # YAML syntax: reported with the file's name below
            out.append((path.name, e, False))
    return out


@functools.lru_cache(maxsize=None)
def load_rules(directory=None):
    rules = []
    for name, data, trusted in _rule_sources(directory):
        try:
            if isinstance(data, Exception):
                raise data
            rule = trusted_rule(data) if trusted else validate_rule(data)
        except Exception as e:  # YAML syntax, schema
            raise RuleError(f"{name}: {e}") from None
        if rule.id != Path(name).stem:
            raise RuleError(f"{name}: id {rule.id} does not match the file name")
        rules.append(rule)
    ids = [r.id for r in rules]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise RuleError(f"duplicate rule ids: {sorted(dupes)}")
    return tuple(sorted(rules, key=lambda r: -r.priority))


def rules_by_id():
    return {r.id: r for r in load_rules()}


# ---- matching ---------------------------------------------------------------------------------
class Facts:
    """What a rule can look at, computed once per diagnosis."""

    def __init__(self, signal, error_text, window_text, frames, phase, memory, marker=None, named=None):
        self.signal, self.error_text, self.window_text = signal, error_text, window_text
        self.frames, self.phase, self.memory, self.marker = frames, phase, memory, marker
        self.named = named          # the component the frames or a quoted call name, or None


def _frame_match(pattern, frames):
    path, _, func = pattern.rpartition(":")
    prx, frx = compiled(path), compiled(func or ".*")
    for f in frames:
        if frx.fullmatch(f.func) and (not path or prx.search(f.path)):
            return f
    return None


def _holds(cond, x, hits):
    # cheap tests first: most rules fail on the signal or the phase before any regex runs
    if cond.signal and not any(s == x.signal[0] or s == f"{x.signal[0]}:{x.signal[1]}" for s in cond.signal):
        return False
    if cond.phase and x.phase not in cond.phase:
        return False
    if cond.marker and x.marker not in cond.marker:
        return False
    if cond.component and x.named not in cond.component:
        return False
    for check in cond.checks:
        want = not check.startswith("!")
        if CHECKS[check.lstrip("!")](x.memory) != want:
            return False
    if cond.frames:
        found = [f for f in (_frame_match(p, x.frames) for p in cond.frames) if f]
        if not found:
            return False
        hits.extend(found)
    if cond.error and not any(gated(p).search(x.error_text) for p in cond.error):
        return False
    if cond.window and not any(gated(p).search(x.window_text) for p in cond.window):    # literals first
        return False
    return True


def match(facts, rules=None):
    """(rule, matched frames) of the highest-priority rule that holds, or (None, [])."""
    for rule in rules or load_rules():
        hits = []
        if _holds(rule.when, facts, hits) and not (rule.unless and _holds(rule.unless, facts, [])):
            return rule, hits
    return None, []
