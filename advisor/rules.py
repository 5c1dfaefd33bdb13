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
           step, eval_start, eval_done, save, train_done, predict)
`unless` has the same keys; a rule whose `unless` holds entirely does not match.
"""

import functools
import re
from pathlib import Path
from typing import Dict, List, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

VERDICTS = ("device_oom", "host_oom", "not_oom", "no_failure", "incomplete")
PHASES = ("load", "first_step", "mid_training", "evaluation", "checkpoint_save", "inference", "unknown", "none")
COMPONENTS = ("weights", "activations", "gradients", "optimizer_states", "fragmentation", "other_process",
              "eval_outputs", "host_memory", "none", "unknown")
ACTIONS = ("reduce_batch", "grad_accum", "grad_checkpointing", "reduce_seq_len", "precision", "quantize", "use_lora",
           "optimizer_8bit", "smaller_model", "zero_sharding", "cpu_offload", "free_other_process",
           "expandable_segments", "eval_batch", "eval_accumulation", "fix_non_memory_bug", "more_host_ram", "none")

RULES_DIR = Path(__file__).resolve().parent / "rules"


class RuleError(Exception):
    """A broken rule file, named with the field at fault."""


class Text(BaseModel):
    model_config = ConfigDict(extra="forbid")
    en: str
    zh: str


class Conditions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    signal: List[str] = []
    error: List[str] = []
    window: List[str] = []
    frames: List[str] = []
    phase: List[str] = []
    checks: List[str] = []
    marker: List[str] = []

    @field_validator("error", "window")
    @classmethod
    def _regex(cls, v):
        for pat in v:
            re.compile(pat)
        return v

    @field_validator("frames")
    @classmethod
    def _frames(cls, v):
        for pat in v:
            path, _, func = pat.rpartition(":")
            re.compile(path)
            re.compile(func or ".*")
        return v

    @field_validator("checks")
    @classmethod
    def _checks(cls, v):
        unknown = [c for c in v if c.lstrip("!") not in CHECKS]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; known: {sorted(CHECKS)}")
        return v

    @field_validator("phase")
    @classmethod
    def _phases(cls, v):
        bad = [p for p in v if p not in PHASES]
        if bad:
            raise ValueError(f"unknown phase(s) {bad}")
        return v


class Samples(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trigger: List[str]
    ignore: List[str] = []


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    priority: int
    verdict: str
    phase: str = "auto"                 # a fixed phase, or auto: the phase inferred from frames/markers
    component: str                      # a fixed component, or auto: by phase
    confidence: float
    title: Text
    summary: Text
    explanation: Text
    actions: List[str] = []             # what the plan should start with, in order
    when: Conditions
    unless: Optional[Conditions] = None
    samples: Samples
    since: str = "0.1.0"

    @field_validator("id")
    @classmethod
    def _id(cls, v):
        if not re.fullmatch(r"OOM\d{3}", v):
            raise ValueError("rule ids look like OOM201")
        return v

    @field_validator("verdict")
    @classmethod
    def _verdict(cls, v):
        if v not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}")
        return v

    @field_validator("phase")
    @classmethod
    def _phase(cls, v):
        if v != "auto" and v not in PHASES:
            raise ValueError(f"phase must be auto or one of {PHASES}")
        return v

    @field_validator("component")
    @classmethod
    def _component(cls, v):
        if v != "auto" and v not in COMPONENTS:
            raise ValueError(f"component must be auto or one of {COMPONENTS}")
        return v

    @field_validator("actions")
    @classmethod
    def _actions(cls, v):
        bad = [a for a in v if a not in ACTIONS]
        if bad:
            raise ValueError(f"unknown action(s) {bad}")
        return v


# ---- named checks over the allocator numbers (memory dict, GiB) ------------------------------
def _fragmented(m):
    """More cached-but-unused memory than the failed request, and a real share of the card."""
    ru, tried, total = m.get("reserved_unallocated_gib"), m.get("tried_gib"), m.get("total_gib")
    if ru is None or tried is None:
        return False
    return ru > tried and ru >= (0.03 * total if total else 1.0)


def _unaccounted(m):
    total, free, alloc = m.get("total_gib"), m.get("free_gib"), m.get("allocated_by_pytorch_gib")
    if total is None or free is None or alloc is None:
        return None
    return total - free - alloc - (m.get("reserved_unallocated_gib") or 0.0)


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


CHECKS = {
    "fragmentation": _fragmented,
    "other_process": _other_process,
    "giant_request": _giant,
    "has_numbers": lambda m: m.get("tried_gib") is not None,
}


# ---- loading ----------------------------------------------------------------------------------
def _rule_sources(directory):
    """(file name, parsed data or exception) per rule file; the shipped set comes from the snapshot."""
    if directory is None:
        from .compiled import snapshot
        return sorted(snapshot()["rules"].items())
    from ruamel.yaml import YAML
    yaml = YAML(typ="safe")
    out = []
    for path in sorted(Path(directory).glob("OOM*.yaml")):
        try:
            out.append((path.name, yaml.load(path.read_text(encoding="utf-8"))))
        except Exception as e:  # YAML syntax: reported with the file's name below
            out.append((path.name, e))
    return out


@functools.lru_cache(maxsize=None)
def load_rules(directory=None):
    rules = []
    for name, data in _rule_sources(directory):
        path = Path(name)
        try:
            if isinstance(data, Exception):
                raise data
            rule = Rule(**data)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise RuleError(f"{path.name}: field '{field}': {err['msg']}") from None
        except Exception as e:  # YAML syntax
            raise RuleError(f"{path.name}: {e}") from None
        if rule.id != path.stem:
            raise RuleError(f"{path.name}: id {rule.id} does not match the file name")
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

    def __init__(self, signal, error_text, window_text, frames, phase, memory, marker=None):
        self.signal, self.error_text, self.window_text = signal, error_text, window_text
        self.frames, self.phase, self.memory, self.marker = frames, phase, memory, marker


@functools.lru_cache(maxsize=512)
def _rx(pattern):
    return re.compile(pattern)


def _frame_match(pattern, frames):
    path, _, func = pattern.rpartition(":")
    prx, frx = _rx(path), _rx(func or ".*")
    for f in frames:
        if frx.fullmatch(f.func) and (not path or prx.search(f.path)):
            return f
    return None


def _holds(cond, x, hits):
    if cond.signal and not any(s == x.signal[0] or s == f"{x.signal[0]}:{x.signal[1]}" for s in cond.signal):
        return False
    if cond.error and not any(_rx(p).search(x.error_text) for p in cond.error):
        return False
    if cond.window and not any(_rx(p).search(x.window_text) for p in cond.window):
        return False
    if cond.frames:
        found = [f for f in (_frame_match(p, x.frames) for p in cond.frames) if f]
        if not found:
            return False
        hits.extend(found)
    if cond.phase and x.phase not in cond.phase:
        return False
    if cond.marker and x.marker not in cond.marker:
        return False
    for check in cond.checks:
        want = not check.startswith("!")
        if CHECKS[check.lstrip("!")](x.memory) != want:
            return False
    return True


def match(facts, rules=None):
    """(rule, matched frames) of the highest-priority rule that holds, or (None, [])."""
    for rule in rules or load_rules():
        hits = []
        if _holds(rule.when, facts, hits) and not (rule.unless and _holds(rule.unless, facts, [])):
            return rule, hits
    return None, []
