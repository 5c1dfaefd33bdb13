"""Read a PyTorch CUDA memory snapshot (`torch.cuda.memory._dump_snapshot`) without torch.

The file is `pickle.dump(torch.cuda.memory._snapshot(), f)` (torch/cuda/memory.py `_dump_snapshot`):
a dict of plain containers — `segments` (one per cudaMalloc: address, total_size, stream,
segment_type, device, blocks), `device_traces` (one list of alloc/free/segment/oom entries per
device) and, in newer releases, `allocator_settings`. A snapshot never needs a pickle global, so
the unpickler refuses every one: a pickle that asks for a class or a function is hostile, and
nothing in it is executed (find_class is pickle's only door to code: REDUCE, INST, OBJ, NEWOBJ and
EXT all go through it).

Layouts (read from PyTorch's own sources, torch/cuda/memory.py `_snapshot` docstring,
torch/cuda/_memory_viz.py `_block_extra`/`_block_extra_legacy`, torch/csrc/cuda/memory_snapshot.cpp):
- 2.1+: a block has `frames` (innermost first) and `requested_size`;
- 2.0: a block has `history`, a list of {addr, real_size, frames}, and no `frames`;
- the pending state is spelled `active_pending_free` by the C++ writer and `active_awaiting_free`
  in the docstring; older segment lists (`torch.cuda.memory_snapshot()`) are a bare list;
- the `oom` trace entry carries the request `size` and the `device_free` CUDA reported.
"""

import io
import os
import pickle
from dataclasses import dataclass, field
from typing import List, Optional

from .reader import InputError

MAX_BYTES = int(float(os.environ.get("OOM_DOCTOR_SNAPSHOT_MAX_GB", "8")) * 2**30)
SMALL_SIZE = 1 << 20           # kSmallSize in CUDACachingAllocator: larger requests use the large pool
ACTIVE, PENDING, INACTIVE = "active", "pending", "inactive"
_STATES = {"active_allocated": ACTIVE, "active_pending_free": PENDING, "active_awaiting_free": PENDING,
           "inactive": INACTIVE}


def is_snapshot_head(head):
    """A binary pickle (protocol 2-5) starts with PROTO: no text log starts with byte 0x80."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


class Refused(InputError):
    """The pickle asked for something a snapshot never holds."""


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):
        raise Refused(f"{str(module)[:60]}.{str(name)[:60]}")

    def persistent_load(self, pid):
        raise Refused("a persistent object")


class _Capped(io.RawIOBase):
    """Reads of at most MAX_BYTES (a stream such as stdin has no size to check beforehand), under a
    1 MiB buffer: the C unpickler then peeks into it instead of calling read() for every opcode."""

    def __init__(self, stream, limit):
        super().__init__()
        self._s, self._left = stream, limit

    def readable(self):
        return True

    def readinto(self, buf):
        data = self._s.read(len(buf))
        self._left -= len(data)
        if self._left < 0:
            raise InputError(f"snapshot larger than {MAX_BYTES / 2**30:g} GB (OOM_DOCTOR_SNAPSHOT_MAX_GB raises the cap)")
        buf[:len(data)] = data
        return len(data)


def load(stream, source):
    """The snapshot's plain data, or InputError (one line): refused, truncated, damaged or too big."""
    fd = _fileno(stream)
    if fd is not None and os.fstat(fd).st_size > MAX_BYTES:
        raise InputError(f"{source}: snapshot larger than {MAX_BYTES / 2**30:g} GB "
                         f"(OOM_DOCTOR_SNAPSHOT_MAX_GB raises the cap)")
    try:
        # read in buffered chunks: the file's bytes are never held whole, only what they build
        data = _Plain(io.BufferedReader(_Capped(stream, MAX_BYTES), 1 << 20)).load()
    except Refused as e:
        raise InputError(f"{source}: refused: the pickle asks for {e} — a memory snapshot holds only plain "
                         f"data, so this file is not one (nothing in it was run)") from None
    except InputError as e:
        raise InputError(f"{source}: {e}") from None
    except (EOFError, pickle.UnpicklingError) as e:
        what = "truncated" if isinstance(e, EOFError) or "truncated" in str(e) or "ran out" in str(e).lower() \
            else "damaged"
        raise InputError(f"{source}: the memory snapshot is {what} ({str(e)[:80] or 'end of file'})") from None
    except (MemoryError, RecursionError):
        raise InputError(f"{source}: the memory snapshot is too big to read in this machine's memory") from None
    except Exception as e:                  # any other opcode misuse: data, not a snapshot
        raise InputError(f"{source}: not a readable memory snapshot ({type(e).__name__})") from None
    if isinstance(data, list):              # torch.cuda.memory_snapshot(): the segments alone
        data = {"segments": data}
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise InputError(f"{source}: a pickle, but not a memory snapshot (no 'segments' list)")
    return data


def _fileno(stream):
    try:
        fd = stream.fileno()
        os.fstat(fd)
        return fd
    except (AttributeError, OSError, ValueError):
        return None


@dataclass
class Part:
    """Bytes one allocation holds inside a block, and the stack that allocated it (innermost first)."""
    size: int
    frames: list


@dataclass
class Block:
    size: int
    state: str
    parts: List[Part]


@dataclass
class Segment:
    device: int
    total: int
    large: bool
    blocks: List[Block]


@dataclass
class Snap:
    """One snapshot in a layout-independent shape."""
    layout: str
    segments: List[Segment]
    traces: List[list]                       # per device: the trace entries, as the file has them
    settings: dict = field(default_factory=dict)
    oom: Optional[dict] = None               # the last `oom` entry of the OOM device
    oom_device: Optional[int] = None
    oom_count: int = 0


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _frames(v):
    return v if isinstance(v, list) else []      # entries that are not dicts are dropped when read


def _block(b):
    size = _int(b.get("size"))
    state = _STATES.get(b.get("state"))
    if state is None:                        # before `state`: the allocated/active flags
        state = ACTIVE if b.get("allocated") else PENDING if b.get("active") else INACTIVE
    if "frames" in b or "history" not in b:
        parts = [Part(_int(b.get("requested_size")) or size, _frames(b.get("frames")))]
    else:                                    # 2.0: each history entry is an allocation in the block
        parts = [Part(_int(h.get("real_size")), _frames(h.get("frames")))
                 for h in b["history"] if isinstance(h, dict)] if isinstance(b["history"], list) else []
    return Block(size, state, parts)


def parse(data):
    """Snap from the loaded dict; fields a release lacks read as empty."""
    segments, legacy = [], False
    for s in data["segments"]:
        if not isinstance(s, dict):
            continue
        blocks = [b for b in s.get("blocks") or [] if isinstance(b, dict)]
        legacy = legacy or any("history" in b for b in blocks)
        parsed = [_block(b) for b in blocks]
        total = _int(s.get("total_size")) or sum(b.size for b in parsed)
        large = s.get("segment_type") != "small" if "segment_type" in s else total > 2 * SMALL_SIZE
        segments.append(Segment(_int(s.get("device")), total, large, parsed))
    traces = [t if isinstance(t, list) else [] for t in data.get("device_traces") or []]
    settings = data.get("allocator_settings") if isinstance(data.get("allocator_settings"), dict) else {}
    snap = Snap("2.0" if legacy else "2.1+", segments, traces, settings)
    ooms = [(dev, e) for dev, t in enumerate(traces) for e in t if isinstance(e, dict) and e.get("action") == "oom"]
    snap.oom_count = len(ooms)
    if ooms:
        # the entries of one device are in time order; across devices the later time_us wins
        i, (snap.oom_device, snap.oom) = max(enumerate(ooms), key=lambda ie: (_int(ie[1][1].get("time_us")), ie[0]))
    return snap
