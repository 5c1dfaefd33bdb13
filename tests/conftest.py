import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Reports wrap prose to the terminal's width; tests that look for a phrase read them unwrapped, and the
# tests of the first screen (tests/test_first_screen.py) set their own 80 columns.
os.environ["COLUMNS"] = "1000"
SHARED = Path(os.environ.get("OOM_DOCTOR_SHARED", ROOT.parent / "shared"))
REAL_LOGS = SHARED / "real_logs"
SAMPLES = ROOT / "log_samples"


def alternatives(pattern):
    """A regular expression's top-level alternatives (split at '|' outside groups and classes)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 1
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    return out + [pattern[start:]]


def opens_with_literal(alternative):
    """True when Python's re can find the alternative by scanning for its first character: it starts
    with a literal character (an escaped punctuation mark counts), not a class, anchor or group."""
    c = alternative[:2]
    return bool(c) and (c[0] not in "\\[(.^$?*+{|" or len(c) == 2 and c[0] == "\\" and not c[1].isalnum())


@pytest.fixture
def diagnose_text():
    from advisor.pipeline import diagnose_text as run
    return run
