#!/usr/bin/env python3
"""Print the estimator against measured peaks: shared/memory_groundtruth.csv and the sharded rows of
benchmarks/data/sharded_groundtruth.csv.

usage: python benchmarks/budget_calibration.py [CSV ...]
Each row: the estimate (per GPU, multiplied back when the source summed several GPUs), the
measured peak, the relative error and the phase the estimate peaks in; then the median and
90th-percentile absolute error for single-GPU rows, sharded rows and all rows (the last line).
Two layouts are read: the shared one (params_b, seq_len, gpu, measured_or_estimated, notes) and
the config layout of score_budget.py plus fsdp, offload, packing, buckets, measured_as and status
(`unverified` rows, whose trainer or reading of the peak is unknown, are printed but not scored).
"""

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.memory.budget import Spec, estimate  # noqa: E402
from advisor.memory.catalog import find_gpu, find_model  # noqa: E402

QWEN1_LORA = "c_attn,c_proj,w1,w2"      # Qwen's finetune.py default LoRA targets, rank 64
DEFAULT = [ROOT.parent / "shared" / "memory_groundtruth.csv", ROOT / "benchmarks" / "data" / "sharded_groundtruth.csv"]


def spec_of(row):
    model, note = find_model(row["model"])
    if model is None:
        raise SystemExit(f"cannot resolve {row['model']}: {note}")
    gpus = int(re.match(r"(\d+)x", row["gpu"]).group(1)) if re.match(r"\d+x", row["gpu"]) else 1
    method = row["method"]
    quant = int(row["quant_bits"][0]) if row["quant_bits"][:1].isdigit() else None
    spec = Spec(model=model, method="qlora" if method == "qlora" else ("full" if method == "full" else "lora"),
                precision="fp16" if "fp16" in row["precision"] else "bf16", quant_bits=quant,
                batch=int(row["batch"]), seq=int(row["seq_len"]), grad_ckpt=row["grad_ckpt"] == "on",
                lora_rank=64, lora_target=QWEN1_LORA, flash_attn=True, gpus=gpus,
                zero=3 if ("zero3" in method or method == "full") else (2 if method == "qlora" else 0),
                grad_accum=8, packing=True,
                capacity_gib=find_gpu(row["gpu"].split("x ")[-1])[0].capacity_gib)
    if method == "qlora":                # finetune_qlora_single_gpu.sh: --fp16 --deepspeed ds_config_zero2.json
        spec = spec.model_copy(update={"reduce_bucket": 2e8, "overlap_comm": True})
    if "emb" in method:                  # LoRA plus trainable embeddings and LM head
        spec = spec.model_copy(update={"method": "lora"})
    return spec, gpus, "emb" in method


def config_spec_of(row):
    """A row in score_budget.py's layout (plus the sharding columns) -> Spec."""
    model, note = find_model(row["model"])
    if model is None:
        raise SystemExit(f"cannot resolve {row['model']}: {note}")
    num = lambda k: float(row[k]) if row.get(k) else None  # noqa: E731
    method = row["method"]
    spec = Spec(model=model, method=method, precision=row["precision"],
                quant_bits=int(row["quant_bits"]) if row.get("quant_bits") else (4 if method == "qlora" else None),
                batch=int(row["batch"]), seq=int(row["seq"]), grad_ckpt=row["grad_ckpt"] == "on",
                lora_rank=int(row["lora_rank"] or 8), lora_target=row["lora_target"] or "all",
                flash_attn=row["flash_attn"] != "off", gpus=int(row["gpus"] or 1), zero=int(row["zero"] or 0),
                fsdp=row.get("fsdp") or "", offload=row.get("offload") == "on",
                packing=row.get("packing") == "on" or None, reduce_bucket=num("reduce_bucket"),
                prefetch_bucket=num("prefetch_bucket"))
    return spec


def rows_of(path):
    out = []
    for r in csv.DictReader(open(path, encoding="utf-8")):
        if "measured_or_estimated" in r:
            if r["measured_or_estimated"] != "measured":
                continue
            spec, gpus, emb = spec_of(r)
            summed = "summed" in r["notes"] or "total" in r["notes"].lower() and gpus > 1
            label = (r["model"], r["method"], r["seq_len"], gpus)
            out.append((label, spec, float(r["peak_gib"]), gpus if summed else 1, emb, False))
        else:
            spec = config_spec_of(r)
            how = spec.fsdp or (f"zero{spec.zero}" if spec.zero else "")
            label = (r["model"], f"{r['method']} {how}".strip(), r["seq"], spec.gpus)
            out.append((label, spec, float(r["peak_gib"]), 1, False, r.get("status") == "unverified"))
    return out


def figures(errors):
    errors = sorted(errors)
    if not errors:
        return "rows 0"
    med = errors[len(errors) // 2]
    p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    return f"rows {len(errors)}  median |error| {100 * med:.1f} %  p90 |error| {100 * p90:.1f} %"


def main():
    paths = [Path(p) for p in sys.argv[1:]] or [p for p in DEFAULT if p.exists()]
    single, sharded, unverified = [], [], []
    print(f"{'model':24} {'method':26} {'seq':>5} {'gpus':>4} {'estimate':>9} {'measured':>9} {'error':>7}  peak in")
    for path in paths:
        for (model, method, seq, gpus), spec, meas, mult, emb, unsure in rows_of(path):
            b = estimate(spec)
            total = b.total_gib
            if emb:                      # embeddings + LM head trained in fp32 with AdamW: 16 bytes each
                m = spec.model
                total += 16 * m.vocab * m.hidden * (1 if m.tied_embeddings else 2) / 2**30
            est = total * mult
            err = (est - meas) / meas
            (unverified if unsure else sharded if gpus > 1 else single).append(abs(err))
            print(f"{model:24} {method:26} {seq:>5} {gpus:>4} {est:9.1f} {meas:9.1f} {100 * err:6.1f}%  {b.peak_phase}"
                  + ("  (unverified: not scored)" if unsure else ""))
    print(f"\nsingle GPU: {figures(single)}")
    print(f"sharded   : {figures(sharded)}")
    if unverified:
        print(f"unverified (printed, not scored): {figures(unverified)}")
    print(f"\n{figures(single + sharded)}")


if __name__ == "__main__":
    main()
