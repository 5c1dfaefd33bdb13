"""torch.cuda.memory_summary() and nvidia-smi pasted with a log: read into `memory` (issue 19)."""

from advisor.pipeline import diagnose_text

OOM_OLD = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; "
           "60.00 GiB already allocated; 1.00 GiB free; 61.00 GiB reserved in total by PyTorch)\n")
OOM_NEW = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 500.00 MiB is free. Including non-PyTorch memory, this process has 50.00 GiB memory "
           "in use. Of the allocated memory 45.00 GiB is allocated by PyTorch, and 4.00 GiB is reserved by "
           "PyTorch but unallocated.\n")
SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 3            |        cudaMalloc retries: 7         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  61440 MiB |  70000 MiB |   1200 GiB |   1140 GiB |
|       from large pool |  61000 MiB |  69000 MiB |   1100 GiB |   1040 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  62464 MiB |  72000 MiB |  90000 MiB |  27536 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |   1024 MiB |   3000 MiB |    500 GiB |    499 GiB |
|===========================================================================|
"""
SMI = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
| N/A   33C    P0              62W / 400W |  80500MiB / 81920MiB |      0%      Default |
+-----------------------------------------+----------------------+----------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|    0   N/A  N/A     12345      C   python                                    51200MiB |
|    0   N/A  N/A     23456      C   /usr/bin/python3                          29300MiB |
+---------------------------------------------------------------------------------------+
"""
CSV = """\
$ nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
index, name, memory.used [MiB], memory.total [MiB]
0, NVIDIA GeForce RTX 4090, 23000 MiB, 24564 MiB
1, NVIDIA GeForce RTX 4090, 10 MiB, 24564 MiB
"""


def test_memory_summary_counts_and_non_releasable():
    d = diagnose_text(OOM_OLD + SUMMARY, with_plan=False)
    m = d.memory
    assert (m["cuda_ooms"], m["malloc_retries"]) == (3, 7)
    assert m["non_releasable_gib"] == 1.0 and m["summary_reserved_gib"] == 61.0
    assert m["summary_peak_allocated_gib"] == 68.3594
    assert m["allocated_by_pytorch_gib"] == 60.0, "the OOM message's own number is kept"


def test_nvidia_smi_table_names_the_other_process():
    d = diagnose_text(OOM_NEW + SMI, with_plan=False)
    m = d.memory
    assert [p["pid"] for p in m["smi_processes"]] == [12345, 23456]
    assert m["smi_gpus"] == [{"index": 0, "used_gib": 78.6133, "total_gib": 80.0}]
    assert m["other_processes_gib"] == round((51200 + 29300) / 1024 - 50.0, 4)
    assert d.component == "other_process"


def test_nvidia_smi_csv_gives_the_card_when_the_message_does_not():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
    d = diagnose_text(oom + CSV, with_plan=False)
    assert d.memory["total_gib"] == round(24564 / 1024, 4)
    assert [g["index"] for g in d.memory["smi_gpus"]] == [0, 1]


def test_no_table_no_new_keys():
    d = diagnose_text(OOM_OLD, with_plan=False)
    assert not any(k.startswith(("smi_", "summary_", "cuda_ooms", "non_releasable")) for k in d.memory)
