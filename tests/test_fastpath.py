"""The windowed reading of big files gives the same diagnosis as reading everything."""

import sys
from pathlib import Path

import pytest

from advisor.diagnose import diagnose_timeline
from advisor.fastpath import _parse_all, timeline_of
from conftest import REAL_LOGS, ROOT, SAMPLES

sys.path.insert(0, str(ROOT / "benchmarks"))
from biglog import write_log  # noqa: E402

LOGS = sorted(SAMPLES.glob("*.log")) + (sorted(REAL_LOGS.glob("*/log.txt")) if REAL_LOGS.is_dir() else [])
# window sizes scaled down so that logs of a few KB exercise every branch of the windowed reader
SCALED = [dict(big=0, head=2000, region_max=3000, window=1500), dict(big=0, head=4000, region_max=500, window=6000),
          dict(big=0, head=8000, region_max=32000, window=8000)]


def key(t):
    d = diagnose_timeline(t).to_json_dict()
    return {k: d[k] for k in ("verdict", "phase", "component", "rule", "memory")} | {"step": d["facts"]["step"]}


@pytest.mark.parametrize("sizes", SCALED, ids=["small-windows", "huge-region", "medium"])
def test_windows_agree_with_full_parse_on_every_log(sizes):
    diffs = []
    for path in LOGS:
        with open(path, "rb") as a, open(path, "rb") as b:
            full, fast = key(_parse_all(a, str(path))), key(timeline_of(b, str(path), **sizes))
        if full != fast:
            diffs.append((path.name, {k: (full[k], fast[k]) for k in full if full[k] != fast[k]}))
    assert not diffs


@pytest.mark.parametrize("failure", ["start", "middle", "end"])
def test_big_generated_log(tmp_path, failure):
    path = tmp_path / f"{failure}.log"
    write_log(path, 24 << 20, failure)
    with open(path, "rb") as a, open(path, "rb") as b:
        full, fast = _parse_all(a, str(path)), timeline_of(b, str(path))
    assert fast.exact_lines is not None            # the windowed reader was used
    assert key(fast) == key(full)
    assert key(fast)["verdict"] == "device_oom"


def test_windowed_evidence_is_marked_approximate(tmp_path):
    path = tmp_path / "big.log"
    write_log(path, 20 << 20, "end")
    with open(path, "rb") as fh:
        d = diagnose_timeline(timeline_of(fh, str(path)))
    oom = next(e for e in d.evidence if e.marker == "oom_error")
    real = next(i for i, line in enumerate(Path(path).read_bytes().split(b"\n"), 1) if b"CUDA out of memory" in line)
    assert oom.approximate and abs(oom.line - real) < 0.05 * real
