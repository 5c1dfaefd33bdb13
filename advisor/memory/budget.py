"""Budget: facts about a run -> GiB per memory component on one GPU, and whether it fits.

Bytes per parameter follow the course (DESIGN §5): full AdamW in mixed precision is 2 (weights) +
2 (gradients) + 4 (fp32 master) + 8 (moments) = 16; LoRA keeps the frozen base at 2 and pays 16
per adapter parameter (fp32 after upcasting); QLoRA stores quantised linears at ~0.5 byte with
16-bit embeddings and LM head. Activations are per-layer bytes per token from the architecture
(hidden and MLP width; eager attention adds the s² scores), logits are batch × seq × vocab with
the fp32 upcast.

The peak is not the sum of the components: a training step has three phases, and the estimate is
the largest of them (`phases`, `peak_phase`):
  forward         weights + optimizer states (+ gradients kept across accumulation or in
                  DeepSpeed's partitions) + the saved activations + the logits and loss;
  backward        starts with all of that plus one layer's recomputed working set, and ends with
                  every gradient present and the activations freed (whichever end is larger);
  optimizer step  weights + gradients + optimizer states + the step's temporaries.
Sharded runs (DeepSpeed ZeRO-1/2/3, FSDP) add the unsharded working set: gathered layers,
communication buckets and fp32 flat partitions (see `_sharding`). Components in the JSON are what
is live at the peak phase, so they add up to `total_gib`.

Constants marked CALIBRATED were fitted on the measured rows of shared/memory_groundtruth.csv and
shared/memory_groundtruth_configs.csv (benchmarks/budget_calibration.py prints the table); every
other number comes from the mechanism named beside it.
"""

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Dict, List, Optional

from ..core.record import Record
from ..core.shapes import ModelShape, count_params, layer_params, largest_module_params, linear_shapes  # noqa: F401

GiB = 2 ** 30
MARGIN = 0.20                 # the course's 20 % headroom
RESERVE_GIB = 0.5             # kept back from the allocator-reported capacity (driver, other tools)

# ---- overhead: three terms that exist -------------------------------------------------------------
# The CUDA context: the driver's per-process state plus the kernels of libtorch_cuda, cuBLAS/cuDNN
# and NCCL as they are first used. Freshly initialised it is 0.3-0.5 GiB with lazy module loading
# (CUDA 11.7+, PyTorch's default since 2.0), ~1 GiB without; once a training step has touched its
# kernels nvidia-smi shows ~1 GiB per process either way (the measured rows agree). torch's
# max_memory_reserved() does not count it.
CUDA_CONTEXT_GIB = {"new": 1.0, "old": 1.0}
# cuBLAS/cuBLASLt workspaces (a few MiB to 32 MiB per handle and stream), FlashAttention/SDPA and
# cross-entropy scratch: ~0.25 GiB. On several GPUs NCCL's communicator buffers (NCCL_BUFFSIZE 4 MiB
# per channel per peer, up to 32 channels over NVLink, NVLS/collnet buffers on NVSwitch systems, proxy
# and work FIFOs): 1-2 GiB a GPU. CALIBRATED within that range on the sharded rows.
WORKSPACE_GIB = 0.25
NCCL_GIB = 1.5
# Allocator slack: what the caching allocator reserves beyond the tensors alive at the peak. Tensors
# that come and go every step (activations, logits, temporaries) leave freed blocks it cannot reuse
# for a larger request; weights and states, allocated once, only pay block rounding (512 B, 2 MiB
# segments). CALIBRATED: PyTorch's reserved-but-unallocated vs allocated at 25 OOMs in
# shared/real_logs (median 1 %, 75th percentile 12 %) and the measured rows.
SLACK = 0.08                  # share of the transient tensors
# Gathered parameters and communication buckets are allocated on the communication stream and
# used on the compute stream (record_stream): a block goes back to the pool only once both streams
# are past it, so more copies stay reserved than are alive — the "high GPU reserved memory" that
# FSDP's rate limiter (limit_all_gathers) was added for (pytorch/pytorch, "[FSDP] Add limiter using
# CUDA events"). CALIBRATED on the sharded rows: ~1.5 more copies of the gathered working set.
GATHER_RESERVED = 1.5
SLACK_STATIC = 0.04           # share of weights, gradients and optimizer states

# ---- activations and logits ------------------------------------------------------------------------
ACT_H, ACT_I = 18, 9          # CALIBRATED: bytes per token per layer = 18·hidden + 9·mlp_width (16-bit)
CKPT_H = 2                    # bytes per token per layer kept under full recomputation: the layer's 16-bit input
                              # (Korthikanti et al. 2022: 2·sbh; fitted on the measured rows it stays 2)
# CALIBRATED, per logit element: bf16 logits (2) + the loss's fp32 upcast (4) + fp32 log-softmax (4),
# and at the start of backward their fp32 gradient before the saved tensors go.
LOGIT_BYTES = 12
# The same tensors when nothing casts the loss to fp32: 16-bit logits, the shifted copy, the
# log-softmax and its gradient, 2 bytes each. That happens when no autocast runs — DeepSpeed's
# engine converts the module to fp16/bf16 itself, and accelerate/HF Trainer turn native AMP off
# under DeepSpeed — and the model's own forward does not upcast (`loss_upcast` in models.yaml).
# Under autocast, log_softmax/cross_entropy are on torch's run-in-fp32 list (torch.amp autocast
# op reference), so the model's code does not matter there.
LOGIT_BYTES_16 = 8
QUANT_BYTES = {4: 0.53, 8: 1.03}  # NF4/int8 weight plus quantisation constants (double-quant), per parameter
# Of which the constants (absmax per 64-value block, its second-level scale, the code book): bitsandbytes
# keeps them in the Linear4bit/Linear8bitLt module's quant_state, a plain attribute rather than a
# parameter, so FSDP's flat parameters and ZeRO-3's partitions shard and offload only the packed
# weight (storage dtype `bnb_4bit_quant_storage`); every GPU holds all the constants.
QUANT_CONST = {4: 0.03, 8: 0.03}
OPTIM_BYTES = {"adamw": 8, "adam": 8, "8bit": 2, "adafactor": 0.1, "sgd": 4, "lion": 4, "adam_mini": 4,
               "galore": 2, "apollo": 2}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_ALIASES = {"c_attn": ("q_proj", "k_proj", "v_proj"), "w_pack": ("q_proj", "k_proj", "v_proj"),
            "query_key_value": ("q_proj", "k_proj", "v_proj"), "qkv_proj": ("q_proj", "k_proj", "v_proj"),
            "dense": ("o_proj",), "c_proj": ("o_proj", "down_proj"), "w1": ("gate_proj",), "w2": ("up_proj",),
            "w3": ("down_proj",), "gate_up_proj": ("gate_proj", "up_proj"), "dense_h_to_4h": ("gate_proj", "up_proj"),
            "dense_4h_to_h": ("down_proj",), "out_proj": ("o_proj",), "fc1": ("up_proj",), "fc2": ("down_proj",)}

# ---- DeepSpeed defaults (deepspeed/runtime/zero/config.py) and the HF integration's "auto" -----------
DS_REDUCE_BUCKET = 5e8        # reduce_bucket_size / allgather_bucket_size, elements (ZeRO-1/2 configs set it)
DS_SUB_GROUP = 1e9            # sub_group_size: ZeRO-3 steps the optimizer one fp32 sub-group at a time
DS_MAX_LIVE = 1e9             # stage3_max_live_parameters
SHARDINGS = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp_full", "fsdp_grad_op", "fsdp_hybrid")


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
    fsdp: str = ""                        # "" | full_shard | shard_grad_op | hybrid_shard (FSDP's strategies)
    grad_accum: int = 1
    packing: Optional[bool] = None        # rows packed to cutoff_len: the worst case is then the typical one
    gpus_per_node: int = 8                # HYBRID_SHARD shards within a node
    reduce_bucket: Optional[float] = None     # DeepSpeed reduce_bucket_size (elements); None: the config's default
    prefetch_bucket: Optional[float] = None   # DeepSpeed stage3_prefetch_bucket_size
    max_live: Optional[float] = None          # DeepSpeed stage3_max_live_parameters
    overlap_comm: Optional[bool] = None


@dataclass
class Budget(Record):
    """DESIGN §3's `budget --format json` contract (GiB, peak per GPU). Keys are only ever added."""
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
    fits: Optional[bool]                      # within usable memory with the 20 % margin
    headroom_pct: Optional[float]
    assumptions: List[str] = field(default_factory=list)
    working_buffers_gib: float = 0.0          # gathered layers, buckets, dequantised weights, step temporaries
    fit: Optional[str] = None                 # fits | tight (80-100 % of usable: fits, no margin) | short; None: no card
    peak_phase: str = "backward"              # forward | backward | optimizer_step
    phases: Dict[str, float] = field(default_factory=dict)        # each phase's total (GiB, overhead included)
    overhead_terms: Dict[str, float] = field(default_factory=dict)  # cuda_context, workspaces, allocator_slack
    sharding: str = "none"
    shard_degree: int = 1
    estimates: str = "reserved"               # what the total stands for: the allocator's reserved peak + context
    typical_total_gib: Optional[float] = None  # batches padded to half the cutoff (worst case: total_gib)
    padding: Optional[str] = None             # the padding assumption, in one line

    def to_json_dict(self):
        return {"schema": "oom-doctor/budget/v1", **self.model_dump()}


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


def sharding_of(s: Spec):
    """(kind, shard degree): how the model states are split over the GPUs."""
    n = max(1, s.gpus)
    f = str(s.fsdp or "").lower()
    if f and f not in ("no", "no_shard", "none", "false"):
        if "hybrid" in f:
            return "fsdp_hybrid", max(1, min(n, s.gpus_per_node))
        return ("fsdp_grad_op" if "grad_op" in f or "zero2" in f else "fsdp_full"), n
    if s.zero:
        return f"zero{min(3, s.zero)}", n
    return ("ddp" if n > 1 else "none"), 1


@dataclass
class _Parts:
    """Bytes per GPU of each thing that can be alive, before the phases combine them."""
    weights: float = 0.0
    grads: float = 0.0
    grads_persist: float = 0.0          # held through the forward too (accumulation, DeepSpeed partitions)
    optim: float = 0.0
    acts: float = 0.0                   # saved for backward at the end of the forward
    layer: float = 0.0                  # one layer's recomputed working set (checkpointing)
    logits: float = 0.0
    quant: float = 0.0                  # dequantised 16-bit copy of the layer being computed
    gather_fwd: float = 0.0             # unsharded parameters and buckets during forward
    gather_bwd: float = 0.0             # ... during backward
    root: float = 0.0                   # FSDP's root unit, gathered from the forward to the end of backward
    step_temp: float = 0.0              # optimizer-step temporaries



def fit_verdict(total_gib, usable_gib):
    """`fits` with the 20 % margin; `tight` between 80 % and 100 % of usable memory (it fits, with
    no room for a longer batch or fragmentation); `short` above it; None with no card known."""
    if not usable_gib:
        return None
    if total_gib <= (1 - MARGIN) * usable_gib:
        return "fits"
    return "tight" if total_gib <= usable_gib else "short"

def total_gib(s: Spec) -> float:
    """The estimate's peak total alone: what a plan compares step after step (a dozen specs a plan,
    and a folder of reports repeats the same few). Cached by the spec's values."""
    key = _spec_key(s)
    total = _TOTALS.get(key)
    if total is None:
        if len(_TOTALS) > 4096:
            _TOTALS.clear()
        total = _TOTALS[key] = estimate(s, typical=False).total_gib
    return total


_TOTALS = {}


_SHAPE_VALUES = attrgetter(*(f for f in ModelShape.__dataclass_fields__ if f != "aliases"))
_SPEC_VALUES = attrgetter(*(f for f in Spec.__dataclass_fields__ if f != "model"))


def _spec_key(s):
    """The values of every field of the spec and its model (a model's aliases list as a tuple)."""
    return _SHAPE_VALUES(s.model), tuple(s.model.aliases), _SPEC_VALUES(s)


def estimate(s: Spec, typical=True) -> Budget:
    """The budget of `s`; `typical=False` skips the second estimate at half the cutoff."""
    m = s.model
    P = m.params_b * 1e9
    half = 2 if s.precision != "fp32" else 4
    if s.method == "full":
        trainable = P
    elif s.method == "freeze":
        trainable = (P - m.vocab * m.hidden) * min(s.freeze_layers, m.layers) / m.layers
    else:
        trainable = lora_params(m, s.lora_rank, s.lora_target)
    kind, n = sharding_of(s)
    p = _states(s, P, half, trainable, kind, n)
    _activations(s, p, half)
    _sharding(s, p, P, half, trainable, kind, n)

    live = {}     # phase -> {component: bytes alive}
    common = dict(weights=p.weights, optim=p.optim)
    live["forward"] = dict(common, grads=p.grads_persist, acts=p.acts, logits=p.logits,
                           gathered=p.gather_fwd, root=p.root, buffers=p.quant)
    start = dict(common, grads=p.grads_persist, acts=p.acts + p.layer, logits=p.logits,
                 gathered=p.gather_bwd, root=p.root, buffers=p.quant)
    end = dict(common, grads=p.grads, acts=p.layer if s.grad_ckpt else 0.0, logits=0.0,
               gathered=p.gather_bwd, root=p.root, buffers=p.quant)
    live["backward"] = start if sum(start.values()) >= sum(end.values()) else end
    live["optimizer_step"] = dict(common, grads=p.grads, acts=0.0, logits=0.0, gathered=0.0, root=0.0,
                                  buffers=p.step_temp)
    ctx = CUDA_CONTEXT_GIB["old" if s.bf16_native is False else "new"] * GiB
    work = (WORKSPACE_GIB + (NCCL_GIB if s.gpus > 1 else 0.0)) * GiB
    phases = {}

    def slack_of(parts):
        # the root unit is gathered once a step, like an activation: it pays the transient share
        return (SLACK * (parts["acts"] + parts["logits"] + parts["buffers"] + parts["root"])
                + GATHER_RESERVED * parts["gathered"]
                + SLACK_STATIC * (parts["weights"] + parts["grads"] + parts["optim"]))
    for name, parts in live.items():
        phases[name] = sum(parts.values()) + slack_of(parts) + ctx + work
    peak = max(phases, key=lambda k: (phases[k], k == "backward"))
    at = live[peak]
    slack = slack_of(at)
    terms = {"cuda_context_gib": _g(ctx), "workspaces_gib": _g(work), "allocator_slack_gib": _g(slack)}
    overhead = ctx + work + slack
    total = phases[peak]
    usable = s.capacity_gib - RESERVE_GIB if s.capacity_gib else None
    fits = total / GiB <= (1 - MARGIN) * usable if usable else None
    head = round(100 * (1 - total / GiB / usable), 1) if usable else None
    typical = total_gib(s.model_copy(update={"seq": s.seq // 2, "packing": True})) \
        if typical and not s.packing and s.seq >= 512 else None
    notes = describe(s, kind, n) + _phase_notes(s, peak, phases, terms, typical, foreach_extra(s, trainable, n))
    return Budget(model=m.name, params_b=round(m.params_b, 2), trainable_params=int(trainable),
                  weights_gib=_g(at["weights"]), gradients_gib=_g(at["grads"]), optimizer_states_gib=_g(at["optim"]),
                  activations_gib=_g(at["acts"]), logits_gib=_g(at["logits"]), overhead_gib=_g(overhead),
                  total_gib=_g(total), capacity_gib=s.capacity_gib, usable_gib=round(usable, 2) if usable else None,
                  fits=fits, headroom_pct=head, assumptions=notes, fit=fit_verdict(total / GiB, usable),
                  working_buffers_gib=_g(at["buffers"] + at["gathered"] + at["root"]),
                  peak_phase=peak, phases={k: _g(v) for k, v in phases.items()}, overhead_terms=terms,
                  sharding=kind, shard_degree=n, typical_total_gib=typical,
                  padding=next((a for a in notes if a.startswith(("padding:", "packing:"))), None))


def _states(s, P, half, trainable, kind, n):
    """Weights, gradients and optimizer states per GPU, sharded as the strategy shards them."""
    m = s.model
    p = _Parts()
    bits = s.quant_bits if s.method in ("lora", "qlora") else None
    if bits in QUANT_BYTES:
        lin = linear_params(m)
        base = lin * QUANT_BYTES[bits] + (P - lin) * 2
    else:
        base = P * half
    moments = OPTIM_BYTES[optimizer_kind(s.optim)] * (0.5 if s.precision == "pure_bf16" else 1)
    full = s.method in ("full", "freeze")
    master = 4 if s.precision in ("fp16", "bf16") else 0
    if full:
        grads = trainable * half
        optim = trainable * (moments + master)
        adapters = 0.0
    else:                                 # adapters are upcast to fp32: weight 4 + grad 4 + moments
        adapter_bytes = 2 if s.precision == "pure_bf16" else 4
        adapters = trainable * adapter_bytes
        grads = trainable * adapter_bytes
        optim = trainable * moments
    frozen = base - (trainable * half if full else 0.0)
    owned = trainable * half if full else adapters
    fp32_grads = trainable * 4 if kind.startswith("zero") and master else 0.0
    if kind.startswith("fsdp"):
        # FSDP keeps one flat parameter per wrapped unit, sharded over the group. With mixed precision
        # the flat parameters are fp32 (accelerate upcasts bf16-loaded weights: "Upcasted low precision
        # parameters ... because mixed precision turned on in FSDP"); param_dtype bf16 is only the
        # all-gathered copy. So weights 4/N, gradients 4/N, AdamW moments 8/N bytes a parameter; no
        # separate master copy. QLoRA's packed 4-bit storage is sharded as it is.
        upcast = 4 if s.precision in ("fp16", "bf16") else half
        if full:
            weights, grads = P * upcast, trainable * upcast
        else:
            weights = (base if bits else P * upcast) + adapters
        optim = trainable * moments
        p.weights, p.grads, p.optim = weights / n, grads / n, optim / n
        if s.offload:                     # FSDP CPUOffload(offload_params=True): params, grads, states on the host
            p.weights = p.grads = p.optim = 0.0
        p.weights += _unsharded_quant(s, n)
        p.grads_persist = p.grads if s.grad_accum > 1 else 0.0
        return p
    # DeepSpeed, after estimate_zero2/zero3_model_states_mem_needs (deepspeed/runtime/zero/
    # stage_1_and_2.py, stage3.py): ZeRO-1/2 keep the 16-bit weights whole, the fp32 master copy,
    # the moments and an fp32 gradient partition are 1/N each; ZeRO-2 also partitions the 16-bit
    # gradients. ZeRO-3 partitions the 16-bit weights too and reduces gradients straight into
    # grad_partitions_flat_buffer (gradient_accumulation_dtype, fp32 under mixed precision, on the
    # GPU unless the optimizer is offloaded): 2 + 4 + 12 = DeepSpeed's 18 bytes over N.
    weights, optim = frozen + owned, optim
    if kind == "zero1":
        optim, fp32_grads = optim / n, fp32_grads / n
    elif kind == "zero2":
        optim, fp32_grads, grads = optim / n, fp32_grads / n, grads / n
    elif kind == "zero3":
        optim, weights = optim / n, weights / n
        grads = (fp32_grads if fp32_grads else grads) / n
        fp32_grads = 0.0
    if s.offload and kind in ("zero1", "zero2", "zero3"):
        optim, fp32_grads = 0.0, 0.0      # offload_optimizer: master, moments, fp32 grads on the host
        if kind == "zero3":               # offload_param: only gathered layers stay (estimate_zero3: largest layer)
            weights = 0.0
            grads = 0.0
    elif s.offload:                       # a plain "offload" flag without ZeRO: optimizer states on the host
        optim = 0.0
    if kind == "zero3":
        weights += _unsharded_quant(s, n)
    p.weights, p.grads, p.optim = weights, grads + fp32_grads, optim
    # DeepSpeed allocates its gradient partitions once; plain PyTorch frees .grad after each step
    # (zero_grad(set_to_none=True)) unless gradients accumulate over several micro-batches.
    p.grads_persist = p.grads if kind.startswith("zero") or s.grad_accum > 1 else 0.0
    if kind == "ddp" and full:
        # DDP's reducer keeps flat gradient buckets as large as all gradients (gradient_as_bucket_view=
        # False, the default: "the saved memory size will be equal to the total gradients size")
        p.grads += grads
        p.grads_persist += grads
    return p


def _unsharded_quant(s, n):
    """Bytes of quantisation constants a sharded (or offloaded) run keeps whole on each GPU beyond
    its 1/N share (see QUANT_CONST)."""
    bits = s.quant_bits if s.method in ("lora", "qlora") else None
    if bits not in QUANT_CONST:
        return 0.0
    const = linear_params(s.model) * QUANT_CONST[bits]
    return const if s.offload else const * (1 - 1 / n)


def _activations(s, p, half):
    m = s.model
    tokens = s.batch * s.seq
    mlp = (m.experts_per_token or 1) * (m.moe_intermediate or m.intermediate) if m.experts else m.intermediate
    scale = half / 2
    layer_bytes = (ACT_H * m.hidden + ACT_I * mlp) * tokens * scale
    eager = 0 if s.flash_attn else 4 * m.heads * s.seq * s.seq * s.batch * scale
    if s.grad_ckpt:
        p.acts = CKPT_H * m.hidden * tokens * m.layers * scale
        p.layer = layer_bytes + eager
    else:
        p.acts = (layer_bytes + eager) * m.layers
    # the loss upcasts the logits to fp32; Liger/Unsloth's fused linear cross-entropy computes it in
    # chunks and never holds the full batch × seq × vocabulary tensor
    p.logits = 0.0 if s.liger else tokens * m.vocab * (LOGIT_BYTES if loss_in_fp32(s) else LOGIT_BYTES_16)
    if s.quant_bits in QUANT_BYTES and s.method in ("lora", "qlora"):
        # bitsandbytes dequantises each 4/8-bit linear to a 16-bit weight for its matmul, in forward
        # and again in backward, and frees it after; the caching allocator keeps the largest such
        # block, about twice (the backward's next dequantisation overlaps the gradient matmul)
        per, _ = linear_shapes(m)
        p.quant = 2 * max(i * o for i, o in per.values()) * 2


def loss_in_fp32(s: Spec):
    """Whether the loss sees fp32 logits: autocast (mixed precision outside DeepSpeed), an fp32 model,
    or a model whose forward upcasts them."""
    autocast = s.precision in ("fp16", "bf16") and not s.zero
    return autocast or s.precision == "fp32" or s.model.loss_upcast


def _sharding(s, p, P, half, trainable, kind, n):
    """The unsharded working set: what a sharded run must hold whole, for a moment, on every GPU."""
    m = s.model
    full = s.method in ("full", "freeze")
    big = largest_module_params(m)
    unit = layer_params(m)
    wbytes = half if not (s.quant_bits in QUANT_BYTES and s.method in ("lora", "qlora")) else QUANT_BYTES[s.quant_bits]
    if kind in ("zero1", "zero2"):
        # contiguous_gradients reduces 16-bit gradients through an IPG bucket of reduce_bucket_size
        # elements (two with overlap_comm); the step all-gathers updated weights allgather_bucket_size
        # at a time. DeepSpeed's default and LLaMA-Factory's ds_z2 configs set 5e8.
        bucket = s.reduce_bucket if s.reduce_bucket is not None else DS_REDUCE_BUCKET
        bucket = min(bucket, trainable)
        p.gather_bwd = bucket * 2 * (2 if s.overlap_comm else 1)
        p.step_temp = bucket * 2
    elif kind == "zero3":
        # estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py) adds
        # largest_layer_memory = 4 × largest_layer_params: the largest module's 16-bit parameters and
        # gradients gathered whole (embed_tokens / lm_head in HF models). Around it, the prefetcher
        # holds stage3_prefetch_bucket_size more (HF "auto": 0.9·hidden²) and the layer being
        # computed, all capped by stage3_max_live_parameters (1e9); reduce_bucket_size ("auto":
        # hidden²) batches the gradient reduce-scatter.
        prefetch = s.prefetch_bucket if s.prefetch_bucket is not None else 0.9 * m.hidden ** 2
        live_cap = s.max_live if s.max_live is not None else DS_MAX_LIVE
        reduce = s.reduce_bucket if s.reduce_bucket is not None else m.hidden ** 2
        gathered = min(live_cap, unit + prefetch) * wbytes + big * half
        p.gather_fwd = gathered
        p.gather_bwd = gathered + (big * half if full else 0.0) + reduce * 2 * (2 if s.overlap_comm else 1)
        # the step works on one sub-group (sub_group_size) at a time and flattens its gradients
        # into one fp32 tensor for the optimizer, freed after
        sub = min(DS_SUB_GROUP, trainable / n)
        p.step_temp = sub * 4 if not s.offload else 0.0
    elif kind.startswith("fsdp"):
        # FSDP all-gathers one wrapped unit (a decoder layer) into its param_dtype copy before its
        # forward and again before its backward; the rate limiter (limit_all_gathers=True, the
        # default) lets at most two be in flight. Backward also holds the unit's unsharded gradients
        # until reduce-scatter. SHARD_GRAD_OP keeps the gathered weights from forward to backward.
        # (PyTorch FSDP docs and notes: "FSDP Prefetch Nuances"; FSDP2 keeps two all-gather outputs.)
        # The root unit (embeddings, final norm, LM head: never quantised) is not resharded after
        # forward, "with the intention that they are immediately used for backward computation"
        # (torch/distributed/fsdp/_runtime_utils.py, _post_forward_reshard; FSDP2's fully_shard docs
        # say the same of the root): it stays gathered in 16 bit from the forward to the backward.
        gbytes = half if not (s.quant_bits in QUANT_BYTES and s.method in ("lora", "qlora")) else wbytes
        two = 2 * unit * gbytes
        root = m.vocab * m.hidden * (1 if m.tied_embeddings else 2) * half
        p.root = root
        p.gather_fwd = two
        p.gather_bwd = two + (unit * half * 2 if full else 0.0)
        if kind == "fsdp_grad_op":
            resident = (P * gbytes if not s.quant_bits else P * wbytes)
            p.gather_fwd += resident
            p.gather_bwd += resident
        p.step_temp = _adam_temp(s, trainable, n)    # on this GPU's shard of each parameter
        return
    elif kind in ("none", "ddp"):
        p.step_temp = _adam_temp(s, trainable)
        if kind == "ddp":
            p.gather_bwd = 25 * 2 ** 20 * 2       # DDP's first bucket (bucket_cap_mb 25) in flight
    if s.offload and kind in ("zero1", "zero2"):
        p.step_temp = 0.0                         # the step runs on the host (DeepSpeedCPUAdam)


def _adam_temp(s, trainable, n=1):
    """The optimizer step's temporaries. torch's AdamW builds sqrt(v) (and the update) per tensor in
    its for-loop and fused forms: about the largest parameter's state. Its foreach form (the CUDA
    default of `adamw_torch`) builds sqrt(v) for the whole group at once, one more copy of the second
    moment; `_phase_notes` says so, and an optimizer named `*foreach*` is counted that way.
    8-bit, paged and DeepSpeed's fused optimizers work in place."""
    kind = optimizer_kind(s.optim)
    if kind not in ("adamw", "adam"):
        return 0.0
    state = 2 if s.precision == "pure_bf16" else 4
    if "foreach" in str(s.optim).lower():
        return trainable / n * state
    return min(trainable, largest_module_params(s.model)) / n * state * 2


def foreach_extra(s, trainable, n=1):
    """GiB torch's foreach AdamW may add at the step over the for-loop/fused form (None: not AdamW)."""
    o = str(s.optim).lower()
    if optimizer_kind(s.optim) not in ("adamw", "adam") or "fused" in o or "foreach" in o or s.zero:
        return None
    return trainable / n * (2 if s.precision == "pure_bf16" else 4) / GiB


def _g(x):
    return round(x / GiB, 2)


def describe(s: Spec, kind=None, n=None):
    """The assumptions an estimate rests on, in words a user can check against their config."""
    if kind is None:
        kind, n = sharding_of(s)
    out = [f"model {s.model.name}: {s.model.params_b:g}B parameters, {s.model.layers} layers, hidden {s.model.hidden}, "
           f"vocabulary {s.model.vocab}",
           f"method {s.method}" + (f", LoRA rank {s.lora_rank} on {s.lora_target}" if s.method in ("lora", "qlora") else "")
           + (f", {s.quant_bits}-bit base" if s.quant_bits else ""),
           f"precision {s.precision}, optimizer {s.optim}",
           f"per-device batch {s.batch} × sequence {s.seq} tokens, gradient checkpointing "
           f"{'on' if s.grad_ckpt else 'off'}, attention {'FlashAttention/SDPA' if s.flash_attn else 'eager (s² scores)'}",
           _sharding_words(s, kind, n)]
    if s.capacity_gib:
        out.append(f"card capacity {s.capacity_gib:.2f} GiB, usable = capacity − {RESERVE_GIB} GiB, fits when the "
                   f"total is at most {100 - 100 * MARGIN:.0f} % of usable")
    return out


def _sharding_words(s, kind, n):
    off = " with CPU offload" if s.offload else ""
    if kind == "none":
        return "1 GPU(s), no ZeRO sharding (every GPU holds a full replica)"
    if kind == "ddp":
        return f"{s.gpus} GPU(s), no ZeRO sharding (every GPU holds a full replica; DDP gradient buckets)"
    if kind.startswith("zero"):
        return (f"{s.gpus} GPU(s), DeepSpeed ZeRO-{kind[4]}{off}: states split {n} ways, plus the unsharded working "
                f"set (gathered largest module and layer, buckets, fp32 sub-group at the step)")
    names = {"fsdp_full": "FULL_SHARD", "fsdp_grad_op": "SHARD_GRAD_OP", "fsdp_hybrid": "HYBRID_SHARD"}
    return (f"{s.gpus} GPU(s), FSDP {names[kind]}{off}: fp32 flat parameters split {n} ways (mixed precision), "
            f"plus two all-gathered layers in flight")


def _phase_notes(s, peak, phases, terms, typical, foreach=None):
    words = {"forward": "the forward pass (activations and logits held)",
             "backward": "the backward pass (activations, logits and a recomputed layer held)"
             if phases["backward"] > phases["forward"] else "the backward pass",
             "optimizer_step": "the optimizer step (gradients, states and the step's temporaries)"}
    out = [f"peak in {words[peak]}: forward {_g2(phases['forward'])}, backward {_g2(phases['backward'])}, "
           f"optimizer step {_g2(phases['optimizer_step'])} GiB",
           f"overhead: runtime context {terms['cuda_context_gib']:.2f} GiB, cuBLAS/attention"
           + ("/NCCL" if s.gpus > 1 else "") + f" workspaces {terms['workspaces_gib']:.2f} GiB, allocator slack "
           f"{terms['allocator_slack_gib']:.2f} GiB (the total estimates the allocator's reserved peak plus the "
           f"context, about what nvidia-smi shows)"]
    if foreach and foreach >= 0.5 and s.method in ("full", "freeze"):
        out.append(f"optimizer step counted with the for-loop/fused AdamW; torch's foreach form (the CUDA default "
                   f"of adamw_torch) holds one more copy of the second moment for a moment: +{foreach:.2f} GiB "
                   f"(adamw_torch_fused avoids it)")
    if s.packing:
        out.append(f"packing: every row is filled to {s.seq} tokens, so this is the typical step too")
    elif typical is not None:
        out.append(f"padding: worst case, every sample padded to the cutoff ({s.seq} tokens); batches pad to their "
                   f"longest sample, and at {s.seq // 2} tokens the peak is {typical:.2f} GiB")
    return out


def _g2(x):
    return f"{x / GiB:.2f}"
