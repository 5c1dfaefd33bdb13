"""`oom-doctor triage --engine ray` the way a user starts it: a fresh process with no Ray running (a
local Ray starts and stops inside the command), and with RAY_ADDRESS naming a head started
beforehand. Its report is byte for byte the local engine's, on a folder with logs and the configs
beside them, a run folder and an issues export. Ray is a CI requirement: without it this fails in CI
and skips elsewhere."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "log_samples"

try:
    import ray  # noqa: F401
    import ray.data  # noqa: F401
except ImportError:
    if os.environ.get("CI"):
        pytest.fail("the ray extra is missing in CI: pip install '.[ray]'", pytrace=False)
    pytest.skip("ray is not installed (pip install '.[ray]')", allow_module_level=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("desk")
    for name in ("lf-first-step-activations", "lf-eval-accumulation-oom", "hard-wrapped-paste", "host-oom-killed"):
        shutil.copy(SAMPLES / f"{name}.log", root / f"{name}.log")
        shutil.copy(SAMPLES / f"{name}.yaml", root / f"{name}.yaml")      # the config beside its log
    shutil.copy(SAMPLES / "healthy-run.log", root / "healthy-run.log")
    shutil.copytree(SAMPLES / "runs" / "llamaboard", root / "saves")
    oom = (SAMPLES / "fragmentation-expandable.log").read_text(encoding="utf-8")
    (root / "issues.json").write_text(json.dumps([{"number": 7, "title": "OOM", "url": "https://github.com/o/r/issues/7",
                                                  "body": "```\n" + oom + "\n```", "comments": []}]))
    return root


def _triage(folder, engine, env=None):
    e = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    e.update(env or {})
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "triage", "--engine", engine, "--format", "json",
                        str(folder)], capture_output=True, cwd=ROOT, env=e, timeout=300)
    assert p.returncode in (0, 1), p.stderr.decode(errors="replace")[-3000:]
    assert b"Traceback" not in p.stderr
    return p.stdout


def test_ray_from_a_fresh_process_equals_local(folder):
    local = _triage(folder, "local")
    report = json.loads(local)
    assert report["summary"]["files"] >= 7 and len(report["groups"]) >= 4
    assert _triage(folder, "ray") == local


def test_ray_on_a_started_head_equals_local(folder):
    import tempfile
    ray_bin = Path(sys.executable).with_name("ray")
    temp = Path(tempfile.mkdtemp(prefix="rh"))   # its own session folder, short: Ray's sockets live in it
    # on loopback only, and without the token a head of this Ray version would ask its clients for
    env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_AUTH_MODE": "disabled"}
    start = subprocess.run([str(ray_bin), "start", "--head", "--num-cpus=2", "--disable-usage-stats",
                            "--include-dashboard=false", f"--temp-dir={temp}", "--port=0",
                            "--node-ip-address=127.0.0.1"],
                           capture_output=True, text=True, env=env, timeout=180)
    try:
        assert start.returncode == 0, start.stderr[-2000:]
        address = next((w.split("=", 1)[1].strip("'\"") for line in start.stdout.splitlines()
                        for w in line.split() if w.startswith("--address=")), None)
        assert address, start.stdout[-2000:]
        assert _triage(folder, "ray", {"RAY_ADDRESS": address, "RAY_TMPDIR": str(temp),
                                        "RAY_AUTH_MODE": "disabled"}) == _triage(folder, "local")
    finally:
        subprocess.run([str(ray_bin), "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
