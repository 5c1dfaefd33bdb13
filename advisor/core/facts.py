"""The facts of a run (model, method, precision, batch, length, sharding…), whoever found them: the
log's parser, the config's reader or a command line. A record type with no behaviour, shared by both."""

from dataclasses import dataclass
from typing import Optional

from .record import Record

# a dtype's names (torch's, and the spellings configs use) -> Facts.precision; torch prints torch.float32
# for torch.float, so "float" only ever comes from a config (vLLM's dtype: float)
PRECISION_OF_DTYPE = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
                      "float32": "fp32", "fp32": "fp32", "float": "fp32"}


@dataclass
class Facts(Record):
    """What the run was: from the log, the config, or the command line; None when unknown."""
    framework: Optional[str] = None
    model: Optional[str] = None
    params_b: Optional[float] = None
    trainable_params: Optional[int] = None
    method: Optional[str] = None            # full | lora | qlora | freeze | oft
    precision: Optional[str] = None         # fp32 | fp16 | bf16 | pure_bf16
    quantization_bit: Optional[int] = None
    batch: Optional[int] = None
    grad_accum: Optional[int] = None
    seq_len: Optional[int] = None
    grad_ckpt: Optional[bool] = None
    deepspeed: Optional[str] = None         # none | zero0..zero3 | zero2_offload | zero3_offload
    num_gpus: Optional[int] = None
    step: Optional[int] = None
    total_steps: Optional[int] = None
    eval_batch: Optional[int] = None
    flash_attn: Optional[bool] = None
    optim: Optional[str] = None
    lora_rank: Optional[int] = None
    lora_target: Optional[str] = None
    gpu: Optional[str] = None
    expandable_segments: Optional[bool] = None
    eval_accumulation_steps: Optional[int] = None
    predict_with_generate: Optional[bool] = None
    packing: Optional[bool] = None
    accelerator: Optional[str] = None      # cuda | npu | xpu | mps | rocm, from device lines
    script: Optional[str] = None           # the entry script a launcher line or the outermost frame names
    job_kind: Optional[str] = None         # training | evaluation | prediction | serving | offline_generation |
                                           # rl_rollout | saving | loading (jobkind.py)
    engine: Optional[dict] = None          # an inference engine's settings the log printed (max_num_seqs=256, ...)
