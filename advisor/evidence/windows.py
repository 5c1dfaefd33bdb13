"""Windows of a big log: which byte spans decide the diagnosis, and parsing only those.

A training log's verdict lives at its end, its configuration and banner near its start, and the
marker that tells the phase just before the failure. The spans are: the head (facts, banner); the
region after the last sign of progress (found by searching backwards from the end), or, when that
region is huge (other ranks spamming after a crash), a window around its first failure signal plus
the tail; and a window around the last phase marker before that region. The file path
(fastpath.py) finds those positions by positional reads, the pipe path (stream.py) as bytes pass.

Line numbers in the head are exact. Counting the newlines of the gaps would mean reading the whole
file, so past the head a window's first line number is estimated from its byte offset and the
average line length seen; such evidence is marked approximate and also carries its byte offset.
"""


import io
import os
from itertools import islice

from . import signals
from .anchors import minimal, required
from .lines import logical_lines
from .parser import BATCH, Parser, parse
from .phrases import MARKER_PHRASES


def _derived():
    """(signal anchors, marker anchors) as bytes, from the pattern tables."""
    sig = [a for _, _, p in signals.PATTERNS for a in (required(p) or ())]
    mark = required(MARKER_PHRASES.pattern) or []
    return tuple(s.encode() for s in sig), tuple(m.encode() for m in mark)


CHUNK = 8 << 20
PROGRESS = (b"it/s]", b"s/it]", b"{'loss'", b"{'eval_loss'", b"it/s, ", b"s/it, ")
# Where a failure or a phase shows: the literals of every signal pattern and marker phrase
# (anchors.py derives them: a new pattern brings its own), and short words that hold many of them
# at once. `minimal` keeps a literal only when no shorter anchor is part of it: one automaton of a
# few dozen anchors scans at memory speed, one of ~80 is 6x slower. Traceback and the phase lines
# the parser tests by substring are named by no pattern.
_COVER = (b"memory", b"Memory", b"rror", b"Kill", b"kill", b"exit", b"Exit", b"ERROR", b"FATAL", b"CRITICAL", b"SIG",
          b"Signal ", b"NCCL", b"xception", b"Interrupt", b"Assert", b"ASSERT", b"_STATUS_", b"alloc", b"Alloc",
          b"Traceback", b"Watchdog", b"what():", b"death signal", b"Segmentation", b"terminate")
_SIGNALS, _MARKERS = _derived()
SIGNALS = minimal(_SIGNALS + _COVER)
MARKERS = minimal(_MARKERS + (b"***** Running", b"Saving model checkpoint", b"Loading checkpoint shards",
                              b"trainable params", b"Loading weights", b"Running training", b"Training completed"))


class File:
    """Byte slices of a file by position, without mapping it: resident memory stays small."""

    def __init__(self, fd, size):
        self.fd, self.size = fd, size

    def __len__(self):
        return self.size

    def __getitem__(self, span):
        start, stop = max(0, span.start or 0), min(self.size, self.size if span.stop is None else span.stop)
        return os.pread(self.fd, stop - start, start) if stop > start else b""


def parse_all(stream, source):
    return parse(logical_lines(stream), source)


def line_start(mm, pos):
    if pos <= 0:
        return 0
    block = mm[max(0, pos - 65536):pos]
    nl = block.rfind(b"\n")
    return pos - len(block) + nl + 1 if nl >= 0 else max(0, pos - 65536)


def line_end(mm, pos):
    block = mm[pos:pos + 65536]
    nl = block.find(b"\n")
    return min(len(mm), pos + (nl + 1 if nl >= 0 else len(block)))


def _last(mm, needles, end):
    """Position of the last occurrence of any needle before `end`, searching back chunk by chunk
    so a needle that never occurs costs one chunk, not the whole file."""
    overlap, step = max(len(n) for n in needles), 256 << 10
    while end > 0:
        start = max(0, end - step)
        block = mm[start:min(len(mm), end + overlap)]
        hit = max(block.rfind(n, 0, end - start + len(n) - 1) for n in needles)
        if hit >= 0:
            return start + hit
        end, step = start, min(CHUNK, step * 2)    # most hits are near where we start: grow the step
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


def windows(mm, head, region_max, window):
    """Byte ranges [start, end) to parse, in file order, aligned to line boundaries."""
    size = len(mm)
    head_end = line_end(mm, min(head, size))
    # the final failure region starts at the last progress before the last failure signal (tqdm
    # redraws its bar once more while the traceback unwinds, so progress *after* it does not count)
    last_signal = _last(mm, SIGNALS, size)
    progress = _last(mm, PROGRESS, last_signal if last_signal >= 0 else size)
    region = line_start(mm, progress) if progress >= 0 else head_end
    marker = _last(mm, MARKERS, region)
    hit = _first(mm, SIGNALS, region) if size - region > region_max else -1
    return spans_of(mm, head_end, region, marker, hit, region_max, window)


def spans_of(mm, head_end, region, marker, hit, region_max, window):
    """The spans from the positions that decide them (also what the stream path keeps track of)."""
    size = len(mm)
    spans = [(0, head_end)]
    if marker > head_end:
        spans.append((line_start(mm, max(0, marker - window // 4)), line_end(mm, marker + window // 4)))
    if size - region <= region_max:
        spans.append((line_start(mm, max(0, region - window)), size))
    else:
        if hit >= 0:
            spans.append((line_start(mm, max(0, hit - window)), line_end(mm, hit + 2 * window)))
        spans.append((line_start(mm, size - 4 * window), size))
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def parse_windows(mm, source, head, region_max, window):
    spans = windows(mm, head, region_max, window)
    samples = [mm[int(len(mm) * f):int(len(mm) * f) + (256 << 10)] for f in (0.2, 0.4, 0.6, 0.8)]
    bytes_per_line = max(1.0, sum(map(len, samples)) / max(1, sum(b.count(b"\n") for b in samples)))
    return parse_spans(mm, spans, source, bytes_per_line)


def parse_spans(mm, spans, source, bytes_per_line):
    """Parse the byte ranges `spans` of `mm` as one log; past the first, line numbers are estimates."""
    parser = Parser(source)
    exact_end = spans[0][1]
    blocks = [mm[start:end] for start, end in spans]       # a few MiB at most
    head_lines = blocks[0].count(b"\n")
    line_no = 1
    for (start, end), block in zip(spans, blocks):
        if start > 0:       # estimated: bytes since the head over the average line length
            line_no = max(line_no, head_lines + 1 + int((start - exact_end) / bytes_per_line))
        if start > 0 and not block.strip(b"\x00\r\n "):    # a crash's NUL tail: nothing to read
            line_no += block.count(b"\n")
            continue
        lines = logical_lines(io.BytesIO(block), start_no=line_no)
        for batch in iter(lambda: list(islice(lines, BATCH)), []):
            parser.feed_batch(batch)
        line_no += block.count(b"\n")
    timeline = parser.finish()
    timeline.exact_lines = head_lines
    timeline.line_count = max(timeline.line_count, line_no - 1)
    return timeline
