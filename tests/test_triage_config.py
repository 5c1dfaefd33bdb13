"""A config beside a log (issue 16): the same stem, or the only YAML/JSON of its folder, is that
member's config; an unreadable one costs the member its config, never its diagnosis."""

import shutil

from conftest import SAMPLES

from advisor.triage.batch import diagnose_item
from advisor.triage.config import config_beside

LOG, CFG = SAMPLES / "lf-first-step-activations.log", SAMPLES / "lf-first-step-activations.yaml"


def test_the_same_stem_wins_then_the_only_yaml_then_the_only_json(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("x", encoding="utf-8")
    assert config_beside(str(log)) is None
    (tmp_path / "label.json").write_text("{}", encoding="utf-8")
    assert config_beside(str(log)) is None          # a JSON not named like a config is not taken
    (tmp_path / "ds_config.json").write_text("{}", encoding="utf-8")
    assert config_beside(str(log)) == str(tmp_path / "ds_config.json")
    other = tmp_path / "sub"
    other.mkdir()
    (other / "a.log").write_text("x", encoding="utf-8")
    (other / "train.yaml").write_text("a: 1\n", encoding="utf-8")
    (other / "meta.json").write_text("{}", encoding="utf-8")
    assert config_beside(str(other / "a.log")) == str(other / "train.yaml")
    (other / "eval.yaml").write_text("a: 1\n", encoding="utf-8")
    (other / "b.log").write_text("x", encoding="utf-8")
    assert config_beside(str(other / "b.log")) is None       # two YAMLs: which is b's is a guess
    (other / "b.yml").write_text("a: 1\n", encoding="utf-8")
    assert config_beside(str(other / "b.log")) == str(other / "b.yml")


def test_a_member_is_diagnosed_with_the_config_beside_it(tmp_path):
    shutil.copy(LOG, tmp_path / "r1.log")
    alone = diagnose_item("r1", str(tmp_path / "r1.log"))
    assert "config" not in alone
    shutil.copy(CFG, tmp_path / "r1.yaml")
    with_cfg = diagnose_item("r1", str(tmp_path / "r1.log"))
    assert with_cfg["config"] == str(tmp_path / "r1.yaml")
    assert with_cfg["verdict"] == alone["verdict"] == "device_oom"
    # the config says checkpointing is off: only with it does the plan reach for checkpointing
    steps = lambda row: [s["action"] for s in row["plan"]]
    assert "grad_checkpointing" in steps(with_cfg) and "grad_checkpointing" not in steps(alone)


def test_a_broken_config_beside_a_log_leaves_the_diagnosis(tmp_path):
    shutil.copy(LOG, tmp_path / "r2.log")
    (tmp_path / "r2.yaml").write_bytes(b"model: [unclosed\n\x00\xff")
    row = diagnose_item("r2", str(tmp_path / "r2.log"))
    assert "error" not in row and row["verdict"] == "device_oom" and "config" not in row
