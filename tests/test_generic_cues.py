"""Cues that hold in anyone's script: Keras's own training bar and `model.fit(`; a generation with no
engine gets moves in what the script does, never a training knob."""

import random
from pathlib import Path

import pytest

from advisor.pipeline import diagnose_path, diagnose_text
from advisor.plans.plan import TRAINING_ONLY

CUES = Path(__file__).parent / "data" / "cues"


def test_a_keras_fit_that_logged_batches_failed_mid_training_in_the_steps_activations():
    d = diagnose_path(str(CUES / "keras.log"))
    assert (d.verdict, d.phase, d.component) == ("device_oom", "mid_training", "activations")
    assert "model.fit(" in d.basis["phase"]


@pytest.mark.parametrize("seed", range(10))
def test_keras_bars_of_any_count_are_progress(seed):
    rng = random.Random(seed)
    n, total = rng.randint(2, 400), rng.randint(401, 5000)
    bar = f"{n:>4}/{total} [{'=' * rng.randint(0, 20)}>{'.' * rng.randint(0, 20)}] - ETA: 1:0{rng.randint(0, 9)} - loss: {rng.random():.4f}"
    log = (CUES / "keras.log").read_text().replace(" 12/500 [..............................] - ETA: 5:21 - loss: 2.3012 - accuracy: 0.1100", bar)
    d = diagnose_text(log)
    assert d.phase == "mid_training" and d.facts.get("step") == n


def test_a_generation_script_gets_no_training_knob():
    d = diagnose_path(str(CUES / "infer.log"))
    assert d.phase == "inference" and d.plan
    actions = [s["action"] for s in d.plan]
    assert not set(actions) & set(TRAINING_ONLY)
    assert "accumulation" not in " ".join(s.get("why", "") + str(s.get("display", "")) for s in d.plan)


def test_a_training_script_keeps_its_training_moves():
    d = diagnose_path(str(CUES / "loop.log"))
    assert d.phase == "mid_training" and "grad_checkpointing" in [s["action"] for s in d.plan]


def test_a_log_that_names_no_framework_gets_words_not_trainer_keys():
    d = diagnose_path(str(CUES / "loop.log"))            # a plain training loop: no Trainer, no config
    assert d.facts.get("framework") is None and d.plan
    assert all(not s["changes"] for s in d.plan), [s["changes"] for s in d.plan]
    assert all(s.get("display") for s in d.plan)
