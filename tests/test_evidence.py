"""The evidence ladder: framework knowledge as data, quoted calls, and what decided each answer."""

import pytest

from advisor.core.snapshot import snapshot
from advisor.evidence.frames import read_call, read_frame
from advisor.pipeline import diagnose_text
from advisor.evidence.timeline import Frame
from advisor.evidence.traceback import parse_frame

FRAMES = snapshot()["frames"]

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB. GPU 0 has a total capacity of "
       "44.64 GiB of which 54.25 MiB is free. Of the allocated memory 43.68 GiB is allocated by PyTorch, and "
       "93.78 MiB is reserved by PyTorch but unallocated.")


def _reading(sample):
    path, func = parse_frame(sample)
    return read_frame(Frame(path=path, func=func, line=1, source=""))


@pytest.mark.parametrize("entry", FRAMES["frames"] + FRAMES["fallback"], ids=lambda e: e["func"][:40])
def test_every_frame_entry_reads_its_own_sample(entry):
    r = _reading(entry["sample"])
    assert r is not None, entry["sample"]
    if entry.get("phase"):                  # an earlier entry may claim the sample, never with another phase
        assert r.phase == entry["phase"], (entry["sample"], r)


def test_every_framework_frame_is_known():
    """The per-framework table (read from the frameworks' sources) sits behind the hand-written one,
    which wins where both know a frame; each of its samples must still be read."""
    unread = [e["sample"] for e in FRAMES["frameworks"] if _reading(e["sample"]) is None]
    assert not unread


@pytest.mark.parametrize("entry", FRAMES["calls"], ids=lambda e: e["code"][:40])
def test_every_call_entry_reads_its_own_sample(entry):
    r = read_call(entry["sample"])
    assert r is not None and (r.phase, r.component) == (entry.get("phase"), entry.get("component")), entry


def test_every_diagnosis_says_what_decided_it():
    d = diagnose_text("Traceback (most recent call last):\n  File \"/x/transformers/trainer.py\", line 3852, in "
                      "evaluation_loop\n    logits = self.prediction_step(model, inputs)\n" + OOM + "\n", with_plan=False)
    assert d.phase == "evaluation" and d.basis["phase"] == "frame trainer.py:evaluation_loop"
    assert d.to_json_dict()["basis"]["component"]


def test_nothing_decides_means_unknown_said_so():
    d = diagnose_text(OOM + "\n", with_plan=False)
    assert d.phase == "unknown" and "nothing" in d.basis["phase"]


def test_a_cut_trace_still_names_the_optimizer_step():
    """Only the user's frames survive; the innermost source line is the call that ran."""
    log = ("Traceback (most recent call last):\n  File \"/work/main.py\", line 134, in main\n    optimizer.step()\n"
           + OOM + "\n")
    d = diagnose_text(log)
    assert (d.phase, d.component, d.rule) == ("first_step", "optimizer_states", "OOM305")
    assert d.basis["phase"].startswith("quoted call optimizer.step(")
    assert d.plan[0]["action"] == "optimizer_8bit"          # one GPU: no sharding to do


def test_a_source_line_whose_header_was_lost_names_a_backward_pass():
    log = " Calls into the C++ engine to run the backward pass\n" + OOM + "\n"
    d = diagnose_text(log, with_plan=False)
    assert d.component == "activations" and "backward" in d.basis["component"]


def test_a_frame_used_in_several_phases_names_none():
    """ZeRO-3's parameter gather runs in forward, backward and for a save: the save frame decides."""
    log = ("Traceback (most recent call last):\n"
           "  File \"/x/deepspeed/runtime/engine.py\", line 3525, in _zero3_consolidated_16bit_state_dict\n"
           "  File \"/x/deepspeed/runtime/zero/partition_parameters.py\", line 1200, in _all_gather\n" + OOM + "\n")
    d = diagnose_text(log, with_plan=False)
    assert d.phase == "checkpoint_save"


def test_a_request_a_hundred_cards_long_is_a_bug():
    d = diagnose_text(OOM.replace("86.00 MiB", "166664.71 GiB") + "\n")
    assert (d.verdict, d.rule, d.component, d.plan[0]["action"]) == ("device_oom", "OOM207", "unknown",
                                                                       "fix_non_memory_bug")


def test_shared_memory_exhaustion_is_host_memory():
    d = diagnose_text("2020-08-03T10:20:25 | mmf.trainers.core.training_loop: Starting training...\n"
                      "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
                      "shared memory (shm).\n", with_plan=False)
    assert (d.verdict, d.component, d.phase) == ("host_oom", "host_memory", "first_step")


@pytest.mark.parametrize("line", [
    "THCudaCheck FAIL file=/b/wheel/pytorch-src/torch/lib/THC/generic/THCStorage.cu line=66 error=2 : out of memory",
    "RuntimeError: CUDA failure 2: out of memory ; GPU=0 ; hostname=HOST ; expr=cudaMalloc((void**) &p, n)"])
def test_old_allocator_dialects_are_device_ooms(line):
    assert diagnose_text(line + "\n", with_plan=False).verdict == "device_oom"


def test_a_custom_loops_counter_and_loss_is_progress():
    log = "".join(f"Epoch: [1][{i}/48]\tTime 0.556 (0.356)\tLoss 70.{i} (70.8962)\n" for i in range(40, 46))
    d = diagnose_text(log + "THCudaCheck FAIL file=THCStorage.cu line=66 error=2 : out of memory\n", with_plan=False)
    assert d.phase == "mid_training"


def test_cuda_malloc_async_pool_reads_as_fragmentation():
    log = ("torch.cuda.OutOfMemoryError: Allocation on device 5 would exceed allowed memory. (out of memory)\n"
           "Currently allocated     : 54.14 GiB\nRequested               : 686.41 MiB\n"
           "Device limit            : 79.35 GiB\nFree (according to CUDA): 27.19 MiB\n")
    d = diagnose_text(log, with_plan=False)
    assert d.component == "fragmentation" and d.memory["async_pool_gib"] == pytest.approx(25.18, abs=0.01)


def test_cached_memory_just_short_of_fragmentation_is_named_in_a_note():
    """4 % of what PyTorch reserved, twice the request: not the story, but said."""
    log = OOM.replace("93.78 MiB is reserved", "1.70 GiB is reserved").replace("86.00 MiB", "502.00 MiB") \
             .replace("43.68 GiB is allocated", "39.00 GiB is allocated") + "\n"
    d = diagnose_text(log, with_plan=False)
    assert d.component != "fragmentation" and any("expandable_segments" in n for n in d.notes)


def test_the_entry_script_names_an_inference_job():
    log = ("[2023-07-04 17:31:27,755] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3.11', '-u', "
           "'bloom-inference-scripts/bloom-ds-zero-inference.py', '--local_rank=0', '--batch_size', '8'] exits with "
           "return code = 1\n" + OOM + "\n")
    d = diagnose_text(log, with_plan=False)
    assert d.phase == "inference" and d.basis["phase"] == "entry script bloom-ds-zero-inference.py"


def test_a_training_script_leaves_the_phase_to_the_progress():
    log = "Traceback (most recent call last):\n  File \"/work/run_inference_train.py\", line 9, in <module>\n" + OOM
    assert diagnose_text(log + "\n", with_plan=False).phase == "unknown"


def test_a_failure_an_hour_after_training_began_is_mid_training():
    log = ("2022-08-20 23:35:27 | INFO | metaseq.trainer | begin training epoch 1\n"
           "2022-08-21 00:29:47 | WARNING | metaseq.trainer | OOM: Ran out of memory with exception: " + OOM + "\n")
    d = diagnose_text(log, with_plan=False)
    assert d.phase == "mid_training" and d.basis["phase"] == "timestamps: 54 min after training began"
    soon = log.replace("00:29:47", "23:36:10").replace("2022-08-21", "2022-08-20")
    assert diagnose_text(soon, with_plan=False).phase == "first_step"


def test_a_request_the_size_of_the_logits_names_activations(tmp_path):
    """Gemma's 256 000-token vocabulary × batch 4 × 1024 tokens × 4 bytes = 3.90 GiB (real_logs x1-022)."""
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: google/gemma-7b\nstage: sft\nfinetuning_type: lora\ncutoff_len: 1024\n"
                   "per_device_train_batch_size: 4\ntemplate: gemma\n")
    d = diagnose_text(OOM.replace("86.00 MiB", "3.90 GiB") + "\n", config_path=str(cfg))
    assert d.component == "activations" and d.basis["component"].startswith("tensor shape: the request is the logits")


def test_an_assumed_batch_is_never_matched():
    d = diagnose_text(OOM.replace("86.00 MiB", "3.90 GiB") + "\n", model="gemma-7b")
    assert not d.basis["component"].startswith("tensor shape")


def test_a_term_alone_larger_than_the_card_names_it():
    """A full fine-tune of a 13B model: its optimizer states alone exceed an 80 GB card."""
    log = OOM.replace("86.00 MiB", "300.00 MiB").replace("44.64 GiB", "79.35 GiB") \
             .replace("43.68 GiB is allocated", "78.90 GiB is allocated")
    d = diagnose_text("--finetuning_type full\n" + log + "\n", model="Llama-2-13b")
    assert d.component == "optimizer_states" and d.basis["component"].startswith("budget:")
    assert d.plan and d.plan[0]["action"] in ("optimizer_8bit", "use_lora", "cpu_offload")


def test_no_oom_is_left_without_a_plan_and_no_number_reads_as_a_question_mark():
    """Nothing known but the request: still a first move, and 'unknown' where a number is missing."""
    d = diagnose_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 25.88 GiB (GPU 4; 7\n")
    assert d.plan and "?" not in d.summary and "unknown" in d.summary
    assert all(s["fits_after"] is None for s in d.plan)      # no card size known: no fit claimed


def test_ranks_glued_onto_one_line_are_split():
    log = ("Traceback (most recent call last):\n" + OOM + "[rank1]:   File \"/x/torch/optim/adamw.py\", line 120, in "
           "_init_group\n")
    from advisor.evidence.lines import read_text
    lines = read_text(log)
    assert lines[1].text == OOM and lines[2].rank == 1 and lines[2].text.startswith("  File")


def test_the_ipython_header_names_the_oom_when_the_last_line_is_cut():
    log = ("OutOfMemoryError                          Traceback (most recent call last)\n"
           "Cell In[4], line 12\n      9 trainer = Trainer(model=model, args=args)\n---> 12 trainer.train()\n"
           "File /env/lib/python3.10/site-packages/transformers/trainer.py:3318, in Trainer.training_step(self, model)\n")
    assert diagnose_text(log, with_plan=False).verdict == "device_oom"
    whole = diagnose_text(log + OOM + "\n", with_plan=False)
    assert whole.verdict == "device_oom" and whole.memory["tried_gib"] == pytest.approx(0.084, abs=0.001)


def test_distinct_devices_across_the_messages_mean_several_gpus():
    log = "".join(OOM.replace("GPU 0", f"GPU {i}") + "\n" for i in (0, 3))
    d = diagnose_text(log)
    assert d.memory["devices_seen"] == [0, 3]


def _swift_steps(values):
    return "".join(f"{{'loss': 1.2, 'learning_rate': 1e-05, 'memory(GiB)': {v}, 'train_speed(iter/s)': 0.5}}\n"
                   for v in values)


def test_memory_growing_step_after_step_reads_as_a_leak():
    d = diagnose_text(_swift_steps([20.1, 21.0, 22.2, 23.5, 24.9, 26.3]) + OOM + "\n", with_plan=False)
    assert d.phase == "mid_training" and d.memory["trend"]["kind"] == "growing"
    assert any("grew steadily from 20.1 to 26.3 GiB" in n for n in d.notes)


def test_flat_memory_then_a_failure_reads_as_one_long_batch():
    d = diagnose_text(_swift_steps([30.1, 30.3, 30.0, 30.2, 30.1]) + OOM + "\n", with_plan=False)
    assert d.memory["trend"]["kind"] == "flat" and any("flat" in n for n in d.notes)
    assert "trend" not in diagnose_text(_swift_steps([30.1, 30.3]) + OOM + "\n", with_plan=False).memory


def test_a_caught_error_logged_with_what_ran_gives_the_phase():
    from advisor.diagnosis.phase import activity_of
    from advisor.pipeline import diagnose_text
    assert activity_of("ERROR:x:Error while evaluating Task: CUDA out of memory. Tried")[0] == "evaluation"
    assert activity_of("Exception during saving the model: torch.OutOfMemoryError: CUDA")[0] == "checkpoint_save"
    # words after the message, or no error word before it, say nothing about what ran
    assert activity_of("CUDA out of memory while evaluating") is None
    assert activity_of("evaluating: CUDA out of memory") is None
    log = ("ERROR:bench.run:Error while evaluating SomeTask: CUDA out of memory. Tried to allocate 848.00 MiB. "
           "GPU 0 has a total capacity of 79.11 GiB of which 356.88 MiB is free.\n")
    assert diagnose_text(log).phase == "evaluation"


def test_an_engines_catch_all_does_not_hide_what_the_framework_table_knows():
    """The hand-written vLLM catch-all is consulted last: the per-framework entries for the engine's own
    functions (a layer creating its weights — the engine loading — or the sampler's warm-up) are read first."""
    weights = _reading('File "/env/lib/python3.10/site-packages/vllm/model_executor/layers/linear.py", line 202, '
                       'in create_weights')
    assert (weights.phase, weights.component) == ("load", "weights")
    warm_up = _reading('File "/env/lib/python3.10/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1548, '
                       'in _dummy_sampler_run')
    assert (warm_up.phase, warm_up.component) == ("inference", "activations")
    other = _reading('File "/env/lib/python3.10/site-packages/vllm/some/new_module.py", line 9, in anything')
    assert (other.phase, other.component, other.weak) == ("inference", None, True)
