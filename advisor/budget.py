"""Budget: facts about a run -> GiB per memory component on one GPU, and whether it fits.

Bytes per parameter follow the course (DESIGN §5): full AdamW in mixed precision is 2 (weights) +
2 (gradients) + 4 (fp32 master) + 8 (moments) = 16; LoRA keeps the frozen base at 2 and pays 16
per adapter parameter (fp32 after upcasting); QLoRA stores quantised linears at ~0.5 byte with
16-bit embeddings and LM head. Activations are per-layer bytes per token from the architecture
(hidden and MLP width; eager attention adds the s² scores), logits are batch × seq × vocab with
the fp32 upcast. Constants marked CALIBRATED were fitted on the measured rows of
shared/memory_groundtruth.csv (benchmarks/budget_calibration.py prints the table).
"""

from dataclasses import dataclass, field
from typing import List, Optional

from .catalog import ModelShape
from .record import Record

GiB = 2 ** 30
MARGIN = 0.20                 # the course's 20 % headroom
RESERVE_GIB = 0.5             # kept back from the allocator-reported capacity (driver, other tools)
OVERHEAD_GIB = 1.5            # CALIBRATED: CUDA context, cuBLAS/cuDNN workspaces, allocator slack
ACT_H, ACT_I = 18, 9          # CALIBRATED: bytes per token per layer = 18·hidden + 9·mlp_width (16-bit)
CKPT_H = 4                    # CALIBRATED: bytes per token per layer kept under checkpointing (inputs + norms)
SLACK = 0.04                  # CALIBRATED: allocator caching above what tensors hold, share of the total
LOGIT_BYTES = 10              # CALIBRATED: bf16 logits + fp32 upcast + fp32 gradient, per element
QUANT_BYTES = {4: 0.53, 8: 1.03}  # NF4/int8 weight plus quantisation constants (double-quant), per parameter
OPTIM_BYTES = {"adamw": 8, "adam": 8, "8bit": 2, "adafactor": 0.1, "sgd": 4, "lion": 4, "adam_mini": 4,
               "galore": 2, "apollo": 2}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_ALIASES = {"c_attn": ("q_proj", "k_proj", "v_proj"), "w_pack": ("q_proj", "k_proj", "v_proj"),
            "query_key_value": ("q_proj", "k_proj", "v_proj"), "qkv_proj": ("q_proj", "k_proj", "v_proj"),
            "dense": ("o_proj",), "c_proj": ("o_proj", "down_proj"), "w1": ("gate_proj",), "w2": ("up_proj",),
            "w3": ("down_proj",), "gate_up_proj": ("gate_proj", "up_proj"), "dense_h_to_4h": ("gate_proj", "up_proj"),
            "dense_4h_to_h": ("down_proj",), "out_proj": ("o_proj",), "fc1": ("up_proj",), "fc2": ("down_proj",)}


@dataclass
class Spec(Record):
    """One planned or observed run; every field has the value the estimate used."""
    model: ModelShape
    method: str = "lora"                  # full | lora | qlora | freeze
    precision: str = "bf16"               # fp32 | fp16 | bf16 | pure_bf16
    quant_bits: Optional[int] = None
    batch: int = 1
    seq: int = 1024
    grad_ckpt: bool = True
    lora_rank: int = 8
    lora_target: str = "all"
    flash_attn: bool = True
    optim: str = "adamw_torch"
    gpus: int = 1
    zero: int = 0
    offload: bool = False
    capacity_gib: Optional[float] = None
    bf16_native: Optional[bool] = None
    freeze_layers: int = 2
    liger: bool = False


@dataclass
class Budget(Record):
    """DESIGN §3's `budget --format json` contract (GiB, peak per GPU)."""
    model: str
    params_b: float
    trainable_params: int
    weights_gib: float
    gradients_gib: float
    optimizer_states_gib: float
    activations_gib: float
    logits_gib: float
    overhead_gib: float
    total_gib: float
    capacity_gib: Optional[float]
    usable_gib: Optional[float]
    fits: Optional[bool]
    headroom_pct: Optional[float]
    assumptions: List[str] = field(default_factory=list)

    def to_json_dict(self):
        return {"schema": "oom-doctor/budget/v1", **self.model_dump()}


def linear_shapes(m: ModelShape):
    d, h = m.dim, m.hidden
    mlp = m.moe_intermediate or m.intermediate if m.experts else m.intermediate
    per = {"q_proj": (h, m.heads * d), "k_proj": (h, m.kv_heads * d), "v_proj": (h, m.kv_heads * d),
           "o_proj": (m.heads * d, h), "gate_proj": (h, mlp), "up_proj": (h, mlp), "down_proj": (mlp, h)}
    copies = {k: (m.experts if m.experts and k in ("gate_proj", "up_proj", "down_proj") else 1) for k in per}
    return per, copies


def count_params(m: ModelShape):
    per, copies = linear_shapes(m)
    layer = sum(i * o * copies[k] for k, (i, o) in per.items()) + 2 * m.hidden
    return m.layers * layer + m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


def linear_params(m: ModelShape):
    """Parameters in the decoder layers' linears (what 4/8-bit quantisation compresses)."""
    per, copies = linear_shapes(m)
    counted = m.layers * sum(i * o * copies[k] for k, (i, o) in per.items())
    embed = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return min(counted, max(0.0, m.params_b * 1e9 - embed))


def lora_targets(target):
    names = set()
    for t in str(target or "all").replace(" ", "").lower().split(","):
        if t in ("all", "all-linear", "all_linear"):
            return set(LINEARS)
        names.update(_ALIASES.get(t, (t,) if t in LINEARS else ()))
    return names or set(LINEARS)


def lora_params(m: ModelShape, rank, target):
    per, copies = linear_shapes(m)
    return m.layers * sum(rank * (i + o) * copies[k] for k, (i, o) in per.items() if k in lora_targets(target))


def optimizer_kind(optim):
    o = str(optim or "adamw").lower()
    if "8bit" in o or "4bit" in o:
        return "8bit"
    for key in ("adafactor", "sgd", "lion", "adam_mini", "galore", "apollo"):
        if key in o:
            return key
    return "adamw"


def estimate(s: Spec) -> Budget:
    m = s.model
    P = m.params_b * 1e9
    half = 2 if s.precision != "fp32" else 4
    notes = []
    if s.method == "full":
        trainable = P
    elif s.method == "freeze":
        trainable = (P - m.vocab * m.hidden) * min(s.freeze_layers, m.layers) / m.layers
    else:
        trainable = lora_params(m, s.lora_rank, s.lora_target)
    bits = s.quant_bits if s.method in ("lora", "qlora") else None
    if bits in QUANT_BYTES:
        lin = linear_params(m)
        weights = lin * QUANT_BYTES[bits] + (P - lin) * 2
    else:
        weights = P * half
    moments = OPTIM_BYTES[optimizer_kind(s.optim)] * (0.5 if s.precision == "pure_bf16" else 1)
    if s.method in ("full", "freeze"):
        grads = trainable * half
        master = trainable * 4 if s.precision in ("fp16", "bf16") else 0
        optim = trainable * moments + master
    else:                                 # adapters are upcast to fp32: weight 4 + grad 4 + moments
        adapter_bytes = 2 if s.precision == "pure_bf16" else 4
        weights += trainable * adapter_bytes
        grads = trainable * adapter_bytes
        optim = trainable * moments
    if s.zero:                            # DeepSpeed keeps an fp32 gradient partition for its optimizer
        grads += trainable * 4 if s.method in ("full", "freeze") else 0
    n = max(1, s.gpus)
    if s.zero >= 1:
        optim /= n
    if s.zero >= 2:
        grads /= n
    if s.zero >= 3:
        weights /= n
    if s.offload:
        optim = 0.0
        if s.zero >= 3:
            weights = min(weights, P * half / m.layers * 2)
    tokens = s.batch * s.seq
    mlp = (m.experts_per_token or 1) * (m.moe_intermediate or m.intermediate) if m.experts else m.intermediate
    scale = half / 2
    layer_bytes = (ACT_H * m.hidden + ACT_I * mlp) * tokens * scale
    eager = 0 if s.flash_attn else 4 * m.heads * s.seq * s.seq * s.batch * scale
    if s.grad_ckpt:
        acts = CKPT_H * m.hidden * tokens * m.layers * scale + layer_bytes + eager
    else:
        acts = (layer_bytes + eager) * m.layers
    logits = 0.0 if s.liger else tokens * m.vocab * LOGIT_BYTES
    overhead = OVERHEAD_GIB * GiB
    overhead += SLACK * (weights + grads + optim + acts + logits)
    total = weights + grads + optim + acts + logits + overhead
    usable = s.capacity_gib - RESERVE_GIB if s.capacity_gib else None
    fits = total / GiB <= (1 - MARGIN) * usable if usable else None
    head = round(100 * (1 - total / GiB / usable), 1) if usable else None
    return Budget(model=m.name, params_b=round(m.params_b, 2), trainable_params=int(trainable),
                  weights_gib=_g(weights), gradients_gib=_g(grads), optimizer_states_gib=_g(optim),
                  activations_gib=_g(acts), logits_gib=_g(logits), overhead_gib=_g(overhead), total_gib=_g(total),
                  capacity_gib=s.capacity_gib, usable_gib=round(usable, 2) if usable else None, fits=fits,
                  headroom_pct=head, assumptions=notes + describe(s))


def _g(x):
    return round(x / GiB, 2)


def describe(s: Spec):
    """The assumptions an estimate rests on, in words a user can check against their config."""
    out = [f"model {s.model.name}: {s.model.params_b:g}B parameters, {s.model.layers} layers, hidden {s.model.hidden}, "
           f"vocabulary {s.model.vocab}",
           f"method {s.method}" + (f", LoRA rank {s.lora_rank} on {s.lora_target}" if s.method in ("lora", "qlora") else "")
           + (f", {s.quant_bits}-bit base" if s.quant_bits else ""),
           f"precision {s.precision}, optimizer {s.optim}",
           f"per-device batch {s.batch} × sequence {s.seq} tokens, gradient checkpointing "
           f"{'on' if s.grad_ckpt else 'off'}, attention {'FlashAttention/SDPA' if s.flash_attn else 'eager (s² scores)'}",
           f"{s.gpus} GPU(s), DeepSpeed ZeRO-{s.zero}" + (" with CPU offload" if s.offload else "") if s.zero else
           f"{s.gpus} GPU(s), no ZeRO sharding (every GPU holds a full replica)"]
    if s.capacity_gib:
        out.append(f"card capacity {s.capacity_gib:.2f} GiB, usable = capacity − {RESERVE_GIB} GiB, fits when the "
                   f"total is at most {100 - 100 * MARGIN:.0f} % of usable")
    return out
