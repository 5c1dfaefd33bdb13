"""What fits a card (plans/fit.py, `budget`): the cheapest moves, in the order they cost the results,
each lowering the estimate, and a run that then fits with the margin; said in every format."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.memory.budget import RESERVE_GIB, Spec, estimate, fit_verdict
from advisor.memory.catalog import find_model
from advisor.plans.fit import _ladder, what_fits

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("Qwen2.5-1.5B", "Qwen2.5-7B", "Llama-3.1-8B", "Qwen2.5-14B", "Qwen2.5-32B", "Mistral-7B-v0.3")


def _random_spec(rng):
    shape, _ = find_model(rng.choice(MODELS))
    gpus = rng.choice((1, 1, 2, 4, 8))
    return Spec(model=shape, method=rng.choice(("full", "lora", "qlora")), batch=rng.choice((1, 2, 4, 8, 16)),
                seq=rng.choice((512, 1024, 2048, 4096, 8192)), grad_ckpt=rng.random() < 0.5, gpus=gpus,
                zero=rng.choice((0, 2, 3)) if gpus > 1 else 0, capacity_gib=rng.choice((23.65, 39.39, 47.5, 79.15)))


@pytest.mark.parametrize("seed", range(40))
def test_the_moves_lower_the_estimate_in_ladder_order_and_end_in_a_fit(seed):
    spec = _random_spec(random.Random(seed))
    fit = what_fits(spec)
    assert fit is not None
    order = [name for name, _, _ in _ladder(spec)]
    assert [m.name for m in fit.moves] == sorted((m.name for m in fit.moves), key=order.index)
    totals = [fit.total_gib] + [m.total_gib for m in fit.moves]
    assert all(b < a for a, b in zip(totals, totals[1:]))
    after = spec
    for m in fit.moves:
        after = after.model_copy(update=m.update)
    verdict = fit_verdict(estimate(after).total_gib, spec.capacity_gib - RESERVE_GIB)
    assert (verdict == "fits") == fit.fits
    if fit.fits:       # never a move changing the results that the fit does not need
        for m in [m for m in fit.moves if not m.same_result]:
            without = spec
            for k in fit.moves:
                if k is not m:
                    without = without.model_copy(update=k.update)
            assert fit_verdict(estimate(without).total_gib, spec.capacity_gib - RESERVE_GIB) != "fits"


def test_a_run_that_fits_needs_no_move():
    shape, _ = find_model("Qwen2.5-1.5B")
    fit = what_fits(Spec(model=shape, method="qlora", quant_bits=4, batch=1, seq=512, capacity_gib=79.15))
    assert fit.fits and not fit.moves


def _budget(*args):
    env = dict(os.environ, COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "advisor.cli", "budget", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


@pytest.mark.parametrize("config", ["lf-first-step-activations.yaml", "host-oom-killed.yaml", "healthy-run.yaml"])
def test_budget_says_what_fits_in_every_format(config):
    cfg = str(ROOT / "log_samples" / config)
    text = _budget("--gpu", "4090", "--config", cfg).stdout
    assert "What fits this card" in text and ("it fits" in text or "would fit a card of" in text)
    assert max(map(len, text.splitlines())) <= 80
    md = _budget("--gpu", "4090", "--config", cfg, "--format", "markdown").stdout
    assert "**What fits this card" in md
    js = json.loads(_budget("--gpu", "4090", "--config", cfg, "--format", "json").stdout)
    assert js["what_fits"]["capacity_gib"] == pytest.approx(23.65, abs=0.5)
    assert isinstance(js["what_fits"]["moves"], list)
    zh = _budget("--gpu", "4090", "--config", cfg, "--lang", "zh").stdout
    assert "在这张卡上怎样放得下" in zh


def test_budget_without_a_card_names_the_flag_and_the_common_cards():
    p = _budget("--model", "Qwen2.5-7B", "--method", "full")
    assert "No card given (--gpu" in p.stdout and "80 GiB" in p.stdout and "24 GiB" in p.stdout
    js = json.loads(_budget("--model", "Qwen2.5-7B", "--format", "json").stdout)
    assert js["what_fits"] is None and {c["fit"] for c in js["common_cards"]} <= {"fits", "tight", "short"}


def test_offload_never_lowers_the_sharding_a_move_before_raised():
    shape, _ = find_model("Qwen2.5-32B")
    fit = what_fits(Spec(model=shape, method="full", batch=1, seq=1024, gpus=8, zero=0, capacity_gib=79.15))
    moves = {m.name: m.update for m in fit.moves}
    assert moves["zero_sharding"] == {"zero": 3} and moves["cpu_offload"]["zero"] == 3
