"""A config patched after its log was written: the planner says so and never compounds (a second
halving of a batch the log never ran with)."""

import shutil
import subprocess
import sys

from advisor.pipeline import diagnose_path
from conftest import ROOT, SAMPLES

LOG = SAMPLES / "lf-first-step-activations.log"


def patched_copy(tmp_path):
    """The sample's config as `--write` left it, under a new name (no backup beside it)."""
    cfg = tmp_path / "train.yaml"
    shutil.copy(SAMPLES / "lf-first-step-activations.yaml", cfg)
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", str(LOG), "--config", str(cfg), "--write"],
                       capture_output=True, cwd=ROOT, timeout=60)
    assert p.returncode == 1, p.stderr
    fresh = tmp_path / "again.yaml"
    fresh.write_bytes(cfg.read_bytes())
    return fresh


def test_the_planner_sees_its_own_patch_and_patches_nothing(tmp_path):
    first = diagnose_path(str(LOG), config_path=str(SAMPLES / "lf-first-step-activations.yaml"))
    batch = first.plan[0]["changes"]["per_device_train_batch_size"]
    cfg = patched_copy(tmp_path)
    d = diagnose_path(str(LOG), config_path=str(cfg))
    assert d.patch is None and d.snippet is None
    assert d.plan[0]["changes"]["per_device_train_batch_size"] == batch       # from the log's 8, not the file's 1
    assert "already holds this plan's changes" in d.notes[0]
    zh = diagnose_path(str(LOG), config_path=str(cfg), lang="zh")
    assert "修改之前" in zh.notes[0] and zh.patch is None


def test_a_second_write_leaves_the_file_as_it_was(tmp_path):
    cfg = patched_copy(tmp_path)
    before = cfg.read_bytes()
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", str(LOG), "--config", str(cfg), "--write"],
                       capture_output=True, cwd=ROOT, timeout=60)
    assert cfg.read_bytes() == before, p.stderr
    assert b"nothing written" in p.stderr or b"nothing to write" in p.stderr


def test_a_config_that_disagrees_without_holding_the_plan_still_gets_a_patch(tmp_path):
    # the file says batch 4 while the log ran 8: not what the plan writes, so it is planned as usual
    cfg = tmp_path / "train.yaml"
    text = (SAMPLES / "lf-first-step-activations.yaml").read_text(encoding="utf-8")
    cfg.write_text(text.replace("per_device_train_batch_size: 8", "per_device_train_batch_size: 4"), encoding="utf-8")
    d = diagnose_path(str(LOG), config_path=str(cfg))
    assert d.conflicts and d.patch
    assert not any("already holds" in n for n in d.notes)
