"""The memory budget: the course's worked examples, the measured ground truth, names people write."""

import json
import subprocess
import sys

import pytest

from advisor.budget import Spec, estimate, lora_params
from advisor.catalog import find_gpu, find_model
from conftest import ROOT, SHARED

GB = 1e9 / 2**30          # the course speaks decimal GB


def spec(name, **kw):
    model, _ = find_model(name)
    return Spec(model=model, **kw)


def test_7b_full_is_16_bytes_per_parameter_plus_activations():
    b = estimate(spec("llama-2-7b", method="full", precision="bf16", seq=512))
    states = b.weights_gib + b.gradients_gib + b.optimizer_states_gib
    assert states / GB == pytest.approx(16 * 6.74, rel=0.02)          # ≈ 112 GB for "7B"
    assert b.total_gib > states


@pytest.mark.parametrize("method,low,high", [("lora", 16, 20), ("qlora", 5, 7)])
def test_7b_lora_and_qlora_ranges(method, low, high):
    b = estimate(spec("llama-2-7b", method=method, quant_bits=4 if method == "qlora" else None, seq=512))
    assert low <= b.total_gib / GB <= high


def test_qwen25_7b_qlora_on_a_24gb_card():
    b = estimate(spec("Qwen2.5-7B-Instruct", method="qlora", quant_bits=4, batch=2, seq=1024, grad_ckpt=True,
                      flash_attn=True, capacity_gib=find_gpu("4090")[0].capacity_gib))
    assert 8 <= b.total_gib <= 12
    assert b.fits


def test_70b_qlora_range():
    b = estimate(spec("Llama-3.1-70B", method="qlora", quant_bits=4, seq=512))
    assert 40 <= b.total_gib / GB <= 48


def test_components_move_the_right_way():
    base = dict(method="lora", batch=4, seq=2048, grad_ckpt=False, flash_attn=True)
    b = estimate(spec("Qwen2.5-7B", **base))
    assert estimate(spec("Qwen2.5-7B", **{**base, "grad_ckpt": True})).activations_gib < b.activations_gib / 4
    assert estimate(spec("Qwen2.5-7B", **{**base, "flash_attn": False})).activations_gib > b.activations_gib
    assert estimate(spec("Qwen2.5-7B", **{**base, "batch": 2})).logits_gib == pytest.approx(b.logits_gib / 2, rel=0.01)
    full = dict(method="full", batch=1, seq=512)
    one = estimate(spec("Qwen2.5-7B", **full))
    z2 = estimate(spec("Qwen2.5-7B", **full, zero=2, gpus=4))
    z3 = estimate(spec("Qwen2.5-7B", **full, zero=3, gpus=4))
    assert z2.optimizer_states_gib == pytest.approx(one.optimizer_states_gib / 4, rel=0.01)
    assert z3.weights_gib < z2.weights_gib == one.weights_gib
    assert estimate(spec("Qwen2.5-7B", **full, optim="paged_adamw_8bit")).optimizer_states_gib < one.optimizer_states_gib


def test_lora_all_targets_more_than_q_v():
    m, _ = find_model("Meta-Llama-3-8B-Instruct")
    assert lora_params(m, 8, "all") > 3 * lora_params(m, 8, "q_proj,v_proj")
    assert lora_params(m, 8, "q_proj,v_proj") == 32 * 8 * ((4096 + 4096) + (4096 + 1024))


@pytest.mark.parametrize("name,want", [
    ("Qwen2.5-7B-Instruct", "Qwen2.5-7B"), ("/data/models/qwen2_5_7b_instruct", "Qwen2.5-7B"),
    ("Meta-Llama-3-8B-Instruct", "Meta-Llama-3-8B"), ("TechxGenus/Meta-Llama-3-70B-Instruct-GPTQ", "Meta-Llama-3-70B"),
    ("Qwen/Qwen2.5-72B-Instruct", "Qwen2.5-72B"), ("baichuan-inc/Baichuan2-13B-Chat", "Baichuan2-13B"),
])
def test_model_names_people_write(name, want):
    model, _ = find_model(name)
    assert model is not None and model.name.lower() == want.lower()


def test_size_is_never_confused():
    model, _ = find_model("Qwen2.5-7B")
    assert "72" not in model.name


@pytest.mark.parametrize("name,cap,bf16", [("4090", 23.65, True), ("RTX 4090", 23.65, True), ("A100-80G", 79.15, True),
                                           ("V100-32G", 31.74, False), ("T4", 14.74, False), ("910B", 60.96, True),
                                           ("24GiB", 24.0, None)])
def test_gpu_names(name, cap, bf16):
    g, _ = find_gpu(name)
    assert g.capacity_gib == pytest.approx(cap, abs=0.05)
    assert g.bf16 is bf16


def run_budget(*args):
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "budget", *args], capture_output=True, cwd=ROOT, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_budget_cli_json_contract_and_exit_codes():
    rc, out, _ = run_budget("--model", "Qwen2.5-7B-Instruct", "--method", "qlora", "--batch", "2", "--seq", "1024",
                            "--gpu", "4090", "--format", "json")
    j = json.loads(out)
    assert rc == 0 and j["schema"] == "oom-doctor/budget/v1" and j["fits"] is True
    for key in ("weights_gib", "gradients_gib", "optimizer_states_gib", "activations_gib", "logits_gib", "overhead_gib",
                "total_gib", "capacity_gib", "usable_gib", "fits", "headroom_pct", "assumptions"):
        assert key in j
    rc, _, _ = run_budget("--model", "llama-2-7b", "--method", "full", "--gpu", "A100-80G")
    assert rc == 1


@pytest.mark.parametrize("args", [["--model", "no-such-model-xyz"], ["--params", "7B", "--batch", "0"],
                                  ["--params", "7B", "--seq", "-1"], ["--params", "7B", "--quant-bits", "3"],
                                  ["--params", "seven"], ["--params", "7B", "--config", "/nonexistent.yaml"]])
def test_budget_bad_input_is_exit_2(args):
    rc, _, err = run_budget(*args)
    assert rc == 2 and "Traceback" not in err and err.strip()


def test_groundtruth_error_within_targets():
    path = SHARED / "memory_groundtruth.csv"
    if not path.exists():
        pytest.skip("no ground truth")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "budget_calibration.py"), str(path)],
                       capture_output=True, text=True, timeout=120)
    last = p.stdout.strip().splitlines()[-1]
    med = float(last.split("median |error|")[1].split("%")[0])
    p90 = float(last.split("p90 |error|")[1].split("%")[0])
    assert med <= 15 and p90 <= 30, last
