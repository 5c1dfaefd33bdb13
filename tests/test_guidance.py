"""Guidance where it matters: only the chosen steps written, LLaMA Board's rewrite of its config said,
no bitsandbytes move on an accelerator it does not run on."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "log_samples"


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_write_steps_applies_only_the_chosen_steps(tmp_path):
    log, cfg = tmp_path / "run.log", tmp_path / "run.yaml"
    shutil.copy(SAMPLES / "lf-first-step-activations.log", log)
    shutil.copy(SAMPLES / "lf-first-step-activations.yaml", cfg)
    full = json.loads(_cli("diagnose", str(log), "--config", str(cfg), "--format", "json").stdout)
    assert [s["action"] for s in full["plan"]][:2] == ["reduce_batch", "grad_checkpointing"]
    p = _cli("diagnose", str(log), "--config", str(cfg), "--write", "--steps", "2")
    assert p.returncode == 1, p.stderr
    text = cfg.read_text()
    assert "disable_gradient_checkpointing: false" in text            # step 2 written
    assert "per_device_train_batch_size: 8" in text                   # step 1 left alone
    assert (tmp_path / "run.yaml.bak").read_text() == (SAMPLES / "lf-first-step-activations.yaml").read_text()


def test_steps_the_plan_does_not_have_are_a_usage_error():
    p = _cli("diagnose", str(SAMPLES / "lf-first-step-activations.log"), "--config",
             str(SAMPLES / "lf-first-step-activations.yaml"), "--steps", "9")
    assert p.returncode == 2 and "steps 1 to" in p.stderr and "Traceback" not in p.stderr
    assert _cli("diagnose", str(SAMPLES / "lf-first-step-activations.log"), "--steps", "one").returncode == 2


def test_write_on_a_llamaboard_run_says_the_web_ui_rewrites_its_config(tmp_path):
    shutil.copytree(SAMPLES / "runs" / "llamaboard", tmp_path / "lb")
    run = tmp_path / "lb" / "saves" / "Qwen2.5-7B-Instruct" / "lora" / "train_2025-03-02-10-05-41"
    p = _cli("diagnose", str(run), "--write")
    assert p.returncode == 1, p.stderr
    assert "rewrites training_args.yaml" in p.stderr and "llamafactory-cli train" in p.stderr


def test_no_bitsandbytes_move_on_an_ascend_npu():
    d = json.loads(_cli("diagnose", str(SAMPLES / "npu-oom.log"), "--config", str(SAMPLES / "npu-oom.yaml"),
                        "--format", "json").stdout)
    assert d["accelerator"] == "npu"
    assert not {"quantize", "optimizer_8bit"} & {s["action"] for s in d["plan"]}
    assert any("bitsandbytes" in n and "Ascend" in n for n in d["notes"])
