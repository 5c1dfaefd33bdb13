#!/usr/bin/env python3
"""Print the estimator against the measured rows of shared/memory_groundtruth.csv.

usage: python benchmarks/budget_calibration.py [CSV]
Each row: the estimate (per GPU, multiplied back when the source summed several GPUs), the
measured peak, and the relative error; then the median and 90th-percentile absolute error.
"""

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.budget import Spec, estimate  # noqa: E402
from advisor.catalog import find_gpu, find_model  # noqa: E402

QWEN1_LORA = "c_attn,c_proj,w1,w2"      # Qwen's finetune.py default LoRA targets, rank 64


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
                zero=3 if ("zero3" in method or method == "full") else 0,
                capacity_gib=find_gpu(row["gpu"].split("x ")[-1])[0].capacity_gib)
    if "emb" in method:                  # LoRA plus trainable embeddings and LM head
        spec = spec.model_copy(update={"method": "lora"})
    return spec, gpus, "emb" in method


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "memory_groundtruth.csv"
    rows = [r for r in csv.DictReader(open(path, encoding="utf-8")) if r["measured_or_estimated"] == "measured"]
    errors = []
    print(f"{'model':24} {'method':26} {'seq':>5} {'gpus':>4} {'estimate':>9} {'measured':>9} {'error':>7}")
    for r in rows:
        spec, gpus, emb = spec_of(r)
        b = estimate(spec)
        total = b.total_gib
        if emb:                          # embeddings + LM head trained in fp32 with AdamW: 16 bytes each
            m = spec.model
            total += 16 * m.vocab * m.hidden * (1 if m.tied_embeddings else 2) / 2**30
        summed = "summed" in r["notes"] or "total" in r["notes"].lower() and gpus > 1
        est = total * gpus if summed else total
        meas = float(r["peak_gib"])
        err = (est - meas) / meas
        errors.append(abs(err))
        print(f"{r['model']:24} {r['method']:26} {r['seq_len']:>5} {gpus:>4} {est:9.1f} {meas:9.1f} {100 * err:6.1f}%")
    errors.sort()
    med = errors[len(errors) // 2]
    p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    print(f"\nrows {len(errors)}  median |error| {100 * med:.1f} %  p90 |error| {100 * p90:.1f} %")


if __name__ == "__main__":
    main()
