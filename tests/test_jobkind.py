"""Job kinds (advisor/jobkind.py, data/jobkinds.yaml) and the plans that follow them: an engine gets
its own settings, a prediction its eval batch, never a training batch."""

import os

import pytest

from advisor.read import dialects as D
from advisor.diagnosis.jobkind import decide, engine_settings
from advisor.pipeline import diagnose_path
from advisor.evidence.timeline import Frame
from conftest import ROOT, SAMPLES, SHARED

REFERENCE = SHARED / "reference" / "dialects"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference absent")

TRAINING_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
                 "disable_gradient_checkpointing", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")


def sample(slug, config):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return diagnose_path(f"log_samples/{slug}.log", config_path=f"log_samples/{config}")
    finally:
        os.chdir(cwd)


def applied(d):
    return {k for s in d.plan if not s["alternative"] for k in s["changes"]}


@needs_reference
def test_vllm_server_gets_engine_moves_in_its_own_dialect():
    d = sample("vllm-serve-sampler-oom", "vllm-serve-sampler-oom.yaml")
    assert d.facts["job_kind"] == "serving" and d.phase == "inference"
    assert d.budget is None                      # the training estimate does not describe a server
    keys = {k for s in d.plan for k in s["changes"]}
    assert not keys & set(TRAINING_KEYS)
    vocab = set((REFERENCE / "vllm.txt").read_text().split())
    assert all(k.replace("-", "_") in vocab for k in keys), keys
    first = d.plan[0]
    assert first["changes"] == {"max-num-seqs": [256, 128]}
    assert {"max-num-seqs", "gpu-memory-utilization"} == applied(d)
    # what changes results (a shorter max_model_len) is offered, never applied
    assert all(s["alternative"] for s in d.plan if s["applicability"] == "unsafe")


def test_server_without_a_config_reads_the_engine_settings_from_its_log():
    d = diagnose_path(str(SAMPLES / "vllm-serve-sampler-oom.log"))
    assert d.facts["job_kind"] == "serving"
    assert d.facts["engine"]["max_num_seqs"] == 256 and d.facts["engine"]["gpu_memory_utilization"] == 0.95
    assert d.plan[0]["action"] == "reduce_batch" and d.plan[0]["changes"]["max_num_seqs"] == [256, 128]


def test_rl_rollout_lowers_the_engine_share_not_the_actor_batch():
    d = sample("verl-grpo-rollout-oom", "verl-grpo-rollout-oom.sh")
    assert d.facts["job_kind"] == "rl_rollout" and d.basis["job_kind"] == "frames"
    assert d.plan[0]["action"] == "engine_memory_share"
    assert d.plan[0]["changes"] == {"actor_rollout_ref.rollout.gpu_memory_utilization": [0.7, 0.6]}
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" not in applied(d)
    assert "actor_rollout_ref.rollout.max_num_seqs" in applied(d)


def test_rl_actor_update_stays_a_training_step():
    d = sample("verl-grpo-actor-oom", "verl-grpo-actor-oom.sh")
    assert d.facts["job_kind"] == "training"
    assert d.plan[0]["changes"] == {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": [8, 4]}


def test_prediction_moves_eval_batch_and_never_training_batch():
    d = sample("lf-predict-generate-oom", "lf-predict-generate-oom.yaml")
    assert d.facts["job_kind"] == "prediction"
    assert d.plan[0]["changes"] == {"per_device_eval_batch_size": [32, 16]}
    assert not {k for s in d.plan for k in s["changes"]} & set(TRAINING_KEYS)
    gen = [s for s in d.plan if s["action"] == "generation_len"]
    assert gen and gen[0]["alternative"] and gen[0]["applicability"] == "unsafe"


def test_evaluation_during_training_is_not_prediction():
    d = sample("lf-eval-accumulation-oom", "lf-eval-accumulation-oom.yaml")
    assert d.facts["job_kind"] == "evaluation"


class _Cfg:
    def __init__(self, data, dialect="llamafactory"):
        self.data, self.dialect, self.command, self.text = data, dialect, None, ""


def test_config_decides_prediction_only_without_training():
    assert decide([], [], None, _Cfg({"do_predict": True}), "evaluation")[0] == "prediction"
    assert decide([], [], None, _Cfg({"do_predict": True, "do_train": True}), "evaluation")[0] == "evaluation"


def test_a_training_job_takes_its_kind_from_the_phase():
    assert decide([], [], None, None, "load")[0] == "loading"
    assert decide([], [], None, None, "checkpoint_save")[0] == "saving"
    assert decide([], [], None, None, "mid_training")[0] == "training"
    assert decide([], [], "llamafactory-cli export merge.yaml", None, "load")[0] == "saving"


def test_rollout_frames_beat_the_engine_frames_they_call():
    frames = [Frame(path="/w/verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py", func="generate_sequences", line=1),
              Frame(path="/env/vllm/entrypoints/llm.py", func="generate", line=2)]
    assert decide(frames, [], None, None, "first_step") == ("rl_rollout", "frames")
    assert decide(frames[1:], [], None, None, "unknown") == ("offline_generation", "frames")


def test_engine_settings_from_namespace_and_warm_up_lines():
    got = engine_settings(["args: Namespace(max_model_len=8192, gpu_memory_utilization=0.9, enforce_eager=True)",
                           "CUDA out of memory occurred when warming up sampler with 64 dummy requests."])
    assert got == {"max_model_len": 8192, "gpu_memory_utilization": 0.9, "enforce_eager": True, "max_num_seqs": 64}


@needs_reference
def test_every_engine_key_the_planner_writes_is_in_the_dialect_reference():
    refs = REFERENCE
    for dialect in ("vllm", "verl", "trl", "ms_swift"):
        name = (D.table()[dialect].get("reference")) or dialect
        vocab = set((refs / f"{name}.txt").read_text().split())
        for knob in ("gpu_memory_utilization", "max_num_seqs", "max_model_len", "enforce_eager", "kv_cache_dtype"):
            entry = D.knob(dialect, knob)
            if entry and entry.get("key"):
                assert entry["key"] in vocab, (dialect, knob)


def test_engine_lines_beside_a_training_step_are_a_trainers_generator():
    train = [Frame(path="/env/transformers/trainer.py", func="training_step", line=9)]
    lines = ["INFO [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='m'"]
    assert decide(train, lines, None, None, "first_step")[0] == "training"
    assert decide([], lines, None, None, "unknown")[0] == "offline_generation"


GENERATE = """Traceback (most recent call last):
  File "/home/u/run_inference.py", line 40, in <module>
    out = model.generate(**inputs, max_new_tokens=512)
  File "/env/lib/python3.10/site-packages/transformers/generation/utils.py", line 2564, in generate
    result = self._sample(
  File "/env/lib/python3.10/site-packages/transformers/generation/utils.py", line 2784, in _sample
    outputs = self(**model_inputs, return_dict=True)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.00 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
"""


def test_a_generate_script_is_not_given_an_engines_settings():
    from advisor.pipeline import diagnose_text
    d = diagnose_text(GENERATE)
    assert d.facts["job_kind"] == "offline_generation" and d.basis["job_kind"] == "phase"
    said = " ".join(str(s["changes"]) + s["display"] for s in d.plan)
    assert "max_num_seqs" not in said and "gpu_memory_utilization" not in said
    assert not any(s["action"] in ("engine_memory_share", "enforce_eager", "kv_cache_fp8") for s in d.plan)


def test_the_benchmark_evaluator_is_a_prediction_job_whose_batch_is_batch_size(tmp_path):
    """`llamafactory-cli eval` (task, n_shot) runs forward passes only; its batch_size is what a smaller
    evaluation batch changes, not per_device_eval_batch_size, which it never reads."""
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("model_name_or_path: /models/Meta-Llama-3-8B-Instruct\ntemplate: llama3\nfinetuning_type: lora\n"
                   "task: mmlu_test\nlang: en\nn_shot: 5\nbatch_size: 4\n")
    log = tmp_path / "eval.log"
    log.write_text("(lf) root@host:/work/LLaMA-Factory# bash evaluate.sh\n"
                   '  File "/env/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py", line 381, in forward\n'
                   "    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)\n"
                   "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.17 GiB. GPU 0 has a total capacity "
                   "of 23.65 GiB of which 2.52 GiB is free. Of the allocated memory 17.72 GiB is allocated by PyTorch, and "
                   "2.94 GiB is reserved by PyTorch but unallocated.\n")
    d = diagnose_path(str(log), config_path=str(cfg))
    assert (d.phase, d.facts["job_kind"], d.facts["script"]) == ("evaluation", "prediction", "evaluate.sh")
    assert d.plan[0]["changes"] == {"batch_size": [4, 2]} and d.budget is None


def test_an_engine_serving_in_fp32_loads_weights_beyond_its_card_and_goes_16_bit_first(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("model: /models/Qwen2-7B-Instruct\nmax_model_len: 512\ndtype: float\nenforce_eager: true\n")
    log = tmp_path / "serve.log"
    log.write_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total "
                   "capacity of 21.67 GiB of which 4.06 MiB is free. Of the allocated memory 21.30 GiB is allocated by "
                   "PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.\n"
                   "INFO:     Started server process [4242]\n")
    d = diagnose_path(str(log), config_path=str(cfg))
    assert (d.phase, d.component, d.facts["precision"]) == ("load", "weights", "fp32")
    assert d.plan[0]["changes"] == {"dtype": ["float", "bfloat16"]}

