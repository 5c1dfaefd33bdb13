"""`triage --verdict/--rule` take only values that exist (any case), and say the nearest on a typo."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "log_samples"


def _triage(*args):
    return subprocess.run([sys.executable, "-m", "advisor.cli", "triage", str(SAMPLES), "--format", "json", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("args, near", [(("--verdict", "oom"), "device_oom"), (("--verdict", "xyz"), None),
                                        (("--rule", "OOM9999"), "OOM999"), (("--rule", "OOM20"), "OOM201")])
def test_an_unknown_filter_value_is_a_usage_error(args, near):
    p = _triage(*args)
    assert p.returncode == 2 and not p.stdout
    line = p.stderr.strip()
    assert "\n" not in line and "Traceback" not in line and args[1] in line
    assert (near in line) if near else "did you mean" not in line


@pytest.mark.parametrize("args, field, want", [(("--verdict", "DEVICE_OOM"), "verdict", "device_oom"),
                                               (("--rule", "oom501"), "rule", "OOM501")])
def test_a_filter_value_in_another_case_is_that_value(args, field, want):
    p = _triage(*args)
    assert p.returncode in (0, 1), p.stderr
    groups = json.loads(p.stdout)["groups"]
    assert groups and all(g[field] == want for g in groups)


def test_one_file_is_one_file_and_an_unknown_card_is_not_named(tmp_path):
    (tmp_path / "bare.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB.\n")
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "triage", str(tmp_path)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.stdout.startswith("1 file: ") and "1 group" in p.stdout and "1 files" not in p.stdout
    report = json.loads(subprocess.run([sys.executable, "-m", "advisor.cli", "triage", str(tmp_path), "--format",
                                        "json"], capture_output=True, text=True, cwd=ROOT, timeout=120).stdout)
    replies = " ".join(g["reply"] for g in report["groups"])
    assert "unknown" not in replies and "card of" not in replies
