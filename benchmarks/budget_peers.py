#!/usr/bin/env python3
"""The budget's peers, run side by side with oom-doctor on the measured calibration rows.

usage: python benchmarks/budget_peers.py [-v] [CSV ...]
Peers: vramcalc, ftuneai, ml-memguard, peft-doctor (all on PyPI). They are not dependencies of
oom-doctor: each is imported only if it is installed (`pip install vramcalc ftuneai ml-memguard
peft-doctor` in a scratch environment); one that is missing or fails on import is reported with the
reason and given no figure. Each peer gets the rows its own inputs can describe (no sharding, no
4-bit, no CPU offload or trainable embeddings where its API has none) and is fed the row's shape
through its public API, so it never fetches a config from a hub. The table prints, per peer, the
rows it could express, its median and p90 absolute error on them, and oom-doctor's on the same
rows; -v prints every row.
"""

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from budget_calibration import DEFAULT, rows_of  # noqa: E402
from advisor.memory.budget import estimate, lora_targets, sharding_of  # noqa: E402

GiB = 2 ** 30
CONFIGS = HERE.parent.parent / "shared" / "memory_groundtruth_configs.csv"
VRAMCALC_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "gemma": "gemma", "gemma2": "gemma2"}


class NotExpressible(Exception):
    """The peer's inputs have no way to say this row."""


def _single_gpu(spec):
    # DeepSpeed ZeRO on one GPU (Qwen's single-GPU Q-LoRA script) shards nothing: still expressible
    if spec.gpus > 1 or spec.offload:
        raise NotExpressible("no sharding or offload")


def run_vramcalc(spec):
    import vramcalc
    _single_gpu(spec)
    if spec.quant_bits:
        raise NotExpressible("no 4/8-bit base")
    m = spec.model
    fam = m.family.lower()
    model_type = next((v for k, v in VRAMCALC_TYPES.items() if fam == k or (k == "llama" and fam.startswith("llama"))
                       or (k == "qwen2" and fam.startswith("qwen2"))), None)
    if model_type is None:
        raise NotExpressible(f"model_type of {m.family} unsupported")
    cfg = {"model_type": model_type, "hidden_size": m.hidden, "num_hidden_layers": m.layers,
           "num_attention_heads": m.heads, "num_key_value_heads": m.kv_heads, "intermediate_size": m.intermediate,
           "vocab_size": m.vocab, "tie_word_embeddings": m.tied_embeddings, "_name_or_path": m.name}
    if m.head_dim:
        cfg["head_dim"] = m.head_dim
    # vramcalc's "amp" keeps fp32 weights and autocasts; a LoRA base loaded in 16 bit (HF, LLaMA-Factory)
    # is its "pure" precision (the adapters stay fp32 in its formula either way)
    precision = "pure" if spec.precision == "pure_bf16" or spec.method != "full" else "amp"
    e = vramcalc.estimate(cfg, mode="train", dtype="fp16" if spec.precision == "fp16" else "bf16",
                          batch=spec.batch, seq_len=spec.seq, grad_checkpoint=spec.grad_ckpt,
                          lora_rank=spec.lora_rank if spec.method != "full" else None,
                          precision=precision,
                          attn_impl="flash" if spec.flash_attn else "eager")
    return (e.total + e.overhead) / GiB        # what its fits() compares with the card


def run_ftuneai(spec):
    from ftuneai.core.memory import MemoryEstimator
    from ftuneai.core.models import FineTuneMethod, LoRATarget, ModelSpec, Quantization, ShardingStrategy, TrainingConfig
    if spec.offload:
        raise NotExpressible("no offload")
    kind, n = sharding_of(spec)
    strategy = {"none": ShardingStrategy.NONE, "ddp": ShardingStrategy.NONE, "zero1": ShardingStrategy.ZERO_1,
                "zero2": ShardingStrategy.ZERO_2, "zero3": ShardingStrategy.ZERO_3, "fsdp_full": ShardingStrategy.FSDP,
                "fsdp_grad_op": ShardingStrategy.FSDP_SHARD_GRAD, "fsdp_hybrid": ShardingStrategy.FSDP}[kind]
    m = spec.model
    model = ModelSpec(name=m.name, parameters=int(m.params_b * 1e9), hidden_size=m.hidden, num_layers=m.layers,
                      num_attention_heads=m.heads, num_kv_heads=m.kv_heads, intermediate_size=m.intermediate,
                      vocab_size=m.vocab, max_seq_length=max(spec.seq, 131072),
                      default_dtype="float32" if spec.precision == "fp32" else "bfloat16")
    targets = lora_targets(spec.lora_target)
    target = (LoRATarget.ALL_LINEAR if targets & {"gate_proj", "up_proj", "down_proj"}
              else LoRATarget.ATTENTION_ALL if {"k_proj", "o_proj"} & targets else LoRATarget.ATTENTION)
    quant = {4: Quantization.INT4, 8: Quantization.INT8}.get(spec.quant_bits, Quantization.NONE)
    cfg = TrainingConfig(model=m.name, method=FineTuneMethod(spec.method), quantization=quant,
                         batch_size=spec.batch, seq_length=spec.seq, gradient_checkpointing=spec.grad_ckpt,
                         lora_rank=spec.lora_rank, lora_target=target, flash_attention=spec.flash_attn,
                         sharding=strategy, num_gpus=spec.gpus)
    return MemoryEstimator(model, cfg).estimate().total_gb     # 1024**3 bytes


def run_memguard(spec):
    from memory_guard.estimator import FinetuneMethod, ModelSpec, TrainSpec, estimate_training_memory
    _single_gpu(spec)
    m = spec.model
    model = ModelSpec(params=int(m.params_b * 1e9), hidden_dim=m.hidden, num_heads=m.heads, num_kv_heads=m.kv_heads,
                      num_layers=m.layers, intermediate_dim=m.intermediate, bits=spec.quant_bits or 16)
    method = {"full": FinetuneMethod.FULL, "qlora": FinetuneMethod.QLORA}.get(spec.method, FinetuneMethod.LORA)
    train = TrainSpec(method=method, batch_size=spec.batch, seq_length=spec.seq, lora_rank=spec.lora_rank,
                      lora_layers=m.layers, lora_targets=len(lora_targets(spec.lora_target)), optimizer="adamw",
                      grad_checkpoint=spec.grad_ckpt, mixed_precision=spec.precision != "fp32",
                      qlora_double_quant=spec.method == "qlora", flash_attention=spec.flash_attn)
    return estimate_training_memory(model=model, train=train).total_mb / 1024


def run_peft_doctor(spec):
    from peft_doctor.estimator import estimate_vram_gb
    _single_gpu(spec)
    m = spec.model
    r = estimate_vram_gb(m.name, seq_len=spec.seq, batch_size=spec.batch, qlora=spec.method == "qlora",
                         lora=spec.method != "full", gradient_checkpointing=spec.grad_ckpt,
                         params_billion=m.params_b, hidden_size=m.hidden, num_layers=m.layers)
    if "estimated_total_gb" not in r.metadata:
        raise NotExpressible("rejected its inputs")
    return float(r.metadata["estimated_total_gb"])  # weights ÷ 1024**3: GiB


PEERS = [("vramcalc", "vramcalc", run_vramcalc), ("ftuneai", "ftuneai", run_ftuneai),
         ("ml-memguard", "memory_guard", run_memguard), ("peft-doctor", "peft_doctor", run_peft_doctor)]


def _available(module):
    try:
        __import__(module)
        return None
    except Exception as exc:          # a missing package or one that breaks on import: say which
        return f"{type(exc).__name__}: {exc}"


def _figures(errors):
    if not errors:
        return "      -        -"
    errors = sorted(errors)
    p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    return f"{100 * statistics.median(errors):6.1f} % {100 * p90:6.1f} %"


def main():
    verbose = "-v" in sys.argv[1:]
    paths = [Path(p) for p in sys.argv[1:] if p != "-v"] or [p for p in DEFAULT + [CONFIGS] if p.exists()]
    rows = []
    for path in paths:
        for label, spec, measured, mult, emb, unsure in rows_of(path):
            if unsure:
                continue
            rows.append((label, spec, measured, mult, emb))
    ours_all = {}
    for i, (label, spec, measured, mult, emb) in enumerate(rows):
        total = estimate(spec).total_gib
        if emb:                      # as budget_calibration.py: embeddings and LM head trained, 16 bytes each
            m = spec.model
            total += 16 * m.vocab * m.hidden * (1 if m.tied_embeddings else 2) / GiB
        ours_all[i] = abs(total * mult - measured) / measured
    print(f"{len(rows)} measured rows ({', '.join(p.name for p in paths)}); unverified rows left out")
    missing = {}
    subsets = [("all rows", range(len(rows))), ("sharded rows (2-8 GPUs)", [i for i, r in enumerate(rows) if r[1].gpus > 1])]
    for title, keep in subsets:
        keep = list(keep)
        print(f"\n{title}\n{'tool':12} {'rows':>9} {'median':>8} {'p90':>8}   oom-doctor on the same rows")
        print(f"{'oom-doctor':12} {len(keep):>4} of {len(keep):<3} {_figures([ours_all[i] for i in keep])}")
        for name, module, fn in PEERS:
            why = _available(module)
            if why:
                missing[name] = f"{name}: not run here ({why}); pip install {name}"
                print(f"{name:12} {'not run':>9}")
                continue
            _peer_line(name, fn, [(i, rows[i]) for i in keep], ours_all, verbose and title == "all rows")
    for line in missing.values():
        print(line)


def _peer_line(name, fn, rows, ours_all, verbose):
    errs, ours, skipped = [], [], {}
    for i, (label, spec, measured, mult, emb) in rows:
        try:
            if emb:
                raise NotExpressible("no trainable embeddings")
            got = fn(spec) * mult
        except NotExpressible as exc:
            skipped[str(exc)] = skipped.get(str(exc), 0) + 1
            continue
        except Exception as exc:       # the peer refused the row (its validation): not expressible either
            key = f"raised {type(exc).__name__}"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        errs.append(abs(got - measured) / measured)
        ours.append(ours_all[i])
        if verbose:
            print(f"    {name:11} {' '.join(map(str, label)):48} got {got:7.1f} measured {measured:6.1f} "
                  f"err {100 * (got - measured) / measured:+6.1f} %")
    print(f"{name:12} {len(errs):>4} of {len(rows):<3} {_figures(errs)}   {_figures(ours)}"
          + (f"   (left out: {'; '.join(f'{k} {v}' for k, v in sorted(skipped.items()))})" if skipped else ""))


if __name__ == "__main__":
    main()
