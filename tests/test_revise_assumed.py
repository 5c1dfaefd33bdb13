"""Unknowns filled from the evidence: when the log and the config do not say the method or the length,
the value the budget assumes must explain the allocator's numbers (the run did fail); one that leaves
the estimate far below what was in use is revised, and the report says why and which flag corrects it."""

import pytest

from advisor.memory.budget import Spec, estimate
from advisor.memory.catalog import find_model
from advisor.pipeline import diagnose_text

LOG = """[INFO|modeling_utils.py:3000] loading weights file /models/{model}/model.safetensors
  0%|          | 0/100 [00:00<?, ?it/s]
Traceback (most recent call last):
  File "/env/site-packages/transformers/trainer.py", line 2400, in _inner_training_loop
    self.optimizer.step()
  File "/env/site-packages/torch/optim/adamw.py", line 100, in _init_group
    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total capacity of \
{cap:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, this process has {used:.2f} GiB memory \
in use. Of the allocated memory {alloc:.2f} GiB is allocated by PyTorch, and 0.20 GiB is reserved by PyTorch but \
unallocated.
"""


def _log(model, cap, used, tried):
    return LOG.format(model=model, cap=cap, free=max(0.05, cap - used), used=used, alloc=used - 0.2, tried=tried)


def _assumptions(d):
    return (d.budget or {}).get("assumptions") or []


@pytest.mark.parametrize("model, cap", [("Qwen2.5-7B-Instruct", 79.15), ("Llama-2-13b-hf", 79.15),
                                         ("Qwen2.5-3B-Instruct", 39.39), ("Mistral-7B-v0.1", 47.5)])
def test_numbers_of_a_full_fine_tune_revise_an_assumed_lora(model, cap):
    shape, _ = find_model(model)
    lora = estimate(Spec(model=shape, method="lora", batch=1, seq=1024)).total_gib
    used = cap - 0.3                                   # the card full of long-lived tensors
    assert lora < 0.8 * used                           # the case holds what it claims
    d = diagnose_text(_log(model, cap, used, 0.5))
    notes = _assumptions(d)
    revised = [n for n in notes if n.startswith("fine-tuning method not stated: the allocator's numbers")]
    assert revised and "rule out lora" in revised[0] and "estimated as full" in revised[0], notes
    assert d.budget["total_gib"] >= 0.8 * (used + 0.5)


def test_numbers_a_lora_run_explains_keep_the_assumption():
    shape, _ = find_model("Qwen2.5-7B-Instruct")
    lora = estimate(Spec(model=shape, method="lora", batch=1, seq=1024)).total_gib
    d = diagnose_text(_log("Qwen2.5-7B-Instruct", lora + 3, lora - 1.0, 1.2))
    notes = _assumptions(d)
    assert any(n.startswith("fine-tuning method not stated: assumed lora") for n in notes), notes


def test_a_stated_method_is_never_revised():
    d = diagnose_text(_log("Qwen2.5-7B-Instruct", 79.15, 78.8, 0.5).replace(
        "loading weights", "Fine-tuning method: LoRA\nloading weights"))
    assert d.facts.get("method") == "lora"
    assert not any(n.startswith("fine-tuning method") for n in _assumptions(d))
    assert any("rule out 1024" in n for n in _assumptions(d))     # the length, unstated, is what gives way


def test_the_text_report_names_the_flag_for_each_assumption():
    from advisor.render.text import render_text
    d = diagnose_text(_log("Qwen2.5-7B-Instruct", 79.15, 78.8, 0.5))
    text = render_text(d, "en", width=1000)
    assert "correct it with --method" in text and "correct it with --seq-len" in text


def test_diagnose_flags_correct_the_assumptions(tmp_path):
    """`diagnose --method/--seq-len/--batch`, in a fresh process: the stated values replace the guesses."""
    import json
    import subprocess
    import sys
    log = tmp_path / "train.log"
    log.write_text(_log("Qwen2.5-7B-Instruct", 79.15, 78.8, 0.5))
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", str(log), "--format", "json",
                        "--method", "lora", "--seq-len", "4096", "--batch", "2"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert (d["facts"]["method"], d["facts"]["seq_len"], d["facts"]["batch"]) == ("lora", 4096, 2)
    notes = d["budget"]["assumptions"]
    assert not any(n.startswith(("fine-tuning method", "sequence length", "per-device batch")) and "not stated" in n
                   for n in notes)
    bad = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", str(log), "--method", "lorax"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
