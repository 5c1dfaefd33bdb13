"""How much of the log to read. Small logs and pipes: all of it, streamed. Big files: windows.

A training log's verdict lives at its end, its configuration and banner near its start, and the
marker that tells the phase just before the failure. For a seekable file above BIG bytes we parse:
the head (facts, banner); the region after the last sign of progress (found by searching backwards
from the end), or, when that region is huge (other ranks spamming after a crash), a window around
its first failure signal plus the tail; and a window around the last phase marker before that
region. Line numbers stay exact: newlines are counted in the gaps without decoding them.
"""

import io
import mmap
import os
import stat

from .parser import Parser
from .reader import InputError, logical_lines, sniff_encoding

BIG = 16 << 20
HEAD = 1 << 20
REGION_MAX = 4 << 20
WINDOW = 512 << 10
CHUNK = 8 << 20
PROGRESS = (b"it/s]", b"s/it]", b"{'loss'", b"{'eval_loss'", b"it/s, ", b"s/it, ")
MARKERS = (b"***** Running", b"Saving model checkpoint", b"Loading checkpoint shards", b"trainable params",
           b"Loading weights", b"Running training", b"Training completed")
SIGNALS = (b"out of memory", b"rror", b"Killed", b"exitcode", b"Traceback", b"SIGKILL", b"Signal 9",
           b"ALLOC_FAILED", b"EL0004", b"MemoryError", b"Watchdog", b"terminate called", b"Segmentation fault",
           b"OutOfMemory", b"ChildFailedError")


def timeline_of(stream, source, big=BIG, head=HEAD, region_max=REGION_MAX, window=WINDOW):
    """Parse a binary stream into a Timeline, choosing the strategy by what the stream allows."""
    fileno = _fileno(stream)
    size = os.fstat(fileno).st_size if fileno is not None else 0
    if fileno is None or size <= big:
        timeline = _parse_all(stream, source)
    else:
        with mmap.mmap(fileno, 0, access=mmap.ACCESS_READ) as mm:
            if sniff_encoding(mm[:65536]).startswith("utf-16"):
                timeline = _parse_all(stream, source)
            else:
                timeline = _parse_windows(mm, source, head, region_max, window)
    if timeline.line_count == 0:
        raise InputError(f"{source}: the log is empty")
    return timeline


def _fileno(stream):
    """The descriptor of a regular file (mmap-able); None for pipes, terminals and in-memory data."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


def _parse_all(stream, source):
    parser = Parser(source)
    for line in logical_lines(stream):
        parser.feed(line)
    return parser.finish()


def _line_start(mm, pos):
    return 0 if pos <= 0 else mm.rfind(b"\n", 0, pos) + 1


def _line_end(mm, pos):
    end = mm.find(b"\n", pos)
    return len(mm) if end < 0 else end + 1


def _last(mm, needles, end):
    """Position of the last occurrence of any needle before `end`, searching back chunk by chunk
    so a needle that never occurs costs one chunk, not the whole file."""
    overlap = max(len(n) for n in needles)
    while end > 0:
        start = max(0, end - CHUNK)
        block = mm[start:min(len(mm), end + overlap)]
        hit = max(block.rfind(n, 0, end - start + len(n) - 1) for n in needles)
        if hit >= 0:
            return start + hit
        end = start
    return -1


def _first(mm, needles, start):
    overlap = max(len(n) for n in needles)
    while start < len(mm):
        block = mm[start:start + CHUNK + overlap]
        hits = [p for p in (block.find(n) for n in needles) if p >= 0]
        if hits:
            return start + min(hits)
        start += CHUNK
    return -1


def _windows(mm, head, region_max, window):
    """Byte ranges [start, end) to parse, in file order, aligned to line boundaries."""
    size = len(mm)
    spans = [(0, _line_end(mm, min(head, size)))]
    # the final failure region starts at the last progress before the last failure signal (tqdm
    # redraws its bar once more while the traceback unwinds, so progress *after* it does not count)
    last_signal = _last(mm, SIGNALS, size)
    progress = _last(mm, PROGRESS, last_signal if last_signal >= 0 else size)
    region = _line_start(mm, progress) if progress >= 0 else spans[0][1]
    marker = _last(mm, MARKERS, region)
    if marker > spans[0][1]:
        spans.append((_line_start(mm, max(0, marker - window // 4)), _line_end(mm, marker + window // 4)))
    if size - region <= region_max:
        spans.append((_line_start(mm, max(0, region - window)), size))
    else:
        hit = _first(mm, SIGNALS, region)
        if hit >= 0:
            spans.append((_line_start(mm, max(0, hit - window)), _line_end(mm, hit + 2 * window)))
        spans.append((_line_start(mm, size - 4 * window), size))
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _count_newlines(mm, start, end, chunk=64 << 20):
    return sum(mm[i:min(end, i + chunk)].count(b"\n") for i in range(start, end, chunk))


def _parse_windows(mm, source, head, region_max, window):
    parser = Parser(source)
    line_no, pos = 1, 0
    for start, end in _windows(mm, head, region_max, window):
        line_no += _count_newlines(mm, pos, start)
        for line in logical_lines(io.BytesIO(mm[start:end]), start_no=line_no):
            parser.feed(line)
        line_no += _count_newlines(mm, start, end)
        pos = end
    timeline = parser.finish()
    timeline.line_count = line_no - 1 + (1 if len(mm) and mm[len(mm) - 1:] != b"\n" else 0)
    return timeline
