"""The memory budget: the course's worked examples, the measured ground truth, names people write."""

import json
import subprocess
import sys

import pytest

from advisor.memory.budget import Spec, estimate, lora_params
from advisor.memory.catalog import find_gpu, find_model
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
    assert med <= 8 and p90 <= 20, last


# ---- budget v2: phases, sharding, overhead terms, padding ---------------------------------------
def test_peak_is_the_largest_phase_and_components_add_up():
    for kw in (dict(method="lora", batch=4, seq=2048), dict(method="full", batch=1, seq=512),
               dict(method="full", batch=4, seq=2048, grad_ckpt=False), dict(method="qlora", quant_bits=4)):
        b = estimate(spec("Llama-2-7b", **kw))
        assert b.total_gib == pytest.approx(max(b.phases.values()), abs=0.01)
        assert b.phases[b.peak_phase] == pytest.approx(b.total_gib, abs=0.01)
        parts = (b.weights_gib + b.gradients_gib + b.optimizer_states_gib + b.activations_gib + b.logits_gib
                 + b.working_buffers_gib + b.overhead_gib)
        assert parts == pytest.approx(b.total_gib, abs=0.06)
        assert any(a.startswith(f"peak in the {b.peak_phase.replace('_', ' ')}") for a in b.assumptions)


def test_full_finetune_with_checkpointing_peaks_at_the_optimizer_step_not_the_sum():
    b = estimate(spec("Llama-2-7b", method="full", precision="pure_bf16", batch=4, seq=2048, grad_ckpt=True))
    assert b.peak_phase in ("optimizer_step", "backward") and b.activations_gib < 3
    summed = b.phases["forward"] + b.gradients_gib          # the old estimate added everything
    assert b.total_gib < summed
    lora = estimate(spec("Llama-2-7b", method="lora", batch=4, seq=2048))
    assert lora.peak_phase == "backward"


def test_overhead_is_named_terms_that_exist():
    b = estimate(spec("Qwen2.5-7B", method="lora", batch=8, seq=4096, grad_ckpt=False))
    t = b.overhead_terms
    assert set(t) == {"cuda_context_gib", "workspaces_gib", "allocator_slack_gib"}
    assert 0.5 <= t["cuda_context_gib"] <= 1.0 and t["workspaces_gib"] < 1
    assert sum(t.values()) == pytest.approx(b.overhead_gib, abs=0.02)


def test_padding_worst_case_is_said_in_one_line_with_a_typical_case():
    b = estimate(spec("Qwen2.5-7B", method="lora", batch=2, seq=4096))
    lines = [a for a in b.assumptions if a.startswith("padding:")]
    assert len(lines) == 1 and "4096" in lines[0] and "worst case" in lines[0] and "2048" in lines[0]
    assert b.typical_total_gib is not None and b.typical_total_gib < b.total_gib
    packed = estimate(spec("Qwen2.5-7B", method="lora", batch=2, seq=4096, packing=True))
    assert packed.typical_total_gib is None and any(a.startswith("packing:") for a in packed.assumptions)


def test_zero3_per_gpu_holds_the_gathered_working_set():
    one = estimate(spec("Llama-2-70b", method="lora", batch=1, seq=512, gpus=1))
    z3 = estimate(spec("Llama-2-70b", method="lora", batch=1, seq=512, gpus=8, zero=3))
    assert z3.sharding == "zero3" and z3.shard_degree == 8
    assert z3.weights_gib == pytest.approx(one.weights_gib / 8, rel=0.02)
    assert z3.working_buffers_gib > 0.5                                   # gathered lm_head + a layer + buckets
    assert z3.total_gib > one.weights_gib / 8 + one.activations_gib
    off = estimate(spec("Llama-2-70b", method="lora", batch=1, seq=512, gpus=8, zero=3, offload=True))
    assert off.weights_gib == 0 and off.total_gib < z3.total_gib


def test_fsdp_keeps_fp32_flat_parameters_and_two_gathered_layers():
    fs = estimate(spec("Llama-2-70b", method="lora", batch=8, seq=2048, gpus=8, fsdp="full_shard", packing=True))
    z3 = estimate(spec("Llama-2-70b", method="lora", batch=8, seq=2048, gpus=8, zero=3, packing=True))
    assert fs.sharding == "fsdp_full" and fs.weights_gib == pytest.approx(2 * z3.weights_gib, rel=0.05)
    # huggingface/peft docs (accelerate/fsdp.md): 72-80 GB per GPU for this run
    assert 68 <= fs.total_gib <= 84
    grad_op = estimate(spec("Llama-2-70b", method="lora", batch=8, seq=2048, gpus=8, fsdp="shard_grad_op"))
    assert grad_op.total_gib > fs.total_gib
    hybrid = estimate(spec("Llama-2-70b", method="lora", batch=1, seq=512, gpus=16, fsdp="hybrid_shard"))
    assert hybrid.shard_degree == 8


def test_zero2_buckets_and_fp32_partitions():
    base = dict(method="full", batch=1, seq=512, gpus=4)
    z1 = estimate(spec("Qwen2.5-7B", **base, zero=1))
    z2 = estimate(spec("Qwen2.5-7B", **base, zero=2))
    small = estimate(spec("Qwen2.5-7B", **base, zero=2, reduce_bucket=5e7))
    assert z2.gradients_gib < z1.gradients_gib and z2.total_gib < z1.total_gib
    assert small.total_gib < z2.total_gib


def test_qlora_pays_for_the_dequantised_linear():
    q = estimate(spec("Llama-3.1-70B", method="qlora", quant_bits=4, seq=512))
    lora = estimate(spec("Llama-3.1-70B", method="lora", seq=512))
    assert 0.5 < q.working_buffers_gib < 3 and lora.working_buffers_gib < q.working_buffers_gib


def test_loss_stays_16_bit_only_without_autocast_and_without_a_model_upcast():
    kw = dict(method="lora", batch=1, seq=8192, precision="fp16")
    qwen_amp = estimate(spec("Qwen-7B", **kw))
    qwen_ds = estimate(spec("Qwen-7B", **kw, zero=2))          # DeepSpeed's engine: no autocast
    llama_ds = estimate(spec("Llama-2-7b", **kw, zero=2))
    llama_amp = estimate(spec("Llama-2-7b", **kw))
    assert qwen_ds.logits_gib == pytest.approx(qwen_amp.logits_gib * 8 / 12, rel=0.01)
    assert llama_ds.logits_gib == pytest.approx(llama_amp.logits_gib, rel=0.01)   # HF Llama upcasts itself


def test_sharded_qlora_keeps_quantisation_constants_and_root_unit_whole():
    kw = dict(method="qlora", quant_bits=4, batch=2, seq=2048, gpus=2, fsdp="full_shard", packing=True)
    on_gpu = estimate(spec("Llama-2-70b", **kw))
    offload = estimate(spec("Llama-2-70b", **kw, offload=True))
    lora_off = estimate(spec("Llama-2-70b", **dict(kw, method="lora", quant_bits=None), offload=True))
    # offloaded, the packed 4-bit weights leave the GPU but their absmax constants (~1 GiB for 70B) stay
    assert 0.5 < offload.weights_gib < 2 and lora_off.weights_gib == 0
    assert offload.weights_gib < on_gpu.weights_gib
    # the root unit (embeddings + LM head, 16 bit) stays gathered: more than a 4-bit copy of them would be
    m = find_model("Llama-2-70b")[0]
    assert on_gpu.working_buffers_gib > 2 * m.vocab * m.hidden * 2 / 2**30


def test_sharding_settings_from_configs():
    from advisor.plans.runspec import deepspeed_buckets, fsdp_of
    assert fsdp_of("full_shard auto_wrap") == "full_shard"
    assert fsdp_of("FULL_SHARD") == "full_shard" and fsdp_of(2) == "shard_grad_op" and fsdp_of("4") == "hybrid_shard"
    assert fsdp_of("full_shard offload auto_wrap") == "full_shard_offload" and fsdp_of("no_shard") == ""
    got = deepspeed_buckets({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                   "stage3_prefetch_bucket_size": 5e7, "overlap_comm": True}})
    assert got == {"stage3_prefetch_bucket_size": 5e7, "overlap_comm": True}


def test_budget_cli_fsdp_and_new_json_keys():
    rc, out, _ = run_budget("--model", "Llama-2-70b", "--method", "lora", "--batch", "8", "--seq", "2048",
                            "--gpus", "8", "--fsdp", "full_shard", "--packing", "--format", "json")
    j = json.loads(out)
    assert rc == 0 and j["sharding"] == "fsdp_full" and j["peak_phase"] in ("forward", "backward", "optimizer_step")
    for key in ("phases", "overhead_terms", "working_buffers_gib", "estimates", "typical_total_gib"):
        assert key in j


def test_sharded_groundtruth_error_within_targets():
    path = ROOT / "benchmarks" / "data" / "sharded_groundtruth.csv"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "budget_calibration.py"), str(path)],
                       capture_output=True, text=True, timeout=120)
    line = next(x for x in p.stdout.splitlines() if x.startswith("sharded"))
    med = float(line.split("median |error|")[1].split("%")[0])
    p90 = float(line.split("p90 |error|")[1].split("%")[0])
    # the known gap: ZeRO-3 offload_param (LlamaFactory#5977) reads ~16 % low
    assert med <= 8 and p90 <= 20, line


def test_fit_verdict_bands():
    from advisor.memory.budget import fit_verdict
    assert fit_verdict(8.0, 10.0) == "fits"          # 80 %: exactly the margin
    assert fit_verdict(8.01, 10.0) == "tight"
    assert fit_verdict(10.0, 10.0) == "tight"
    assert fit_verdict(10.01, 10.0) == "short"
    assert fit_verdict(5.0, None) is None            # no card: no verdict


def test_tight_is_said_in_every_format_and_still_exits_0():
    # the same run on three card sizes: fits, tight, short (the estimate is ~25.5 GiB)
    args = ("--model", "Qwen2.5-7B-Instruct", "--method", "lora", "--batch", "2", "--seq", "2048")
    verdicts = {}
    for size in ("40GiB", "30GiB", "20GiB"):
        rc, out, _ = run_budget(*args, "--gpu", size, "--format", "json")
        j = json.loads(out)
        verdicts[size] = (j["fit"], rc)
        assert j["fits"] == (j["fit"] == "fits")     # `fits` keeps its meaning: with the 20 % margin
    assert verdicts == {"40GiB": ("fits", 0), "30GiB": ("tight", 0), "20GiB": ("short", 1)}
    for fmt, lang, word in (("text", "en", "→ tight"), ("markdown", "en", "→ tight"), ("text", "zh", "→ 偏紧"),
                            ("html", "en", "tight: fits the card"), ("html", "zh", "偏紧：放得下")):
        rc, out, _ = run_budget(*args, "--gpu", "30GiB", "--format", fmt, "--lang", lang)
        assert rc == 0 and word in out, (fmt, lang)


def test_peers_table_runs_with_or_without_the_peers_installed():
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "budget_peers.py")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    ours = [x for x in lines if x.startswith("oom-doctor")]
    assert len(ours) == 2 and "%" in ours[0]
    for peer in ("vramcalc", "ftuneai", "ml-memguard", "peft-doctor"):
        rows = [x for x in lines if x.startswith(peer)]
        # a peer either has a figure on the rows it can express or is said not to have run, with why
        assert rows and all(("%" in x or " -" in x or "not run" in x) for x in rows), peer
        if any("not run" in x for x in rows):
            assert any(x.startswith(f"{peer}: not run here (") for x in lines)
