"""Failure signals: which lines report a failure, of what kind, and the allocator's numbers.

This is parsing knowledge (what each accelerator and PyTorch generation prints), not diagnosis:
the rules in rules/ decide what a signal means in context. Sources for every pattern are in
shared/reference/memory-and-allocators.md §5 and logs-and-configs.md §6.
"""

import re
from statistics import median

from ..core.units import to_gib

# Kinds, strongest first: the decisive failure is the first signal of the strongest kind.
DEVICE_OOM, HOST_OOM, HOST_KILL, ERROR, CASCADE = "device_oom", "host_oom", "host_kill", "error", "cascade"
STRENGTH = {DEVICE_OOM: 0, HOST_OOM: 0, HOST_KILL: 1, ERROR: 2, CASCADE: 3}

# (kind, dialect, pattern). Order matters inside a line: the first match classifies it. Every pattern
# opens with literal text or a group of literals (never \b, \s or a lookaround), or is anchored with ^:
# Python's re then skips along the line by a fast scan instead of trying the pattern at every position
# (3x faster over the lines that pass the key prefilter). Ray's memory monitor reports *host* memory
# under the name OutOfMemoryError, so it is tested before PyTorch's.
PATTERNS = [
    # a rank that crashed natively (SIGSEGV, SIGABRT, SIGBUS), as its launcher reports it: before the
    # launcher's own notice, which the same line holds
    (ERROR, "native", r"return code = -(?:11|6|7)\b|exitcode\s*:\s*-(?:11|6|7)\b|exit (?:code|status)\s*:?\s*(?:-11|139|134)\b"
                      # Windows: an access violation (0xC0000005) or a stack overflow (0xC00000FD) as a status
                      r"|exit (?:code|status)\s*:?\s*(?:3221225477|3221225725|-1073741819|-1073741571)\b"),
    (CASCADE, "launcher", r"closing signal SIG\w+|ChildFailedError|CalledProcessError|returned non-zero exit status"
                          r"|Killing subprocess|Root Cause \(first observed failure\)|process \d+ terminated with exit code"),
    (DEVICE_OOM, "caching_allocator", r"(?:CUDA|HIP|XPU|NPU) out of memory\b"),
    (DEVICE_OOM, "mps", r"MPS backend out of memory"),
    (DEVICE_OOM, "malloc_async", r"would exceed allowed memory\. \(out of memory\)"),
    (DEVICE_OOM, "nccl", r"Cuda failure '?out of memory"),
    # "CUDA Error 2, out of memory": the driver's code 2 named (tinygrad, custom allocators)
    (DEVICE_OOM, "driver", r"(?:CUDA|HIP|cuda|hip)(?: driver| runtime)? ?(?:error|Error|ERROR)(?: 2,)?:? ?out of memory"),
    (DEVICE_OOM, "driver", r"cudaErrorMemoryAllocation|hipErrorOutOfMemory|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"
                           r"|PT_DEVMEM Allocation failed|RESOURCE_EXHAUSTED: Out of memory|No available memory for the cache blocks"
                           r"|Error \[CUDA\]: out of memory|maximum number of tokens that can be stored in KV cache"
                           r"|Allocation is out of device memory"),          # Intel XPU (IPEX)
    (DEVICE_OOM, "npu_driver", r"EL0004\b|driver error:\s*out of memory"),
    # a serving engine refusing its own token budget at warm-up (TGI: "Not enough memory to handle 1024
    # prefill tokens. You need to decrease `--max-batch-prefill-tokens`")
    (DEVICE_OOM, "engine", r"Not enough memory to handle \d+ (?:prefill )?tokens"),
    # TensorFlow / XLA's allocators: a pinned *host* buffer first (its line names the CUDA error
    # too), then the device's own ("failed to allocate 1.2GiB (1288490188 bytes) from device")
    (HOST_OOM, "pinned_host", r"could not allocate pinned host memory|failed to alloc \d+ bytes on host"
                              r"|cudaHostAlloc failed.{0,40}?out of memory"),   # MindSpore's and others' pinned buffers
    (DEVICE_OOM, "tf_allocator", r"CUDA_ERROR_OUT_OF_MEMORY|HIP_ERROR_OutOfMemory|OOM when allocating tensor"),
    # XLA's compiler finding the program does not fit the TPU's memory ("Ran out of memory in memory
    # space hbm. Used 21.90G of 7.48G hbm."): an OOM, though it calls itself a compile error
    (DEVICE_OOM, "xla_hbm", r"Ran out of memory in memory space (?:hbm|vmem)"),
    # PaddlePaddle's allocator ("Out of memory error on GPU 0. Cannot allocate 428.000000MB memory on GPU 0,
    # 79.153320GB memory has been allocated and available memory is only 175.562500MB.")
    (DEVICE_OOM, "paddle", r"Out of memory error on (?:GPU|NPU|XPU|Custom\w*) ?\d*\. Cannot allocate"),
    # MindSpore's dynamic allocator: "… plus alloc size : 100555779072 is more than total mem size : 61079552000"
    (DEVICE_OOM, "mindspore", r"alloc size : \d+ is more than total mem size"),
    # Apple MLX: one buffer over Metal's limit, or a command buffer that ran out
    (DEVICE_OOM, "metal", r"\[metal::malloc\] Attempting to allocate|kIOGPUCommandBufferCallbackErrorOutOfMemory"
                          r"|\[malloc_or_wait\] Unable to allocate"),
    # PyTorch before 1.0 (THC) and CNTK: a failed cudaMalloc reported with CUDA's error code 2
    (DEVICE_OOM, "driver", r"THCudaCheck FAIL.{0,200}?out of memory|CUDA failure 2: out of memory"),
    (DEVICE_OOM, "cublas_alloc", r"CU(?:BLAS|SOLVER|DNN|SPARSE|FFT)_STATUS_ALLOC_FAILED"),
    (DEVICE_OOM, "nvml_assert", r"NVML_SUCCESS == r INTERNAL ASSERT FAILED"),
    (HOST_OOM, "ray_memory_monitor", r"ray\.exceptions\.OutOfMemoryError|node running low on memory"
                                      r"|exceeds the memory usage threshold|ray-oom-prevention|Memory on the node \(IP:"
                                      r"|exceeded K8s pod memory limits"),      # a worker the pod's cgroup killed
    (DEVICE_OOM, "oom_exception", r"OutOfMemoryError\b(?!\s*Traceback)"),
    # IPython's header names the exception above its trace: the OOM even when the paste lost the last line
    (DEVICE_OOM, "ipython_header", r"^(?:\w+\.)*OutOfMemoryError\s{2,}Traceback \(most recent call last\)"),
    (HOST_OOM, "cpu_allocator", r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"),
    (HOST_OOM, "bad_alloc", r"std::bad_alloc|Cannot allocate memory|Unable to allocate [\d.]+ \w+ for an array"
                            r"|paging file is too small"),
    (HOST_OOM, "bad_alloc", r"^(?:\w+\.)*_?(?:Array|Arrow)?MemoryError\b"),
    # Rust's allocator aborting (HF tokenizers, safetensors): "memory allocation of 2097152 bytes failed"
    (HOST_OOM, "rust_alloc", r"memory allocation of \d+ bytes failed"),
    # Slurm's cgroup enforcing the job's memory request
    (HOST_OOM, "slurm", r"Exceeded (?:job|step) memory limit|exceeded memory limit \(\d+ > \d+\), being killed"),
    # a DataLoader worker that could not map its batch into /dev/shm: host memory (LABELS 7)
    (HOST_OOM, "shared_memory", r"insufficient shared memory|out of shared memory|No space left on device.{0,80}?/dev/shm"
                                r"|/dev/shm.{0,80}?No space left"),
    (HOST_KILL, "sigkill", r"exitcode\s*:?\s*-9\b|exit (?:code|status)\s*:?\s*(?:-9|137)\b|return code = -9\b"
                           r"|Signal 9 \(SIGKILL\)|killed by signal: Killed|Out of memory: Kill(?:ed)? process"
                           r"|OOMKilled|oom[-_]kill|SIGKILL by OOM killer|Signals\.SIGKILL"
                           r"|line \d+:\s+\d+ Killed\b"          # bash: "train.sh: line 14: 3103923 Killed  python ..."
                           r"|已杀死|已砍掉"                     # its words in a Chinese locale (glibc zh_CN, zh_TW)
                           r"|it/s\]\s*Killed\b|s/it\]\s*Killed\b"),  # the shell's "Killed" after the bar it stopped
    # bash's job notice ("[1]+  Killed  python x.py"), zsh's ("[1]    26478 killed     python x.py",
    # "zsh: killed  …"; the reader may take its "[1]" for a paste's line number)
    (HOST_KILL, "sigkill", r"^(?:(?:\[\d+\][+-]?\s+)?Killed\b|(?:\[\d+\][+-]?)?\s*\d+ killed\s+\S|zsh: killed\s)"),
    (CASCADE, "launcher", r"failed \(exitcode: ?-?\d+\)|exitcode\s*:\s*-?\d+ \(pid|exits with return code = -?\d+"
                          r"|sigkill_handler"),
    (ERROR, "cuda_error", r"(?:CUDA|HIP|cuda|hip|CUDA driver) (?:error|Error)\b"),
    (ERROR, "cuda_error", r"Search for `cuda\w+'"),      # the tail of a CUDA error whose first line was cut
    (ERROR, "nccl", r"Watchdog caught collective operation timeout|NCCL operations have failed or timed out"
                    r"|NCCL (?:error|Error|WARN)|ProcessGroupNCCL.{0,1000}?(?:timeout|Timeout|timed out)"),
    (ERROR, "nccl", r"nccl\w*Error\b"),
    # Ascend: torch_npu's "NPU error, error code is 107002" (its out-of-memory code EL0004 is read above)
    (ERROR, "npu_error", r"NPU error, error code is \d+|rt\w*Synchronize\w* execute failed"),
    # ROCm's runtime on a bad address (HSA's page fault): the look-alike of an illegal memory access;
    # CPython's own abort, with faulthandler's thread dumps after it
    (ERROR, "native", r"Memory access fault by GPU node|Fatal Python error: "),
    (ERROR, "native", r"terminate called after throwing|Segmentation fault|Signal (?:11|6|7) \(SIG|SIG(?:SEGV|ABRT|BUS)\b"
                      r"|Bus error|what\(\):|Received \d+ death signal|cuBLAS API failed|CUBLAS_STATUS_\w+"
                      r"|Received Signals\.SIG(?:HUP|TERM|INT) death signal"    # the launcher told to stop
                      r"|CUDNN_STATUS_\w+|OutOfResources|INTERNAL ASSERT FAILED"),
    # a CUDA kernel's assertion, printed once per failing thread before the exception that reports it
    # (its condition may quote code in backticks of its own: "Assertion `probability tensor contains `inf`` failed")
    (ERROR, "device_assert", r"Assertion `.{0,300}?` failed"),
    # (another rank's frame glued after the name: processes writing one stderr at once)
    (ERROR, "exception", r"^(?:[\w]+\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$|\s+File \")"),
    # IPython's header names any exception above its trace (the OOM's own is above): what failed, even
    # when the paste lost the message at the bottom
    (ERROR, "ipython_header", r"^(?:\w+\.)*[A-Z]\w*(?:Error|Exception|Interrupt)\s{2,}Traceback \(most recent call last\)"),
    # a logger's error line, unless it only announces the traceback that follows (its error is at the end)
    (ERROR, "logger", r"^(?:ERROR|FATAL|CRITICAL)\b(?!.*Traceback \(most recent call last\):?\s*$).*(?:Error|error|failed)"),
]
_COMPILED = [(k, d, re.compile(p)) for k, d, p in PATTERNS]
_GATED = []      # each pattern as anchors.Gated: its literals asked for before its regex

# Cheap substring prefilter: a line holding none of these cannot be a signal (every literal a pattern
# requires holds one: tests/test_fastpath.py).
KEYS = ("rror", "memory", "xception", "xit", "Kill", "kill", "SIG", "ignal", "ALLOC", "NCCL", "ssert", "Segmentation", "core dumped",
         "terminate", "what()", "death", "Bus", "ubprocess", "Root Cause", "Interrupt", "OOM", "oom", "EL0004",
         "Resources", "STATUS", "low on", "failed", "shm", "ailure", "ERROR", "KV cache", "FAIL", "Memory on the node",
         "bad_alloc", "Unable to allocate", "已杀死", "已砍掉", "OutOfMemory", "metal::malloc", "paging file",
         "No space left", "mem size", "access fault", "Not enough memory to handle", "malloc_or_wait",
         "3221225", "-1073741", "= -9", "return code = -", "Search for `", "Watchdog", "FATAL",
         "CRITICAL", "Traceback (most recent call last)")


_KEYS_RX = re.compile("|".join(map(re.escape, KEYS)))    # one scan: faster than a loop of `in`
_BY_KEY = []


def _candidates():
    """(automaton over the keys, {key index: the patterns that key can start}): a pattern can only
    match a line that holds one of its required literals, so only the keys those literals hold lead
    to it. None without the automaton library."""
    if not _BY_KEY:
        from .anchors import automaton, required
        by_key = {k: [] for k in range(len(KEYS))}
        for i, (_, _, p) in enumerate(PATTERNS):
            lits = required(p) or ()
            for k, key in enumerate(KEYS):
                if not lits or any(key in lit for lit in lits):
                    by_key[k].append(i)
        found = automaton(KEYS)
        _BY_KEY.append(found and (found, by_key))
    return _BY_KEY[0]


def classify(text):
    """(kind, dialect) when the line reports a failure, else None."""
    found = _candidates()
    if found is None:
        if not _KEYS_RX.search(text):
            return None
        order = range(len(_COMPILED))
    else:
        keys, by_key = found
        hits = keys.find_matches_as_indexes(text, overlapping=True)
        if not hits:
            return None
        order = sorted({i for k, _, _ in hits for i in by_key[k]})       # the table's order decides
    if "Warning" in text and "Error" not in text and "memory" not in text:
        return None
    if not _GATED:
        from .anchors import Gated
        _GATED.extend(Gated(p) for _, _, p in PATTERNS)
    cascade = None
    for i in order:
        if not _GATED[i].search(text):
            continue
        kind = _COMPILED[i][0]
        if kind == CASCADE:
            cascade = cascade or _COMPILED[i][:2]
        elif cascade is None or STRENGTH[kind] <= STRENGTH[HOST_KILL]:
            # a launcher's notice gives way to a kill or an OOM the same line reports (a paste that
            # lost its newlines: "…closing signal SIGTERM … failed (exitcode: -9)")
            return _COMPILED[i][:2]
        else:
            break
    return cascade


def accelerator_of(text):
    """Which device family an OOM message names."""
    for word, acc in (("HIP", "rocm"), ("hip", "rocm"), ("NPU", "npu"), ("EL0004", "npu"), ("XPU", "xpu"),
                      ("UR_RESULT", "xpu"), ("MPS", "mps"), ("metal", "mps"), ("kIOGPU", "mps"), ("CUDA", "cuda"),
                      ("cuda", "cuda"), ("Cuda", "cuda"), ("CUBLAS", "cuda"), ("NVML", "cuda"), ("GPU", "cuda"),
                      ("exceed allowed memory", "cuda")):
        if word in text:
            return acc
    return "unknown"


# ---- allocator numbers -------------------------------------------------------------------------
# Patterns tolerate missing spaces: continuation lines of a hard-wrapped message are joined
# without a separator (a wrap can fall inside a word or a number), so "a to" + "tal" stays whole.
_S = r"(?<!\d)(\d{1,15}(?:\.\d+)?\s*(?:bytes|[KMGTPE]i?B))"   # from a number's first digit: linear on digit runs
_W = r"\s*"
_FIELDS = {
    "tried": re.compile(r"(?:Tried|tried)" + _W + "to" + _W + "allocate" + _W + r"(?:more" + _W + "than" + _W + ")?" + _S),
    # "(GPU 0; 12.00 GiB total" where a paste ends: the capacity, cut before its word
    "total": re.compile(r"total" + _W + r"capac(?:i)?ty" + _W + "of" + _W + _S + r"|" + _S + _W + "total" + r"(?:" + _W + r"capacity|\s*$)"),
    # "of which X is free", kept when a paste cuts it after the number (nothing else says "of which");
    # the bracket form's "X free;" also when a paste ends inside the word ("170.14 MiB fre")
    "free": re.compile(r"of" + _W + "which" + _W + _S + "|" + _S + _W + r"(?:free\s*[;)]|fr(?:ee?)?\s*$)"),
    "allocated": re.compile(r"Of" + _W + "the" + _W + "allocated" + _W + "memory" + _W + _S    # kept when a paste cuts the rest
                            + "|" + _S + _W + "already" + _W + "allocated"),
    "reserved_unallocated": re.compile(_S + _W + r"is" + _W + "reserved" + _W + "by" + _W + "PyTorch" + _W + "but" + _W + "unallocated"),
    "reserved_total": re.compile(_S + _W + r"reserved" + _W + "in" + _W + r"total"),
    # PyTorch 1.0-1.3: cached but not allocated (it is printed smaller than 'already allocated')
    "cached": re.compile(_S + _W + r"cached\)"),
    # (kept when a paste ends right after the number)
    "this_process": re.compile(r"this" + _W + "process" + _W + "has" + _W + _S + _W + r"(?:memory" + _W + "in" + _W + r"use|\s*$)"),
    "device": re.compile(r"(?:GPU|NPU|XPU)" + r"\s?(\d*)" + _W + r"has" + _W + "a" + _W + r"total|\((?:GPU|NPU|XPU)\s*(\d+);"),
}
_PROCESS = re.compile(r"Process" + _W + r"(\d+)" + _W + "has" + _W + _S + _W + "memory" + _W + "in" + _W + "use")
_MPS = re.compile(r"MPS allocated:\s*" + _S + r",\s*other allocations:\s*" + _S + r"(?:,\s*max allowed:\s*" + _S + ")?")
_ASYNC = {
    "allocated": re.compile(r"Currently allocated\s*:\s*" + _S),
    "tried": re.compile(r"Requested\s*:\s*" + _S),
    "total": re.compile(r"Device limit\s*:\s*" + _S),
    "free": re.compile(r"Free \(according to CUDA\)\s*:\s*" + _S),
}
# requests counted in bytes: TensorFlow / XLA ("failed to allocate 1.2GiB (1288490188 bytes) from device",
# "pinned host memory of size: N") and MLX ("[metal::malloc] Attempting to allocate N bytes")
_BYTES_REQUEST = re.compile(r"failed to alloc(?:ate)? (?:[\d.]+\s*[KMGTPE]i?B \()?(\d+) bytes|pinned host memory of size:?\s*(\d+)"
                            r"|\[metal::malloc\] Attempting to allocate (\d+) bytes")
_PADDLE = re.compile(r"Cannot allocate ([\d.]+[KMG]B) memory on \w+ ?\d*, ([\d.]+[KMG]B) memory has been allocated and "
                     r"available memory is only ([\d.]+[KMG]B)")     # its MB and GB are binary, as to_gib reads them
_MINDSPORE = re.compile(r"alloc size : (\d+) is more than total mem size : (\d+)")
_MINDSPORE_USED = re.compile(r"TotalUsedMemStatistics : (\d+)")
# XLA's "Used 21.90G of 7.48G hbm": HumanReadableNumBytes' K, M, G, T of 1024, as to_gib reads a bare letter
_XLA_SPACE = re.compile(r"Used [\d.]+[KMGT]? of ([\d.]+[KMGT]) (?:hbm|vmem)")
_HOST_BYTES = re.compile(r"(?:tried to allocate|allocate)\s*(\d+)\s*bytes")
_DONE = re.compile(r"but\s*unallocated|reserved\s*in\s*total\s*by\s*PyTorch\)|cached\)|See\s*documentation"
                   r"|on (?:private|shared) pool|Free \(according to CUDA\)")


def _first(rx, text):
    m = rx.search(text)
    if not m:
        return None
    return to_gib(next(g for g in m.groups() if g is not None))


def oom_block(lines, start, limit=10):
    """Join the OOM message that starts at lines[start] with its continuation lines."""
    from ..read.reader import BAR_HINT
    text = lines[start].text
    for ln in lines[start + 1:start + limit]:
        if _DONE.search(text):
            break
        nxt = ln.text
        if not nxt.strip() or BAR_HINT.search(nxt) or nxt.lstrip().startswith(("File ", "Traceback", "[")) \
                or classify(nxt) and "out of memory" in nxt:
            break
        text += nxt
    return text


def parse_numbers(block):
    """Allocator numbers (GiB) from one OOM message; keys follow DESIGN §3 `memory`."""
    mem = {"total_gib": None, "free_gib": None, "tried_gib": None, "allocated_by_pytorch_gib": None,
           "reserved_unallocated_gib": None, "process_in_use_gib": None, "other_processes_gib": None}
    if "MPS" in block:
        m = _MPS.search(block)
        if m:
            mem["allocated_by_pytorch_gib"] = to_gib(m.group(1))
            mem["other_allocations_gib"] = to_gib(m.group(2))
            mem["total_gib"] = to_gib(m.group(3)) if m.group(3) else None
        mem["tried_gib"] = _first(_FIELDS["tried"], block)
        return mem
    if "Currently allocated" in block:
        for key, rx in _ASYNC.items():
            mem[{"allocated": "allocated_by_pytorch_gib"}.get(key, key + "_gib")] = _first(rx, block)
        # cudaMallocAsync prints no reserved figure: what the device limit holds beyond the allocated
        # and the free, with no other process listed, is the async pool's cache (LABELS 3)
        known = [mem["total_gib"], mem["allocated_by_pytorch_gib"], mem["free_gib"]]
        if None not in known:
            mem["async_pool_gib"] = max(0.0, known[0] - known[1] - known[2])
        return mem
    if "Cannot allocate" in block and "has been allocated" in block:
        m = _PADDLE.search(block)
        if m:
            mem["tried_gib"], mem["allocated_by_pytorch_gib"], mem["free_gib"] = (to_gib(m.group(i)) for i in (1, 2, 3))
            return mem
    if "total mem size" in block:
        m = _MINDSPORE.search(block)
        if m:
            mem["tried_gib"], mem["total_gib"] = int(m.group(1)) / 2**30, int(m.group(2)) / 2**30
            used = _MINDSPORE_USED.search(block)
            if used:
                mem["allocated_by_pytorch_gib"] = int(used.group(1)) / 2**30
                mem["free_gib"] = max(0.0, mem["total_gib"] - mem["allocated_by_pytorch_gib"])
            return mem
    if "memory space" in block:
        m = _XLA_SPACE.search(block)
        if m:
            mem["total_gib"] = to_gib(m.group(1))
            return mem
    if "alloc" in block and ("bytes" in block or "pinned host" in block):
        m = _BYTES_REQUEST.search(block)
        if m:
            mem["tried_gib"] = int(next(g for g in m.groups() if g is not None)) / 2**30
            return mem
    if "DefaultCPUAllocator" in block or "bytes" in block and "CPU" in block:
        m = _HOST_BYTES.search(block)
        mem["tried_gib"] = int(m.group(1)) / 2**30 if m else None
        return mem
    mem["tried_gib"] = _first(_FIELDS["tried"], block)
    mem["total_gib"] = _first(_FIELDS["total"], block)
    mem["free_gib"] = _first(_FIELDS["free"], block)
    mem["allocated_by_pytorch_gib"] = _first(_FIELDS["allocated"], block)
    mem["reserved_unallocated_gib"] = _first(_FIELDS["reserved_unallocated"], block)
    if mem["reserved_unallocated_gib"] is None:
        mem["reserved_unallocated_gib"] = _first(_FIELDS["cached"], block)
    if mem["reserved_unallocated_gib"] is None:
        total_reserved = _first(_FIELDS["reserved_total"], block)
        if total_reserved is not None and mem["allocated_by_pytorch_gib"] is not None:
            mem["reserved_unallocated_gib"] = max(0.0, total_reserved - mem["allocated_by_pytorch_gib"])
    mem["process_in_use_gib"] = _first(_FIELDS["this_process"], block)
    listed = list(_PROCESS.finditer(block))
    if listed:
        # the message went on past the process lines without 'this process has': NVML could not
        # tell the failing process by its PID (a container), so it is one of the listed ones
        past = block[listed[-1].end():].lstrip(". ").startswith("Of")
        mem["other_processes_gib"] = _others([to_gib(m.group(2)) for m in listed], mem, past)
    return mem


def _others(procs, mem, self_listed=False):
    """Sum of the other processes' memory. Without a 'this process' line (NVML inside a container
    sees other PIDs), the failing process itself is listed as 'Process P has M' where M is about
    what PyTorch holds plus the CUDA context; that line is not another process."""
    if mem["process_in_use_gib"] is None and self_listed and len(procs) == 1:
        return 0.0
    if mem["process_in_use_gib"] is None and mem["allocated_by_pytorch_gib"] is not None:
        own = mem["allocated_by_pytorch_gib"] + (mem["reserved_unallocated_gib"] or 0.0)
        selfish = [p for p in procs if own - 0.05 <= p <= own + 4.0]
        if selfish:
            procs = list(procs)
            procs.remove(min(selfish, key=lambda p: abs(p - own)))
    return sum(procs)


def device_index(block):
    m = _FIELDS["device"].search(block)
    if not m:
        return None
    idx = m.group(1) or m.group(2)
    return int(idx) if idx else None


def typical(values):
    vals = [v for v in values if v is not None]
    return median(vals) if vals else None


def seam_phrases():
    """What a terminal wrap may cut that the reader must recognise (lines.seam_is_cut): every
    failure pattern, the allocator's fields and the per-process lines."""
    return [rx for _, _, rx in _COMPILED] + list(_FIELDS.values()) + [_PROCESS]
