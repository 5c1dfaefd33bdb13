"""Pipes at grep speed: a stream that cannot seek is scanned in C and parsed only where it matters.

The file path (windows.windows) parses a few spans that follow from a few positions: the last
failure signal, the last progress before it, the last phase marker before that progress's line and
the first signal after it. A pipe cannot be searched backwards, so the same positions are kept as
the bytes stream past: each chunk is searched once for the signal and marker anchors (Aho-Corasick
in Rust when `ahocorasick_rs` is installed, else one bytes regex: the same leftmost-first matches),
progress is looked up backwards from the chunk's end (dense in a training log: a few bytes read),
and only what those positions can still need is kept: the head, a ring of the last bytes and small
windows around the marker and signal that may be chosen. The spans are then the ones the file path
would parse, so the diagnosis is the same; memory does not depend on the stream's length.
"""

import queue
import re
import threading
from bisect import bisect_left
from collections import deque

from .windows import MARKERS, PROGRESS, SIGNALS, line_end, line_start, parse_all, parse_spans, spans_of
from ..read.reader import sniff_encoding

CHUNK = 4 << 20
SEARCH = 64 << 10     # what line_start/line_end look at either side of a position
SAMPLE = 256 << 10    # bytes of a chunk whose newlines estimate the average line length (as the file path)
KEEP_MARKERS = 4      # recent markers whose windows are kept after they leave the ring


def _matcher(needles):
    """needles -> a function: buffer -> [(needle index, start)], leftmost-first, non-overlapping."""
    from .anchors import automaton
    auto = automaton(needles, of_bytes=True, leftmost_first=True)
    if auto is None:         # ~8x slower on a chunk, the same matches
        return _regex_matcher(needles)
    return lambda buf: [(i, s) for i, s, _ in auto.find_matches_as_indexes(buf)]


def _regex_matcher(needles):
    rx, index = re.compile(b"|".join(map(re.escape, needles))), {n: i for i, n in enumerate(needles)}
    return lambda buf: [(index[m.group()], m.start()) for m in rx.finditer(buf)]


_ANCHORS = SIGNALS + MARKERS
_FIND = []
_LONGEST = max(map(len, _ANCHORS + PROGRESS))


def _find(buf, which):
    if not _FIND:
        _FIND.extend([_matcher(_ANCHORS), _matcher(PROGRESS)])
    return _FIND[which](buf)


def _last_start(buf, needles, lo, hi):
    """The last start s, lo <= s < hi, of any needle in buf (or -1): backwards from hi, a tail window
    first (progress is dense in a training log), then the rest with one C scan."""
    best = -1
    for n in needles:
        best = max(best, buf.rfind(n, max(lo, hi - SEARCH), hi + len(n) - 1))
    if best >= 0 or hi - SEARCH <= lo:
        return best
    starts = [s for _, s in _find(memoryview(buf)[lo:min(len(buf), hi + _LONGEST)], 1) if s + lo < hi]
    if not starts:
        return -1
    s = lo + starts[-1]               # an occurrence overlapping the match starts later: take the last
    return max(buf.rfind(n, s, min(hi, s + _LONGEST) + len(n) - 1) for n in needles)


class _Tape:
    """What is kept of a stream: its head, a ring of its last bytes, windows around chosen positions."""

    def __init__(self, head, region_max, window):
        self.head_len, self.region_max, self.window = head, region_max, window
        self.keep = region_max + 4 * window + 2 * SEARCH        # the final region, the tail, a line start
        self.head = b""
        self.ring = deque()           # (offset, bytes)
        self.size = 0
        self.caps = {}                # (start, end) -> bytearray, for spans that may leave the ring
        self.signals, self.markers = [], []     # recent anchor starts (bounded, see _trim)
        self.last_signal = -1
        self.progress = -1            # the last progress so far (the open candidate)
        self.early = -1               # the last progress before the next chunk's seam
        self.open = None              # (region, marker, hit) if no signal came after `progress`
        self.final = None             # the same for the last progress before the last signal
        self.samples = []             # (offset, bytes, newlines) of chunk starts, thinned to stay bounded

    # ---- retained bytes ------------------------------------------------------------------------
    def __len__(self):
        return self.size

    def __getitem__(self, span):
        start, stop = max(0, span.start or 0), min(self.size, self.size if span.stop is None else span.stop)
        if stop <= start:
            return b""
        if stop <= len(self.head):
            return self.head[start:stop]
        if self.ring and start >= self.ring[0][0]:
            return b"".join(c[max(0, start - o):stop - o] for o, c in self.ring if o < stop and o + len(c) > start)
        for (cs, ce), buf in self.caps.items():
            if cs <= start and stop <= cs + len(buf):
                return bytes(buf[start - cs:stop - cs])
        raise KeyError(f"bytes {start}:{stop} were not kept")

    def _capture(self, start, end):
        """Keep [start, end) beyond the ring (the ring holds what exists of it now)."""
        start, key = max(0, start), (max(0, start), end)
        if key not in self.caps:
            self.caps[key] = bytearray(self[start:min(end, self.size)])
        return key

    # ---- feeding -------------------------------------------------------------------------------
    def feed(self, chunk):
        base, prev = self.size, self.ring[-1][1][-(_LONGEST - 1):] if self.ring else b""
        self.size += len(chunk)
        self.ring.append((base, chunk))
        margin = self.window + 2 * SEARCH + _LONGEST     # windows around anchors of this chunk reach back
        drop_below = min(self.size - self.keep, base - margin)
        while len(self.ring) > 1 and self.ring[0][0] + len(self.ring[0][1]) <= drop_below:
            self.ring.popleft()
        if len(self.head) < self.head_len + SEARCH:
            self.head = self[0:self.head_len + SEARCH]
        for (cs, ce), buf in self.caps.items():
            if cs + len(buf) < ce:
                buf += chunk[cs + len(buf) - base:ce - base]
        self.samples.append((base, min(SAMPLE, len(chunk)), chunk.count(b"\n", 0, SAMPLE)))
        if len(self.samples) > 1024:
            self.samples = self.samples[::2]
        seam = prev + chunk[:_LONGEST - 1]       # anchors cut by the chunk's edge
        hits = [(i, base - len(prev) + s) for i, s in _find(seam, 0) if s < len(prev) < s + len(_ANCHORS[i])]
        hits += [(i, base + s) for i, s in _find(chunk, 0)]
        signals = sorted(s for i, s in hits if i < len(SIGNALS))
        self.signals += signals
        self.markers += sorted(s for i, s in hits if i >= len(SIGNALS))
        if prev and hits and hits[0][1] < base:
            self.signals.sort()
            self.markers.sort()
        last = self._last_progress(base, prev, chunk, self.size)
        if signals:
            self.last_signal = self._refine(signals[-1], SIGNALS, self.size)
            before = self._last_progress(base, prev, chunk, self.last_signal)
            same = before == self.progress and self.open is not None
            self.final = self._candidate(before, self.open[0] if same else None)
        if last != self.progress or self.open is None:
            self.open = self._candidate(last)
        elif self.open[2] < 0 and signals:
            self.open = self._candidate(last, self.open[0])
        p = _last_start(chunk, PROGRESS, 0, len(chunk) - _LONGEST + 1)
        self.early = base + p if p >= 0 else last if last < base else self.progress
        self.progress = last
        self._trim()

    def _last_progress(self, base, prev, chunk, limit):
        """The last progress that starts before `limit`, which lies in this chunk or its seam."""
        p = _last_start(chunk, PROGRESS, 0, limit - base) if limit > base else -1
        if p >= 0:
            return base + p
        p = _last_start(prev + chunk[:_LONGEST - 1], PROGRESS, 0, min(len(prev), limit - base + len(prev)))
        older = self.progress if self.progress < limit else self.early      # `early` ends before the seam
        return max(older, base - len(prev) + p if p >= 0 else -1)

    def _refine(self, start, needles, limit):
        """The last start < limit of a needle overlapping the match at `start` (the file path's rfind)."""
        block = self[start:min(limit, start + _LONGEST) + _LONGEST]
        return start + max(block.rfind(n, 0, min(limit, start + _LONGEST) - start + len(n) - 1) for n in needles)

    def _candidate(self, progress, region=None):
        """(region, marker, first signal in the region) for a final region starting at `progress`'s line."""
        w = self.window
        if region is None:
            region = line_start(self, progress) if progress >= 0 else self._head_end()
        k = bisect_left(self.markers, region)
        raw = self.markers[k - 1] if k else -1
        k = bisect_left(self.signals, region)
        hit = self.signals[k] if k < len(self.signals) else -1
        if raw >= 0:
            self._capture(*self._marker_window(raw))
        if hit >= 0:
            self._capture(*self._signal_window(hit))
        return region, self._refine(raw, MARKERS, region) if raw >= 0 else -1, hit, raw

    def _marker_window(self, raw):
        # the refined marker starts up to _LONGEST after the match: the window is that much wider
        return raw - self.window // 4 - SEARCH, raw + self.window // 4 + SEARCH + _LONGEST

    def _signal_window(self, hit):
        return hit - self.window - SEARCH, hit + 2 * self.window + SEARCH

    def _head_end(self):
        return line_end(self, min(self.head_len, self.size))

    def _trim(self):
        """Forget anchors and windows no candidate can still need: bounded whatever the stream."""
        ring_start = self.ring[0][0]
        keep_m = {c[3] for c in (self.open, self.final) if c} | set(self.markers[-KEEP_MARKERS:])
        keep_s = {c[2] for c in (self.open, self.final) if c}
        self.markers = [m for m in self.markers if m in keep_m or m >= ring_start]
        self.signals = [s for s in self.signals if s in keep_s or s >= ring_start]
        for m in self.markers[-KEEP_MARKERS:]:
            self._capture(*self._marker_window(m))
        wanted = {self._key(*self._marker_window(m)) for m in self.markers}
        wanted |= {self._key(*self._signal_window(s)) for s in self.signals}
        self.caps = {k: v for k, v in self.caps.items() if k in wanted}

    @staticmethod
    def _key(start, end):
        return max(0, start), end

    # ---- the end ----------------------------------------------------------------------------------
    def timeline(self, source):
        region, marker, hit, _ = self.final if self.last_signal >= 0 else self.open
        spans = spans_of(self, self._head_end(), region, marker, hit, self.region_max, self.window)
        # the chunks at a fifth, two fifths... of the stream: where the file path samples its lines
        picks = [max((s for s in self.samples if s[0] <= self.size * f), default=self.samples[0])
                 for f in (.2, .4, .6, .8)]
        per_line = sum(p[1] for p in picks) / max(1, sum(p[2] for p in picks))
        return parse_spans(self, spans, source, max(1.0, per_line))


class _Chain:
    """Bytes already read, then the rest of the stream."""

    def __init__(self, first, stream):
        self.first, self.stream = first, stream

    def read(self, n=-1):
        if self.first:
            out, self.first = self.first, b""
            return out
        return self.stream.read(n)


def _widen_pipe(stream):
    """A 1 MiB pipe buffer (Linux) instead of 64 KiB: 16x fewer reads and context switches."""
    try:
        import fcntl
        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError, ValueError, AttributeError):
        pass


def _read(stream, n):
    parts, got = [], 0
    while got < n:
        data = stream.read(n - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts) if len(parts) != 1 else parts[0]


def _chunks(stream):
    """The stream's chunks, read by a thread: reading a pipe and scanning (Rust, without the GIL) then
    run on two cores, and the writer of the pipe is never kept waiting by the scan."""
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):       # in-memory data: nothing to wait for
        yield from iter(lambda: _read(stream, CHUNK), b"")
        return
    chunks = queue.Queue(maxsize=2)

    def pump():
        try:
            while True:
                data = _read(stream, CHUNK)
                chunks.put(data)
                if not data:
                    return
        except BaseException as e:          # raised again in the reading thread
            chunks.put(e)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        data = chunks.get()
        if isinstance(data, BaseException):
            raise data
        if not data:
            return
        yield data


def timeline_of_stream(stream, source, big, head, region_max, window):
    _widen_pipe(stream)
    chunks, first, got = _chunks(stream), [], 0
    for data in chunks:                     # up to `big` bytes: parsed whole, as the file path does
        first.append(data)
        got += len(data)
        if got > big:
            break
    if got <= big or sniff_encoding(first[0][:65536]).startswith("utf-16"):
        rest = _Chain(b"".join(first), stream)
        if got > big:
            rest.stream = _Joined(chunks)
        return parse_all(rest, source)
    tape = _Tape(head, region_max, window)
    while first:
        tape.feed(first.pop(0))
    for data in chunks:
        tape.feed(data)
    return tape.timeline(source)


class _Joined:
    """Chunks as a stream (what the reader reads from)."""

    def __init__(self, chunks):
        self.chunks = chunks

    def read(self, n=-1):
        return next(self.chunks, b"")
