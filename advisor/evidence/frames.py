"""What frameworks' traceback frames and quoted source lines say: data/frames.yaml, compiled once.

A frame is matched on (path, function, source line); the first entry that matches it decides for
that frame. The walk over a traceback (innermost first) lives in phase.py and diagnose.py.
"""

import functools
import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Reading:
    """What one frame or source line says: a phase, a component, or both; and which entry said it."""
    phase: Optional[str]
    component: Optional[str]
    weak: bool
    what: str                   # the frame or call, for the basis line


@dataclass(frozen=True)
class _Entry:
    func: Optional[re.Pattern]
    path: Optional[re.Pattern]
    code: Optional[re.Pattern]
    phase: Optional[str]
    component: Optional[str]
    weak: bool


def _compile(entry):
    rx = lambda key: re.compile(entry[key]) if entry.get(key) else None  # noqa: E731
    return _Entry(func=rx("func"), path=rx("path"), code=rx("code"), phase=entry.get("phase"),
                  component=entry.get("component"), weak=bool(entry.get("weak")))


@functools.lru_cache(maxsize=None)
def tables():
    from ..core.snapshot import snapshot
    data = snapshot()["frames"]
    frames = data["frames"] + data.get("frameworks", []) + data.get("fallback", [])
    return [_compile(e) for e in frames], [_compile(e) for e in data["calls"]]


@functools.lru_cache(maxsize=8192)
def _entries_for(func):
    """The entries whose function pattern matches `func`, in table order. Function names repeat
    across every traceback (forward, _call_impl, step) while paths differ by machine, so this is
    what spares each new frame a scan of the whole table."""
    return tuple(e for e in tables()[0] if e.func.fullmatch(func))


@functools.lru_cache(maxsize=4096)
def _read_frame(path, func, source):
    for e in _entries_for(func):
        if (e.path is None or e.path.search(path)) and (e.code is None or e.code.search(source)):
            return e
    return None


def read_frame(frame):
    """The Reading of one Frame, or None when no entry knows it."""
    e = _read_frame(frame.path, frame.func, frame.source if frame.source else "")
    if e is None:
        return None
    name = frame.path.rsplit("/", 1)[-1] or "?"
    return Reading(e.phase, e.component, e.weak, f"{name}:{frame.func}")


@functools.lru_cache(maxsize=4096)
def read_call(text):
    """The Reading of a source line (what it calls), or None. Cached: the same source lines recur in
    every report of one failure."""
    if not text:
        return None
    for e in tables()[1]:
        m = e.code.search(text)
        if m:
            return Reading(e.phase, e.component, e.weak, m.group(0).strip())
    return None


_PHASES = ("load", "train", "first_step", "evaluation", "checkpoint_save", "inference", "skip")
_FRAME_KEYS = {"func", "path", "code", "phase", "component", "weak", "source", "sample", "framework"}
_KEYS = {"frames": _FRAME_KEYS, "frameworks": _FRAME_KEYS, "fallback": _FRAME_KEYS,
         "calls": {"code", "phase", "component", "source", "sample"}}


def validate_frames(data):
    """The table's shape: known keys and vocabularies, regexes that compile, a source and a sample."""
    from ..core.vocab import COMPONENTS
    for table in _KEYS:
        for i, e in enumerate(data.get(table, [])):
            where = f"frames {table}[{i}]"
            unknown = set(e) - _KEYS[table]
            required = {"code"} if table == "calls" else {"func"}
            if unknown or not required <= set(e) or not e.get("source") or not e.get("sample"):
                raise ValueError(f"{where}: needs {sorted(required | {'source', 'sample'})}, "
                                 f"knows only {sorted(_KEYS[table])}")
            if e.get("phase") not in (None, *_PHASES) or e.get("component") not in (None, *COMPONENTS):
                raise ValueError(f"{where}: phase {e.get('phase')!r} or component {e.get('component')!r} unknown")
            if not (e.get("phase") or e.get("component")):
                raise ValueError(f"{where}: says neither a phase nor a component")
            for key in ("func", "path", "code"):
                if e.get(key):
                    try:
                        re.compile(e[key])
                    except re.error as err:
                        raise ValueError(f"{where}: {key} {e[key]!r}: {err}") from None
