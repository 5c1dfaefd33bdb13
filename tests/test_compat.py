"""Moves that exclude each other (advisor/compat.py, data/exclusions.yaml) are never stacked, and a
full fine-tune on several GPUs reaches for sharding before moves that change results."""

from advisor.plans.compat import brings, excluded
from advisor.pipeline import diagnose_text
from advisor.plans.plan import BUILDERS

OPT = """  File "/env/lib/python3.10/site-packages/torch/optim/adamw.py", line 606, in _multi_tensor_adamw
    exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 130.00 MiB. GPU {gpu} has a total capacity of 79.15 GiB of which 87.19 MiB is free. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
"""

ACTS = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/env/lib/python3.11/site-packages/transformers/trainer.py", line 3730, in training_step
[rank0]:     loss = self.compute_loss(model, inputs)
[rank0]:   File "/env/lib/python3.11/site-packages/transformers/models/qwen2/modeling_qwen2.py", line 60, in forward
[rank0]:     down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.15 GiB of which 500.00 MiB is free. Of the allocated memory 77.90 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
"""

HF_FULL = """model_name_or_path: Qwen/Qwen2.5-7B-Instruct
output_dir: out
per_device_train_batch_size: {batch}
gradient_accumulation_steps: 1
gradient_checkpointing: true
bf16: true
learning_rate: 1.0e-5
"""


def actions(d):
    return [s["action"] for s in d.plan]


def test_offload_and_a_client_8bit_optimizer_are_never_stacked(tmp_path):
    # single GPU: the 8-bit optimizer comes first, so DeepSpeed's CPU offload is left out after it
    cfg = tmp_path / "train.yaml"
    cfg.write_text(HF_FULL.format(batch=1).replace("gradient_checkpointing: true\n", ""))
    d = diagnose_text(OPT.format(gpu=0), config_path=str(cfg))
    acts = actions(d)
    assert acts[0] == "optimizer_8bit"
    assert not {"optimizer_8bit", "cpu_offload"} <= set(acts)


def test_a_run_already_on_an_8bit_optimizer_gets_no_deepspeed_offload(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(HF_FULL.format(batch=1) + "optim: paged_adamw_8bit\ndeepspeed: ds_z2_config.json\n")
    d = diagnose_text(OPT.format(gpu=3), config_path=str(cfg))
    assert "cpu_offload" not in actions(d)
    assert any(n.startswith("Not suggested: cpu_offload") for n in d.notes)


def test_the_table_names_known_moves_and_respects_frameworks_that_allow_a_pair():
    assert excluded("optimizer_8bit", {}, {"fsdp"}, "hf") is not None
    assert excluded("quantize", {}, {"zero3"}, "hf") is not None
    assert excluded("quantize", {}, {"zero3"}, "llamafactory") is None      # LF sets the 4-bit storage itself
    assert excluded("zero_sharding", {"zero": 2}, {"quant_4bit"}, "hf") is None   # only stage 3 partitions weights
    assert excluded("zero_sharding", {"zero": 3}, {"quant_4bit"}, "hf") is not None
    assert excluded("cpu_offload", {"offload": True}, {"optim_8bit"}, "verl") is None   # FSDP's own offload
    assert brings("cpu_offload", {"zero": 3, "offload": True}) == {"deepspeed_offload", "zero3"}
    from advisor.core.snapshot import snapshot
    for e in snapshot()["exclusions"]:
        assert e["move"] in BUILDERS and e["reason"] and e["source"]


def test_full_fine_tune_on_several_gpus_reaches_for_sharding(tmp_path):
    cfg = tmp_path / "train.yaml"
    for batch in (1, 4):
        cfg.write_text(HF_FULL.format(batch=batch))
        d = diagnose_text(ACTS.replace("[rank0]:", "[rank3]:"), config_path=str(cfg))
        acts = [s["action"] for s in d.plan if not s["alternative"]]
        assert "zero_sharding" in acts, (batch, d.plan)
        unsafe = [s["action"] for s in d.plan if s["applicability"] == "unsafe" and not s["alternative"]]
        assert not unsafe or acts.index("zero_sharding") < acts.index(unsafe[0])
    # one GPU: nothing to shard across
    cfg.write_text(HF_FULL.format(batch=4))
    d = diagnose_text(ACTS.replace("[rank0]: ", ""), config_path=str(cfg))
    assert "zero_sharding" not in actions(d)
