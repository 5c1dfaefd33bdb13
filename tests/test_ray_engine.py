"""The Ray engine (issue 17): over a few hundred files the report is the local engine's — same groups,
ids and members, same errors — from the library and from the CLI. Skipped where Ray is absent; Ray
starts once, for this module only."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from advisor.triage.ray_engine import run_triage_ray  # noqa: E402
from advisor.triage.run import run_triage
from advisor.cli.triage import triage  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from triage_bench import generate  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """300 mutated copies (some without a suffix), a run folder, a broken link and a binary file."""
    root = tmp_path_factory.mktemp("rayfolder")
    generate(300, root, seed=11, variants=90)
    shutil.copytree(ROOT / "log_samples" / "runs" / "llamaboard", root / "saves")
    (root / "broken.log").symlink_to(root / "gone.log")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n" + bytes(range(256)) * 8)     # not a log: not picked
    return root


def _groups(report):
    return [(g["id"], g["count"], g["members"], g["representative"], g["aliases"]) for g in report["groups"]]


def test_same_report_as_the_local_engine(local_ray, folder):
    local = run_triage([str(folder)], jobs=2)
    on_ray = run_triage_ray([str(folder)])
    assert local["summary"]["files"] > 300 and len(local["groups"]) > 5
    assert any(g["count"] > 1 for g in local["groups"])
    assert _groups(on_ray) == _groups(local)
    assert on_ray["errors"] == local["errors"] and local["errors"]
    assert json.dumps(on_ray, sort_keys=True) == json.dumps(local, sort_keys=True)


def test_paths_as_given_and_missing_ones(local_ray, folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    args = [folder.name, "no-such-dir"]
    local = run_triage(args, jobs=2)
    on_ray = run_triage_ray(args)
    assert on_ray == local
    assert all(m.startswith(folder.name + "/") for g in on_ray["groups"] for m in g["members"])
    assert on_ray["errors"][0]["path"] == "no-such-dir"


def test_cli_engine_ray_json_equals_local(local_ray, folder):
    runner = CliRunner()
    local = runner.invoke(triage, [str(folder), "--format", "json", "-j", "2"])
    on_ray = runner.invoke(triage, [str(folder), "--format", "json", "--engine", "ray"])
    assert local.exit_code == on_ray.exit_code == 1            # OOMs among them
    assert json.loads(on_ray.stdout) == json.loads(local.stdout)


def test_nothing_matched_is_a_usage_error(local_ray, tmp_path):
    r = CliRunner().invoke(triage, [str(tmp_path / "nothing-here"), "--engine", "ray"])
    assert r.exit_code == 2 and "no log files matched" in r.output
