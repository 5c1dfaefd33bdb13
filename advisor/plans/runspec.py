"""From what we know about a run (log facts, config, command-line flags) to a budget Spec.

Every value the estimate needs but nobody stated is filled with the framework's default or a
stated guess, and each guess is listed so the user can correct it.
"""

from ..memory.budget import Spec
from ..memory.catalog import find_gpu, find_model, generic_shape, gpu_from_capacity, parse_params
from ..read.reader import InputError


def resolve_model(model=None, params=None, facts_model=None, facts_params=None, model_config=None):
    """(ModelShape or None, notes)."""
    from ..memory.catalog import shape_from_config_json
    if model_config:
        return shape_from_config_json(model_config), []
    notes = []
    for name in (model, facts_model):
        if name:
            shape, note = find_model(name)
            if shape is not None:
                return shape, [note] if note else []
            notes.append(note)
    count = parse_params(params) if params else facts_params
    if count:
        shape = generic_shape(float(count))
        return shape, notes + [f"model shape unknown: {shape.name}"]
    return None, notes


def resolve_gpu(gpu=None, memory=None, facts_gpu=None):
    """(Gpu or None, notes): --gpu first, then the allocator's capacity, then a GPU name in the log."""
    if gpu:
        g, note = find_gpu(gpu)
        if g is None:
            raise InputError(f"--gpu {gpu!r}: unknown GPU; give a name (4090, A100-80G) or a size (24GiB)")
        return g, [note] if note else []
    total = (memory or {}).get("total_gib")
    if total:
        return gpu_from_capacity(total), []
    if facts_gpu:
        g, note = find_gpu(facts_gpu)
        return g, [note] if note and g else []
    return None, []


def card_of(d):
    """The card a diagnosed run failed on: from the allocator's capacity, else a GPU name in the log."""
    return resolve_gpu(memory=d.memory, facts_gpu=d.facts.get("gpu"))[0]


def spec_from_facts(facts, memory=None, gpu=None, model=None, params=None, model_config=None, overrides=None):
    """(Spec, notes) or (None, notes) when the model cannot be determined."""
    f = dict(facts or {})
    f.update({k: v for k, v in (overrides or {}).items() if v is not None})
    shape, notes = resolve_model(model, params, f.get("model"), f.get("params_b"), model_config)
    if shape is None:
        return None, notes
    card, gnotes = resolve_gpu(gpu, memory, f.get("gpu"))
    notes += gnotes
    method = (f.get("method") or "").lower()
    bits = f.get("quantization_bit")
    if method in ("", "unknown"):
        trainable, total = f.get("trainable_params"), shape.params_b * 1e9
        method = "full" if trainable and trainable > 0.5 * total else "lora"
        notes.append(f"fine-tuning method not stated: assumed {method}")
    if method in ("oft", "dora"):
        method = "lora"
    if method == "qlora" and not bits:
        bits = 4
    if bits and method == "lora" and bits == 4:
        method = "qlora"
    precision = f.get("precision")
    if not precision:
        precision = "bf16" if card is None or card.bf16 is not False else "fp16"
        notes.append(f"precision not stated: assumed {precision}")
    batch, seq = f.get("batch"), f.get("seq_len")
    if not batch:
        batch = 1
        notes.append("per-device batch not stated: assumed 1")
    if not seq:
        seq = 1024
        notes.append("sequence length not stated: assumed 1024 tokens")
    grad_ckpt = f.get("grad_ckpt")
    if grad_ckpt is None:
        grad_ckpt = f.get("framework") in (None, "llamafactory", "trl")
        notes.append(f"gradient checkpointing not stated: assumed {'on' if grad_ckpt else 'off'} "
                     f"({f.get('framework') or 'framework'} default)")
    zero, offload = zero_of(f.get("deepspeed"))
    fsdp = fsdp_of(f.get("fsdp"))
    if fsdp.endswith("_offload"):
        fsdp, offload = fsdp[:-len("_offload")], True
    ds = f.get("deepspeed_buckets") or {}
    spec = Spec(model=shape, method=method, precision=precision, quant_bits=bits, batch=int(batch), seq=int(seq),
                grad_ckpt=bool(grad_ckpt), lora_rank=int(f.get("lora_rank") or 8),
                lora_target=str(f.get("lora_target") or "all"), flash_attn=f.get("flash_attn") is not False,
                optim=str(f.get("optim") or "adamw_torch"), gpus=int(f.get("num_gpus") or 1), zero=zero,
                offload=offload, capacity_gib=card.capacity_gib if card else None,
                bf16_native=card.bf16 if card else None, liger=bool(f.get("liger")), fsdp=fsdp,
                grad_accum=int(f.get("grad_accum") or 1), packing=f.get("packing"),
                reduce_bucket=ds.get("reduce_bucket_size"), prefetch_bucket=ds.get("stage3_prefetch_bucket_size"),
                max_live=ds.get("stage3_max_live_parameters"), overlap_comm=ds.get("overlap_comm"))
    return spec, [n for n in notes if n]


def zero_of(deepspeed):
    """('zero3_offload' or the like) -> (ZeRO stage, offload on); (0, False) when none is known."""
    ds = str(deepspeed or "")
    return (int(ds[4]) if ds.startswith("zero") and ds[4:5].isdigit() else 0), "offload" in ds


def fsdp_of(value):
    """HF's `fsdp: "full_shard auto_wrap offload"`, accelerate's `fsdp_sharding_strategy: FULL_SHARD`
    or 1/2/4 (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD) -> 'full_shard' | 'shard_grad_op' |
    'hybrid_shard' (+ '_offload'); '' when FSDP is off or unknown."""
    if value in (None, "", False):
        return ""
    v = str(value).lower().replace("-", "_")
    v = {"1": "full_shard", "2": "shard_grad_op", "3": "no_shard", "4": "hybrid_shard", "5": "hybrid_shard_zero2",
         "true": "full_shard"}.get(v, v)
    if "no_shard" in v or v in ("false", "no", "none", "0"):
        return ""
    kind = "hybrid_shard" if "hybrid" in v else "shard_grad_op" if "grad_op" in v else "full_shard"
    return kind + ("_offload" if "offload" in v else "")


def deepspeed_buckets(conf):
    """The bucket settings of a DeepSpeed JSON (numbers only: "auto" leaves the estimator's default)."""
    zero = (conf or {}).get("zero_optimization") or {}
    out = {}
    for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters"):
        try:
            out[key] = float(zero[key])
        except (KeyError, TypeError, ValueError):
            pass
    if isinstance(zero.get("overlap_comm"), bool):
        out["overlap_comm"] = zero["overlap_comm"]
    return out


def sharding_facts(config):
    """FSDP and DeepSpeed bucket settings a config states, for spec_from_facts (the Facts record
    carries the ZeRO stage only): HF's `fsdp`/`fsdp_config`, and the DeepSpeed JSON it names."""
    from pathlib import Path
    data = getattr(config, "data", None) or {}
    out = {}
    fs = data.get("fsdp")
    fconf = data.get("fsdp_config") if isinstance(data.get("fsdp_config"), dict) else {}
    strategy = fconf.get("sharding_strategy") or fconf.get("fsdp_sharding_strategy")
    if fs or strategy:
        kind = fsdp_of(strategy or fs)
        off = "offload" in str(fs).lower() or str(fconf.get("offload_params") or fconf.get("fsdp_offload_params")
                                                     ).lower() == "true"
        if kind:
            out["fsdp"] = kind + ("_offload" if off and not kind.endswith("_offload") else "")
    ds = data.get("deepspeed")
    from ..read.config import deepspeed_json
    conf = deepspeed_json(ds, Path(config.path).parent) if ds else None
    if isinstance(conf, dict):
        out["deepspeed_buckets"] = deepspeed_buckets(conf)
    return out
