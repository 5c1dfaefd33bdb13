"""Advice: phase-aware ladders, nothing already in effect, never the learning rate."""

import json


from advisor.pipeline import diagnose_path, diagnose_text
from conftest import REAL_LOGS, SAMPLES

FIRST_STEP_LOG = """[INFO|2025-01-10 10:00:00] llamafactory.model.loader:143 >> trainable params: 20,185,088 || all params: 7,635,801,600 || trainable%: 0.2643
[INFO|trainer.py:2414] 2025-01-10 10:00:00,000 >> ***** Running training *****
  0%|          | 0/300 [00:00<?, ?it/s]Traceback (most recent call last):
  File "/env/lib/python3.11/site-packages/transformers/trainer.py", line 3730, in training_step
    loss = self.compute_loss(model, inputs)
  File "/env/lib/python3.11/site-packages/transformers/models/qwen2/modeling_qwen2.py", line 60, in forward
    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of {cap} GiB of which 500.00 MiB is free. Of the allocated memory {alloc} GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
"""


def first_step(tmp_path, config_text, cap=23.65, alloc=22.9):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(config_text)
    return diagnose_text(FIRST_STEP_LOG.format(cap=cap, alloc=alloc), config_path=str(cfg))


LF = """### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
### method
stage: sft
finetuning_type: lora
### dataset
template: qwen
cutoff_len: 2048
### train
per_device_train_batch_size: 4
gradient_accumulation_steps: 2
learning_rate: 1.0e-4
"""


def all_plans():
    for log in sorted(SAMPLES.glob("*.log")):
        yield diagnose_path(str(log))
    if REAL_LOGS.is_dir():
        for case in sorted(REAL_LOGS.iterdir()):
            if (case / "log.txt").exists():
                cfg = case / "config.yaml"
                yield diagnose_path(str(case / "log.txt"), config_path=str(cfg) if cfg.exists() else None)


def test_learning_rate_is_never_advice():
    for d in all_plans():
        changed = [ln for ln in (d.patch or "").splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        text = json.dumps(d.plan) + "\n".join(changed) + (d.snippet or "")
        assert "learning_rate" not in text and "lr_scheduler" not in text, d.source


def test_batch_first_and_effective_batch_kept(tmp_path):
    d = first_step(tmp_path, LF + "bf16: true\n")
    step = d.plan[0]
    assert step["action"] == "reduce_batch" and step["applicability"] == "safe"
    b, g = step["changes"]["per_device_train_batch_size"], step["changes"]["gradient_accumulation_steps"]
    assert b[0] * g[0] == b[1] * g[1] and b[1] < b[0]


def test_no_step_repeats_what_is_in_effect(tmp_path):
    # LLaMA-Factory checkpoints by default, bf16 is set, the base is already 4-bit
    d = first_step(tmp_path, LF + "bf16: true\nquantization_bit: 4\n", alloc=22.9)
    actions = [s["action"] for s in d.plan]
    assert "grad_checkpointing" not in actions
    assert "quantize" not in actions
    assert not any("bf16" in s["changes"] for s in d.plan)


def test_checkpointing_suggested_when_user_turned_it_off(tmp_path):
    d = first_step(tmp_path, LF.replace("per_device_train_batch_size: 4", "per_device_train_batch_size: 1")
                   + "disable_gradient_checkpointing: true\nbf16: true\n")
    assert d.plan[0]["action"] == "grad_checkpointing"
    assert d.plan[0]["changes"] == {"disable_gradient_checkpointing": [True, False]}


def test_fp16_not_bf16_on_a_card_without_bf16(tmp_path):
    """31.75 GiB is a V100-32G: no native bf16, so the precision move is fp16. (A full fine-tune in
    fp32; LLaMA-Factory loads LoRA's frozen weights in half precision already. Mixed precision keeps an
    fp32 master copy, so the move may save too little to be offered: its builder is asked directly.)"""
    from advisor.plans.plan import BUILDERS, Context
    from advisor.plans.runspec import spec_from_facts
    text = LF.replace("per_device_train_batch_size: 4", "per_device_train_batch_size: 1") + "fp16: false\nbf16: false\n"
    d = first_step(tmp_path, text.replace("finetuning_type: lora", "finetuning_type: full"), cap=31.75, alloc=31.0)
    spec, _ = spec_from_facts(d.facts, d.memory)
    from advisor.read.config import load_config
    changes, update, _ = BUILDERS["precision"](Context(d, spec, load_config(str(tmp_path / "train.yaml")), "en"), spec)
    assert "fp16" in changes and "bf16" not in changes and update == {"precision": "fp16"}
    d = first_step(tmp_path, text, cap=31.75, alloc=31.0)
    assert not [s for s in d.plan if s["action"] == "precision"]


def test_bf16_on_v100_is_a_finding(tmp_path):
    d = first_step(tmp_path, LF + "bf16: true\n", cap=31.75, alloc=31.0)
    assert any("bf16" in n for n in d.notes)


def test_load_oom_is_never_fixed_by_the_batch():
    batch_moves = {"reduce_batch", "grad_accum", "grad_checkpointing", "reduce_seq_len", "eval_batch"}
    loads = [d for d in all_plans() if d.phase == "load" and d.plan]
    assert len(loads) >= 5                  # samples and real logs that failed while loading
    for d in loads:                         # not first, not as an alternative either
        assert not batch_moves & {s["action"] for s in d.plan}, (d.source, d.plan)


def test_look_alike_gets_no_memory_plan():
    d = diagnose_path(str(SAMPLES / "lookalike-nccl-timeout.log"))
    assert [s["action"] for s in d.plan] == ["fix_non_memory_bug"]
    assert d.plan[0]["applicability"] == "display" and not d.patch


def test_incomplete_asks_for_the_rest():
    d = diagnose_path(str(SAMPLES / "truncated-paste.log"))
    assert d.plan == [] and any("Traceback" in n for n in d.notes)


def test_plan_stops_at_first_fit_then_two_alternatives(tmp_path):
    d = first_step(tmp_path, LF + "bf16: true\n")
    main = [s for s in d.plan if not s["alternative"]]
    assert main[-1]["fits_after"] is True
    assert all(s["fits_after"] is False for s in main[:-1])
    assert len(d.plan) - len(main) <= 2


def test_multi_gpu_optimizer_oom_shards_single_gpu_goes_8bit(tmp_path):
    opt = """  File "/env/lib/python3.10/site-packages/torch/optim/adamw.py", line 606, in _multi_tensor_adamw
    exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 130.00 MiB. GPU {gpu} has a total capacity of 79.15 GiB of which 87.19 MiB is free. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
"""
    assert diagnose_text(opt.format(gpu=3)).plan[0]["action"] == "zero_sharding"
    assert diagnose_text(opt.format(gpu=0)).plan[0]["action"] == "optimizer_8bit"
    # already sharded as far as states go (the log says ZeRO-2, or the frames run in stage3.py):
    # offload next; an 8-bit client optimizer is not stacked on it (ZeRO-Offload refuses one)
    zero2 = "[INFO] [stage_1_and_2.py:148:__init__] Creating fp16 ZeRO stage 2 optimizer\n" + opt.format(gpu=3)
    d = diagnose_text(zero2)
    assert [s["action"] for s in d.plan][0] == "cpu_offload"
    assert "optimizer_8bit" not in [s["action"] for s in d.plan]
    assert any("optimizer_8bit" in n and "ZeRORuntimeException" in n for n in d.notes)
    # the log names no framework and no config was given: the move in words, never a Trainer key
    assert d.plan[0]["changes"] == {} and "offload_optimizer" in d.plan[0]["display"]
    assert "gather_16bit" not in d.plan[0]["display"]              # a save's words are not an optimizer step's
    stage3 = ('  File "/env/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 2070, in step\n'
              "    self._optimizer_step(sub_group_id)\n") + opt.format(gpu=3)
    d = diagnose_text(stage3)
    assert d.facts["deepspeed"] == "zero3" and d.plan[0]["action"] == "cpu_offload"
    assert "zero_sharding" not in [s["action"] for s in d.plan]


def test_a_long_sample_without_a_known_cutoff_still_says_shorten_first():
    steps = "".join(f" {i}%|#  | {i * 10}/1000 [00:{i:02d}<01:00, 1.00it/s]\n{{'loss': 1.{i}, 'epoch': 0.{i}}}\n"
                    for i in range(1, 30))
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 1.00 GiB is free. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 100.00 "
           "MiB is reserved by PyTorch but unallocated.\n")
    d = diagnose_text(steps + oom)
    assert d.phase == "mid_training"
    first = d.plan[0]
    assert first["action"] == "reduce_seq_len" and first["applicability"] == "display" and not first["changes"]


def test_ddp_wrapping_the_model_means_several_gpus_even_without_rank_prefixes():
    log = ('  File "/env/lib/python3.8/site-packages/torch/nn/parallel/distributed.py", line 825, in _ddp_init_helper\n'
           "    self.reducer = dist.Reducer(\n"
           "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 98.00 MiB. GPU 0 has a total capacity of "
           "79.33 GiB of which 45.81 MiB is free. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 100.00 "
           "MiB is reserved by PyTorch but unallocated.\n")
    d = diagnose_text(log)
    assert (d.rule, d.phase) == ("OOM310", "load") and d.plan[0]["action"] == "zero_sharding"


def test_an_fsdp_run_is_never_handed_deepspeed(tmp_path):
    """FSDP shards the run already, and the HF Trainer refuses `deepspeed` beside `fsdp`: no ZeRO move, and
    offloading is FSDP's own switch."""
    cfg = tmp_path / "args.yaml"
    cfg.write_text("model_name_or_path: meta-llama/Llama-2-7b-hf\nnproc_per_node: 4\nper_device_train_batch_size: 1\n"
                   "gradient_accumulation_steps: 1\nbf16: true\nfsdp: full_shard auto_wrap\n")
    log = ('  File "/env/lib/python3.10/site-packages/torch/optim/adamw.py", line 606, in _multi_tensor_adamw\n'
           "    exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 130.00 MiB. GPU 3 has a total capacity of "
           "39.41 GiB of which 87.19 MiB is free. Of the allocated memory 38.60 GiB is allocated by PyTorch, and "
           "100.00 MiB is reserved by PyTorch but unallocated.\n")
    d = diagnose_text(log, config_path=str(cfg))
    actions = [s["action"] for s in d.plan]
    assert "zero_sharding" not in actions and not any("deepspeed" in s["changes"] for s in d.plan), d.plan
    offload = next(s for s in d.plan if s["action"] == "cpu_offload")
    assert "offload" in offload["display"] and "fsdp" in offload["display"]


def test_trainer_arguments_nested_under_training_args_are_read_and_patched_in_place(tmp_path):
    """GLM-4's and ChatGLM3's finetune_demo YAML keeps Seq2SeqTrainingArguments under `training_args:`."""
    cfg = tmp_path / "lora.yaml"
    cfg.write_text("data_config:\n  train_file: train.jsonl\nmax_input_length: 512\ntraining_args:\n"
                   "  output_dir: ./output\n  per_device_train_batch_size: 4\n  save_steps: 500\n"
                   "peft_config:\n  peft_type: LORA\n")
    d = first_step(tmp_path, cfg.read_text())
    assert (d.facts["batch"], d.facts["method"]) == (4, "lora")      # peft_config: peft_type: LORA
    old, new = d.plan[0]["changes"]["training_args.per_device_train_batch_size"]
    assert old == 4 and new < 4
    assert f"+  per_device_train_batch_size: {new}" in d.patch and "-  per_device_train_batch_size: 4" in d.patch
    one = first_step(tmp_path, cfg.read_text().replace("batch_size: 4", "batch_size: 1"))
    assert one.plan[0]["action"] != "reduce_batch"
