"""The command line: exit codes, formats, languages, and bad input as one clear line."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SAMPLE_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity " \
             "of 23.65 GiB of which 1.00 GiB is free. Of the allocated memory 22.00 GiB is allocated by PyTorch, and " \
             "100.00 MiB is reserved by PyTorch but unallocated.\n"


def run(*args, stdin=None, env=None):
    e = dict(os.environ, **(env or {}))
    e.pop("OOM_DOCTOR_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "advisor.cli", *args], input=stdin, capture_output=True,
                       cwd=ROOT, env=e, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def test_stdin_oom_exits_1_and_json_follows_contract():
    rc, out, err = run("diagnose", "--format", "json", stdin=SAMPLE_OOM.encode())
    assert rc == 1, err
    j = json.loads(out)
    assert j["schema"] == "oom-doctor/diagnosis/v1"
    for key in ("source", "verdict", "accelerator", "phase", "component", "confidence", "rule", "summary",
                "evidence", "memory", "facts", "budget", "plan", "patch"):
        assert key in j
    assert j["memory"]["total_gib"] == pytest.approx(23.65)
    assert j["source"] == "<stdin>"


def test_healthy_log_exits_0():
    rc, out, _ = run("diagnose", "-", stdin=b"{'loss': 1.0, 'epoch': 0.1}\nTraining completed.\n")
    assert rc == 0
    assert "no failure" in out.lower()


def test_chinese_report(tmp_path):
    rc, out, _ = run("diagnose", "--lang", "zh", stdin=SAMPLE_OOM.encode())
    assert rc == 1
    assert "显存不足" in out


def test_lang_from_environment():
    rc, out, _ = run("diagnose", stdin=SAMPLE_OOM.encode(), env={"OOM_DOCTOR_LANG": "zh"})
    assert "显存" in out


def test_no_color_when_not_a_tty():
    _, out, _ = run("diagnose", stdin=SAMPLE_OOM.encode())
    assert "\x1b[" not in out


def _file(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make,needle", [
    (lambda p: p / "missing.log", "no such file"),
    (lambda p: p, "is a directory"),
    (lambda p: _file(p / "empty.log", b""), "empty"),
    (lambda p: _file(p / "bin.log", bytes(range(256)) * 100), "binary"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, needle):
    rc, out, err = run("diagnose", str(make(tmp_path)))
    assert rc == 2
    assert needle in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_invalid_yaml_config_is_one_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(SAMPLE_OOM)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: x\n  bad: [indent\n")
    rc, _, err = run("diagnose", str(log), "--config", str(cfg))
    assert rc == 2 and "invalid YAML" in err and "Traceback" not in err


def test_huge_single_line_is_diagnosed(tmp_path):
    log = tmp_path / "one-line.log"
    with open(log, "wb") as fh:
        fh.write(b"x" * (50 * 1024 * 1024))
        fh.write(b"\n" + SAMPLE_OOM.encode())
    rc, out, err = run("diagnose", "--format", "json", str(log))
    assert rc == 1, err
    assert json.loads(out)["verdict"] == "device_oom"


def test_explain_and_rules():
    rc, out, _ = run("explain", "OOM501")
    assert rc == 0 and "expandable_segments" in out
    rc, out, _ = run("rules")
    assert rc == 0 and "OOM501" in out and "OOM999" in out
    rc, _, err = run("explain", "OOM50")
    assert rc == 2 and "nearest" in err and "OOM50" in err


def test_usage_error_exits_2():
    rc, _, err = run("diagnose", "--format", "pdf")
    assert rc == 2


def test_version_is_fast_to_import():
    rc, out, _ = run("--version")
    assert rc == 0 and "oom-doctor" in out
    assert "pydantic" not in subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "advisor.cli", "--version"], capture_output=True, cwd=ROOT
    ).stderr.decode()


def test_readme_setup_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    first, second = readme.strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert first.replace("pip install .", "pip install -q .") in ci
    assert second.replace("pip install '.[test]'", "pip install -q '.[test]'") in ci
    assert "oom-doctor diagnose log_samples/" in first and (ROOT / first.split("diagnose ")[1].split()[0]).exists()
