"""Tables pasted with a log: `torch.cuda.memory_summary()` and `nvidia-smi` (its table and
`--query-gpu/--query-compute-apps … --format=csv`). They add to `memory`; they fill a number the OOM
message lacks, never replace one it gives.

memory_summary's rows are `| Metric | Cur Usage | Peak Usage | Tot Alloc | Tot Freed |` with sizes
as `_format_size` writes them (`13050 MiB`), under a header `CUDA OOMs: N | cudaMalloc retries: M`
(torch/cuda/memory.py `memory_summary`).
"""

import re

from ..core.units import round_gib, to_gib

_SIZE = r"(-?[\d.]+\s*(?:B|KiB|MiB|GiB|TiB))"
_SUMMARY = re.compile(r"PyTorch CUDA memory summary, device ID (\d+)")
_OOMS = re.compile(r"CUDA OOMs:\s*(\d+)\s*\|\s*cudaMalloc retries:\s*(\d+)")
_ROWS = {"Allocated memory": "allocated", "GPU reserved memory": "reserved", "Non-releasable memory": "non_releasable"}
_ROW = re.compile(r"^\|\s*(" + "|".join(_ROWS) + r")\s*\|\s*" + _SIZE + r"\s*\|\s*" + _SIZE)
_SMI_GPU = re.compile(r"^\|\s+(\d+)\s+\S.*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:")
_SMI_MEM = re.compile(r"\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_SMI_PROC = re.compile(r"^\|\s+(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(?:C|G|C\+G|M)\s+(\S.*?)\s+(\d+)MiB\s*\|")


def _csv(lines, i):
    """Rows of an nvidia-smi CSV whose header is lines[i], as dicts keyed by the header's names."""
    head = [h.strip().split(" [")[0] for h in lines[i].split(",")]
    rows = []
    for ln in lines[i + 1:i + 65]:
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != len(head):
            break
        rows.append(dict(zip(head, cells)))
    return rows


def _mib(text):
    m = re.match(r"(\d+(?:\.\d+)?)\s*MiB", text or "")
    return round_gib(float(m.group(1)) / 1024, 4) if m else None


def read_tables(texts):
    """{memory key: value} from the tables in `texts` (the lines around the failure); {} when none."""
    out, gpus, procs, gpu = {}, {}, [], None
    for i, t in enumerate(texts):
        # every pattern below needs a row's border, or one of these words
        if t[:1] != "|" and "MiB" not in t and "device ID" not in t and "OOMs" not in t:
            continue
        m = _SUMMARY.search(t) if "device ID" in t else None
        if m:
            out["summary_device"] = int(m.group(1))
        m = _OOMS.search(t) if "OOMs" in t else None
        if m:
            out["cuda_ooms"], out["malloc_retries"] = int(m.group(1)), int(m.group(2))
        m = _ROW.match(t)
        if m:
            key = _ROWS[m.group(1)]
            name = "non_releasable_gib" if key == "non_releasable" else f"summary_{key}_gib"
            out.setdefault(name, round_gib(to_gib(m.group(2)), 4))
            if key == "allocated":
                out.setdefault("summary_peak_allocated_gib", round_gib(to_gib(m.group(3)), 4))
        m = _SMI_GPU.match(t)
        if m:
            gpu = int(m.group(1))
        m = _SMI_MEM.search(t) if "MiB" in t else None
        if m and gpu is not None:
            gpus[gpu] = {"index": gpu, "used_gib": _mib(m.group(1) + "MiB"), "total_gib": _mib(m.group(2) + "MiB")}
            gpu = None
        m = _SMI_PROC.match(t)
        if m:
            procs.append({"gpu": int(m.group(1)), "pid": int(m.group(2)), "name": m.group(3)[:80],
                          "gib": _mib(m.group(4) + "MiB")})
        if "memory.used [MiB]" in t or "memory.total [MiB]" in t:
            for r in _csv(texts, i):
                if (r.get("index") or "").isdigit():
                    idx = int(r["index"])
                    gpus[idx] = {"index": idx, "used_gib": _mib(r.get("memory.used")),
                                 "total_gib": _mib(r.get("memory.total"))}
        if "used_gpu_memory [MiB]" in t:
            for r in _csv(texts, i):
                if (r.get("pid") or "").isdigit():
                    procs.append({"gpu": None, "pid": int(r["pid"]), "name": (r.get("process_name") or "")[:80],
                                  "gib": _mib(r.get("used_gpu_memory"))})
    if gpus:
        out["smi_gpus"] = [gpus[k] for k in sorted(gpus)]
    if procs:
        out["smi_processes"] = procs
    return out


def add_tables(memory, texts):
    """Merge the tables into `memory`: new keys, and the OOM message's missing numbers filled."""
    found = read_tables(texts)
    if not found:
        return memory
    memory.update({k: v for k, v in found.items() if k not in memory})
    dev = memory.get("device_index") or 0
    card = next((g for g in found.get("smi_gpus", []) if g["index"] == dev), None)
    if memory.get("total_gib") is None and card is not None:
        memory["total_gib"] = card["total_gib"]
    res, alloc = found.get("summary_reserved_gib"), found.get("summary_allocated_gib")
    if memory.get("reserved_unallocated_gib") is None and res is not None and alloc is not None:
        memory["reserved_unallocated_gib"] = round_gib(max(0.0, res - alloc), 4)
    if memory.get("allocated_by_pytorch_gib") is None and alloc is not None:
        memory["allocated_by_pytorch_gib"] = alloc
    mine = memory.get("process_in_use_gib")
    on_card = [p for p in found.get("smi_processes", []) if p["gpu"] in (dev, None) and p["gib"] is not None]
    if memory.get("other_processes_gib") is None and mine is not None and len(on_card) > 1:
        # the OOM message said what this process held: the card's other processes are the rest
        memory["other_processes_gib"] = round_gib(max(0.0, sum(p["gib"] for p in on_card) - mine), 4)
    return memory
