"""Every OOM dialect of the reference: classified, and its numbers read as DESIGN §3 defines them."""

import pytest
from conftest import alternatives, opens_with_literal

from advisor.evidence import signals as sig

GiB = 1.0
MiB = 1 / 1024

DIALECTS = [
    ("old-bracket",
     "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.20 GiB "
     "already allocated; 10.75 MiB free; 14.50 GiB reserved in total by PyTorch)",
     "cuda", dict(tried_gib=20 * MiB, total_gib=15.78, allocated_by_pytorch_gib=14.20, free_gib=10.75 * MiB,
                  reserved_unallocated_gib=0.30)),
    ("old-cached",
     "RuntimeError: CUDA out of memory. Tried to allocate 12.00 MiB (GPU 0; 10.92 GiB total capacity; 9.80 GiB "
     "already allocated; 5.50 MiB free; 120.00 MiB cached)",
     # "cached" is cached-but-unallocated: smaller than "already allocated", so never the total
     "cuda", dict(tried_gib=12 * MiB, total_gib=10.92, free_gib=5.5 * MiB, reserved_unallocated_gib=120 * MiB)),
    ("2.x-cut-mid-sentence",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 272.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
     "of which 60.47 GiB is free. Including non-PyTorch memory, this process has 18.66 GiB memory in use. Of the "
     "allocated memory 18.02 GiB is allocat",
     "cuda", dict(tried_gib=272.0, total_gib=79.15, free_gib=60.47, allocated_by_pytorch_gib=18.02)),
    ("2.x-cut-after-free",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 954.00 MiB. GPU 0 has a total capacity of 23.51 "
     "GiB of which 402.38 MiB",
     "cuda", dict(tried_gib=954 * MiB, total_gib=23.51, free_gib=402.38 * MiB)),
    ("2.1-capacty-typo",
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacty of "
     "79.15 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.63 GiB memory in use. "
     "Of the allocated memory 76.00 GiB is allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.",
     "cuda", dict(tried_gib=1.0, total_gib=79.15, free_gib=0.5, process_in_use_gib=78.63,
                  allocated_by_pytorch_gib=76.0, reserved_unallocated_gib=1.5)),
    ("empty-gpu-index-with-other-process",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU  has a total capacity of 23.65 GiB "
     "of which 100.00 MiB is free. Process 4242 has 12.00 GiB memory in use. Including non-PyTorch memory, this "
     "process has 11.50 GiB memory in use. Of the allocated memory 10.80 GiB is allocated by PyTorch, and 200.00 MiB "
     "is reserved by PyTorch but unallocated.",
     "cuda", dict(total_gib=23.65, other_processes_gib=12.0, process_in_use_gib=11.5)),
    ("malloc-async",
     "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 22.10 GiB\n"
     "Requested               : 1.50 GiB\nDevice limit            : 23.65 GiB\nFree (according to CUDA): 40.00 MiB",
     "cuda", dict(allocated_by_pytorch_gib=22.10, tried_gib=1.5, total_gib=23.65, free_gib=40 * MiB)),
    ("mps",
     "RuntimeError: MPS backend out of memory (MPS allocated: 17.50 GB, other allocations: 1.20 GB, max allowed: "
     "18.13 GB). Tried to allocate 256.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0",
     "mps", dict(allocated_by_pytorch_gib=17.5, other_allocations_gib=1.2, total_gib=18.13, tried_gib=0.25)),
    ("npu-bracket",
     "RuntimeError: NPU out of memory. Tried to allocate 926.00 MiB (NPU 14; 60.97 GiB total capacity; 8.99 GiB "
     "already allocated; 8.99 GiB current active; 827.40 MiB free; 59.48 GiB reserved in total by PyTorch)",
     "npu", dict(tried_gib=926 * MiB, total_gib=60.97, allocated_by_pytorch_gib=8.99, free_gib=827.4 * MiB,
                 reserved_unallocated_gib=50.49)),
    ("xpu",
     "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of "
     "15.11 GiB. Of the allocated memory 13.90 GiB is allocated by PyTorch, and 700.00 MiB is reserved by PyTorch "
     "but unallocated. Please use `empty_cache` to release all unoccupied cached memory.",
     "xpu", dict(tried_gib=3.0, total_gib=15.11, free_gib=None, allocated_by_pytorch_gib=13.9)),
    ("hip",
     "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 124.00 MiB. GPU 0 has a total capacity of "
     "63.98 GiB of which 554.47 MiB is free. Of the allocated memory 61.87 GiB is allocated by PyTorch, and "
     "165.29 MiB is reserved by PyTorch but unallocated.",
     "rocm", dict(total_gib=63.98, reserved_unallocated_gib=165.29 * MiB)),
]


@pytest.mark.parametrize("name,text,acc,want", DIALECTS, ids=[d[0] for d in DIALECTS])
def test_dialect_numbers(name, text, acc, want):
    first = text.splitlines()[0]
    assert sig.classify(first)[0] == sig.DEVICE_OOM
    assert sig.accelerator_of(first) == acc
    mem = sig.parse_numbers(text.replace("\n", ""))
    for key, value in want.items():
        if value is None:
            assert mem.get(key) is None, key
        else:
            assert mem.get(key) == pytest.approx(value, abs=0.006), key


def test_the_failing_process_listed_as_a_process_is_not_another_process():
    # NVML inside a container: the rank itself appears as "Process P has M", with no "this process" line.
    text = ("CUDA out of memory. Tried to allocate 112.00 MiB. GPU 7 has a total capacity of 39.39 GiB of which "
            "14.00 MiB is free. Process 1117993 has 39.36 GiB memory in use. Of the allocated memory 38.34 GiB is "
            "allocated by PyTorch, and 385.64 MiB is reserved by PyTorch but unallocated.")
    assert sig.parse_numbers(text)["other_processes_gib"] == 0


@pytest.mark.parametrize("line,kind", [
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: you "
     "tried to allocate 104857600 bytes. Error code 12 (Cannot allocate memory)", sig.HOST_OOM),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 9) of binary: x",
     sig.HOST_KILL),
    ("E0529 17:45:56.327000 3387988 api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 93043) of binary: x",
     sig.CASCADE),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", sig.DEVICE_OOM),
    ("RuntimeError: CUDA error: out of memory", sig.DEVICE_OOM),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", sig.ERROR),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", sig.CASCADE),
    ("Killed", sig.HOST_KILL),
    ("UserWarning: the memory of something is deprecated", None),
    ("{'loss': 0.91, 'grad_norm': 0.3, 'learning_rate': 2e-05, 'epoch': 0.5}", None),
])
def test_classify(line, kind):
    got = sig.classify(line)
    assert (got[0] if got else None) == kind


def test_host_bytes():
    mem = sig.parse_numbers("DefaultCPUAllocator: can't allocate memory: you tried to allocate 268435456 bytes.")
    assert mem["tried_gib"] == pytest.approx(0.25)


@pytest.mark.parametrize("line,kind", [
    ("RuntimeError: CUDA driver error: out of memory", sig.DEVICE_OOM),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", sig.DEVICE_OOM),
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 18.6 GiB for an array with shape (5000, 1000000)",
     sig.HOST_OOM),
    ("pyarrow.lib.ArrowMemoryError: realloc of size 8589934592 failed", sig.HOST_OOM),
    ("RuntimeError: unable to mmap 4096 bytes from file </torch_1>: Cannot allocate memory (12)", sig.HOST_OOM),
    ("[1]+  Killed                  python train.py --config cfg.yaml", sig.HOST_KILL),
    ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in "
     "KV cache (20224). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`", sig.DEVICE_OOM),
    ("OSError: [WinError 1455] The paging file is too small for this operation to complete", sig.HOST_OOM),
    ("RuntimeError: Triton Error [CUDA]: out of memory", sig.DEVICE_OOM),
    # Ray's memory monitor kills a task when the *node's* RAM runs low, under PyTorch's exception name
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", sig.HOST_OOM),
    ("Killed", sig.HOST_KILL),
    # the tail of the same Ray notice, when the paste kept only its last lines
    ("(ActorModelRayActor pid=8249) Refer to the documentation on how to address the out of memory issue: "
     "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.", sig.HOST_OOM),
    ("RuntimeError: Allocation is out of device memory on current platform.", sig.DEVICE_OOM),
    ("Memory on the node (IP: 10.1.180.84, ID: ba65c80c) where the task (task ID: d221d262, name=head, rank=0,, "
     "pid=4503, memory used", sig.HOST_OOM),
    # bash reports a child killed by SIGKILL; here glued to the progress bar it interrupted
    ("Loading checkpoint shards:  25%|##5       | 1/4 [00:08<00:24,  8.08s/it]/home/u/run.sh: line 14: 3103923 Killed"
     "                  python train.py --config cfg.yaml", sig.HOST_KILL),
    ("Loading checkpoint shards:  50%|#####     | 4/8 [02:10<02:22, 35.73s/it]Killed", sig.HOST_KILL),
    # the shell's "Killed" in a Chinese locale (glibc's zh_CN and zh_TW translations of SIGKILL)
    ("已杀死", sig.HOST_KILL),
    ("./train.sh: 行 9: 41233 已杀死               python train.py", sig.HOST_KILL),
    ("已砍掉", sig.HOST_KILL),
    ("Error processing tensor for shard: CUDA Error 2, out of memory", sig.DEVICE_OOM),
    # Rust's allocator aborting inside a tokenizer: host memory
    ("memory allocation of 2097152 bytes failed", sig.HOST_OOM),
    ("slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed", sig.HOST_OOM),
    ("slurmstepd: error: Exceeded job memory limit", sig.HOST_OOM),
    # a rank that crashed natively, as DeepSpeed's launcher reports it: a look-alike, not the launcher's notice
    ("[ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py'] exits with return code = -11",
     sig.ERROR),
    ("TensorCompare.cu:110: _assert_async_cuda_kernel: block: [0,0,0], thread: [0,0,0] Assertion `probability tensor "
     "contains either `inf`, `nan` or element < 0` failed.", sig.ERROR),
])
def test_more_memory_dialects(line, kind):
    assert sig.classify(line)[0] == kind


def test_signal_patterns_let_re_scan_fast():
    # They run on every line that passes the key prefilter. An alternation whose branches all open
    # with a literal character, or one group of such branches, or a pattern anchored at ^, is found
    # by a fast scan; a leading \\b, class or lookaround makes re try every position (3x slower).
    for kind, dialect, pattern in sig.PATTERNS:
        branches = alternatives(pattern)
        if len(branches) == 1 and pattern.startswith("^"):
            continue
        if len(branches) == 1 and pattern.startswith("(?:"):
            inner = pattern[3:pattern.index(")")]
            branches = alternatives(inner)
        assert all(opens_with_literal(b) for b in branches), (dialect, pattern)


def test_a_cut_message_that_lists_only_the_failing_process_has_no_other_process():
    # Inside a container NVML cannot match the failing process's PID: the message lists it as
    # "Process P has …" and goes straight on to "Of the allocated memory" (here cut right there).
    cut = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 9.47 GiB. GPU 0 has a total capacity of 14.75 GiB "
           "of which 3.78 GiB is free. Process 2116 has 10.95 GiB memory in use. Of th")
    assert sig.parse_numbers(cut)["other_processes_gib"] == 0.0
    # cut before that point, the listed process may be another one: it stays counted
    assert sig.parse_numbers(cut[:cut.index(" Of th")])["other_processes_gib"] == pytest.approx(10.95)


@pytest.mark.parametrize("line,kind,acc,tried", [
    # TensorFlow's pinned host buffer names the CUDA error, but the memory that ran out is the host's
    ("2024-10-22 09:22:17.233584: W tensorflow/core/common_runtime/device/device_host_allocator.h:46] could not "
     "allocate pinned host memory of size: 34359738368", sig.HOST_OOM, None, 32.0),
    ("2024-10-22 09:22:17.233972: E tensorflow/stream_executor/cuda/cuda_driver.cc:802] failed to alloc 8589934592 "
     "bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory", sig.HOST_OOM, None, 8.0),
    ("2023-11-01 16:19:17.812101: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:606] failed to allocate "
     "1.50GiB (1610612736 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory", sig.DEVICE_OOM, "cuda", 1.5),
    ("E rocm_driver.cc:606] failed to allocate 2.00GiB (2147483648 bytes) from device: HIP_ERROR_OutOfMemory",
     sig.DEVICE_OOM, "rocm", 2.0),
    # Apple MLX: one buffer over Metal's limit
    ("RuntimeError: [metal::malloc] Attempting to allocate 4294967296 bytes which is greater than the maximum allowed "
     "buffer size of 3221225472 bytes.", sig.DEVICE_OOM, "mps", 4.0),
])
def test_allocators_that_count_in_bytes(line, kind, acc, tried):
    assert sig.classify(line)[0] == kind
    if acc:
        assert sig.accelerator_of(line) == acc
    assert sig.parse_numbers(line)["tried_gib"] == pytest.approx(tried)


def test_a_logger_line_that_only_opens_a_traceback_is_not_its_error():
    """"…failed due to an exception: Traceback (most recent call last):" introduces the error; the
    exception line at the trace's end says what it was."""
    assert sig.classify("ERROR    | 2024-08-29 06:16:31 | trainers.common:wrapper:120 - train has failed due to an "
                        "exception: Traceback (most recent call last):") is None
    assert sig.classify("ERROR    | 2024-08-29 06:16:31 | trainers.common:wrapper:121 - train has failed") is not None


def test_a_request_of_an_exabyte_is_an_overflowed_size_even_with_no_card_named():
    from advisor.pipeline import diagnose_text
    d = diagnose_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n")
    assert (d.verdict, d.rule) == ("device_oom", "OOM207")
    assert d.plan[0]["action"] == "fix_non_memory_bug"
    # a real request with no card named is not one
    assert diagnose_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 GiB.\n").rule != "OOM207"


def test_a_paste_cut_after_the_capacity_keeps_it():
    mem = sig.parse_numbers("RuntimeError: CUDA out of memory. Tried to allocate 100.00 MiB (GPU 0; 12.00 GiB total")
    assert (mem["tried_gib"], mem["total_gib"]) == (pytest.approx(100 / 1024), 12.0)
