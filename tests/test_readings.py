"""A bare allocator line still carries arithmetic: the readings its numbers allow, ranked, with what
confirms each, and the inputs that would decide (generated messages, any card and request size)."""

import random

import pytest

from advisor.diagnosis.readings import hypotheses
from advisor.pipeline import diagnose_text

BARE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total capacity "
        "of {cap:.2f} GiB of which {free:.2f} GiB is free. Of the allocated memory {alloc:.2f} GiB is allocated by "
        "PyTorch, and {cached:.2f} GiB is reserved by PyTorch but unallocated.\n")


def _memory(cap, tried, free, alloc, cached):
    return {"total_gib": cap, "tried_gib": tried, "free_gib": free, "allocated_by_pytorch_gib": alloc,
            "reserved_unallocated_gib": cached}


@pytest.mark.parametrize("seed", range(30))
def test_free_memory_above_the_request_reads_as_a_limit_not_capacity(seed):
    rng = random.Random(seed)
    cap = rng.choice((15.77, 23.65, 39.56, 79.15, 139.8))
    tried = rng.uniform(0.002, 0.05) * cap
    free = rng.uniform(2.5, 20) * tried
    readings = hypotheses(_memory(cap, tried, free, cap - free - 0.1, 0.05), "unknown", "unknown")
    assert readings[0]["component"] == "other_process" and readings[0]["confirm"]


@pytest.mark.parametrize("seed", range(30))
def test_a_full_card_and_a_small_request_read_as_long_lived_tensors(seed):
    rng = random.Random(seed)
    cap = rng.choice((23.65, 39.56, 79.15))
    tried = rng.uniform(0.001, 0.04) * cap
    alloc = rng.uniform(0.92, 0.98) * cap
    readings = hypotheses(_memory(cap, tried, 0.2 * tried, alloc, 0.005 * cap), "unknown", "unknown")
    assert [r["component"] for r in readings] == ["weights"]


@pytest.mark.parametrize("seed", range(30))
def test_one_request_of_a_tenth_of_the_card_reads_as_one_large_tensor(seed):
    rng = random.Random(seed)
    cap = rng.choice((23.65, 39.56, 79.15))
    tried = rng.uniform(0.12, 0.6) * cap
    readings = hypotheses(_memory(cap, tried, 0.01 * cap, 0.5 * cap, 0.001 * cap), "unknown", "unknown")
    assert readings[0]["component"] == "activations" and "logits" in readings[0]["why"]


def test_cached_memory_above_the_request_reads_as_fragmentation():
    readings = hypotheses(_memory(39.56, 1.0, 0.5, 33.0, 4.0), "unknown", "unknown")
    assert readings[0]["component"] == "fragmentation"


def test_a_log_that_decided_the_phase_gets_no_readings():
    assert hypotheses(_memory(39.56, 1.0, 0.5, 38.0, 0.1), "first_step", "activations") == []


def test_a_bare_line_asks_for_what_would_decide_in_the_json_and_the_text():
    from advisor.render.text import render_text
    d = diagnose_text(BARE.format(tried=0.77, cap=39.56, free=0.09, alloc=38.49, cached=0.29))
    assert d.hypotheses and d.hypotheses[0]["component"] == "weights"
    assert "lines above the traceback" in d.needs and "config" in d.needs
    text = render_text(d, "en", width=1000)
    assert "The numbers allow: weights" in text and "What would decide it:" in text
    zh = render_text(diagnose_text(BARE.format(tried=0.77, cap=39.56, free=0.09, alloc=38.49, cached=0.29), lang="zh"),
                     "zh", width=1000)
    assert "数字支持的解读" in zh and "能确定原因的信息" in zh
