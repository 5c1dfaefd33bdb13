"""Typed events of a run, in log order: what the parser hands to the diagnosis."""

from dataclasses import dataclass, field
from typing import List, Optional

from .record import Record


@dataclass
class Marker(Record):
    """A phase marker: loading, setup, training start, evaluation, save, end of training."""
    kind: str            # load | load_done | setup | prep | train_start | eval_start | eval_done | save | train_done | predict
    line: int
    text: str
    step: Optional[int] = None           # the training step the run was at (None: it had not stepped)


@dataclass
class Frame(Record):
    """One traceback frame; `line` is the log line, not the source line number."""
    path: str
    func: str
    line: int
    source: str = ""
    rank: Optional[int] = None


@dataclass
class Signal(Record):
    """A line that reports a failure (see signals.py for the kinds)."""
    kind: str
    dialect: str
    line: int
    text: str
    rank: Optional[int] = None


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


@dataclass
class Context(Record):
    """The state of the run when its final failure began."""
    last_marker: Optional[Marker] = None
    step: Optional[int] = None              # training steps completed (from the progress bar)
    total_steps: Optional[int] = None
    losses_logged: int = 0
    in_eval: bool = False
    eval_step: Optional[int] = None         # the evaluation bar's batches done, and of how many
    eval_total: Optional[int] = None


@dataclass
class Timeline(Record):
    """Everything the diagnosis needs, bounded in size whatever the log's length."""
    source: str = "<stdin>"
    line_count: int = 0
    facts: Facts = field(default_factory=Facts)
    markers: List[Marker] = field(default_factory=list)
    signals: List[Signal] = field(default_factory=list)      # the final failure's signals
    earlier_failures: int = 0                                # failures the run recovered from
    context: Context = field(default_factory=Context)        # at the final failure (or the end)
    ranks: List[int] = field(default_factory=list)
    window: list = field(default_factory=list)               # reader.Line objects around the failure
    fact_lines: dict = field(default_factory=dict)           # fact name -> log line it came from
    exact_lines: Optional[int] = None                        # big files: line numbers past this are estimates
    memory_series: list = field(default_factory=list)        # (log line, GiB) of per-step memory records, the last 64
    command: Optional[str] = None                            # the launch command the log echoes (first lines)
    command_line: Optional[int] = None
