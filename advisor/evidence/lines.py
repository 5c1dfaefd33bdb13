"""Logical lines: the reader's physical lines re-joined where a terminal or web page hard-wrapped
them at a fixed width, and split where ranks or a progress bar glued output together.

A wrap is only certain where it cut a phrase the parser knows (a frame, a signal, a progress bar),
so this is the first step of the evidence layer, not of reading. Every logical line keeps the
number of the physical line it started on, so evidence can point back into the user's file.
"""

import re

from .anchors import minimal, required
from ..read.reader import (MAX_LINE_HEAD, MAX_LINE_TAIL, may_have_prefix, physical_batches, resolve_redraws,
                           shown_text, strip_ansi, strip_wrappers)

WRAP_SAMPLE = 2000           # lines looked at to detect a fixed wrap width


class Line:
    __slots__ = ("no", "text", "rank")

    def __init__(self, no, text, rank=None):
        self.no, self.text, self.rank = no, text, rank

    def __repr__(self):
        return f"Line({self.no}, {self.text!r}, rank={self.rank})"


def detect_wrap_width(lengths):
    """A width W at which the text was hard-wrapped: many lines exactly W long, none longer."""
    long_lines = [n for n in lengths if n >= 60]
    if len(long_lines) < 3:
        return None
    width = max(long_lines)
    at_width = sum(1 for n in long_lines if n == width)
    if width <= 300 and at_width >= 3 and at_width >= len(long_lines) // 3:
        return width
    return None


# A line that starts a new record is never the continuation of a wrapped one: a line exactly as long
# as the wrap width may have ended there (a terminal cannot tell), and a message whose length is a
# multiple of the width ends in a full-width piece too (real_logs ot-008, ot-030: the OOM message
# would otherwise swallow the launcher's next line and be read as a cascade).
NEW_RECORD = re.compile(
    r"\s*(?:Traceback \(most recent call last\)|During handling of the above|The above exception|Fil+e \"|\d{1,3}%\|)"
    r"|(?:\w+\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)(?::|$)"
    r"|\[?\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d|\d\d/\d\d/\d{4} \d\d:\d\d|[IWEF]\d{4} \d\d:\d\d:\d\d"
    r"|\[?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b[\]:| ]|\[(?:rank|default)?\d+\]:|\{'\w+': ")

_SEAM_PATTERNS = []      # (pattern, the literals one of which every match holds, or None)
_SEAM_LITERALS = set()   # all those literals


def _seam_patterns():
    """The phrases the parser looks for: a wrap that cuts one of them is a wrap for certain."""
    if not _SEAM_PATTERNS:
        from . import phrases, signals, traceback
        for rx in signals.seam_phrases() + list(traceback.FRAME_PATTERNS) + list(phrases.PROGRESS_PATTERNS):
            literals = None if rx.flags & re.IGNORECASE else required(rx.pattern, shortest=1)   # a bar: "%"
            literals = minimal(literals) if literals else None
            _SEAM_PATTERNS.append((rx, frozenset(literals) if literals else None))
            _SEAM_LITERALS.update(literals or ())
    return _SEAM_PATTERNS


def seam_is_cut(a, b):
    """True when a known phrase runs from the end of `a` into `b`. A phrase that `a` already holds
    whole and `b` merely lengthens (a frame's function name, then an unindented source line) counts
    only when it takes all of `b`."""
    joint, cut = a + b, len(a)
    patterns = _seam_patterns()
    present = {lit for lit in _SEAM_LITERALS if lit in joint}
    for rx, literals in patterns:
        if literals is not None and literals.isdisjoint(present):
            continue            # no match anywhere: re would try every position to learn it
        for m in rx.finditer(joint):
            if m.start() >= cut:
                break
            if m.end() <= cut:
                continue
            whole = rx.match(a, m.start())
            if whole is None or m.end() >= len(joint.rstrip()):
                own = rx.search(b)
                if own is not None and own.end() == m.end() - cut:
                    continue        # `b` holds the phrase whole: the join only lent it a prefix
                return True
    return False


def confirmed_wrap_width(texts):
    """With too few full-width lines for statistics (one long line cut once or twice), the longest
    lines are wrap pieces when a wrap visibly cut a phrase the parser knows."""
    width = max((len(t) for t in texts), default=0)
    if not 80 <= width <= 300:
        return None
    for i, text in enumerate(texts[:-1]):
        nxt = texts[i + 1]
        if len(text) == width and nxt and not NEW_RECORD.match(nxt) \
                and (seam_is_cut(strip_wrappers(text)[0], nxt) or _chain_cut(texts, i, width)):
            return width
    return None


def _chain_cut(texts, i, width):
    """Two full-width pieces in a row going on into a shorter line that starts no record: one long
    record wrapped twice (a warning carrying an OOM message), even when no known phrase was cut.
    Lines of one natural length (table rows, identical records) start alike or end in a border."""
    if i + 2 >= len(texts) or len(texts[i + 1]) != width:
        return False
    a, b, c = texts[i], texts[i + 1], texts[i + 2]
    if not c or len(c) >= width or NEW_RECORD.match(b) or NEW_RECORD.match(c) or a[:8] == b[:8]:
        return False
    return not (a.rstrip()[-1:] in "|+" or b.rstrip()[-1:] in "|+")


def plausible_wrap(texts, width):
    """Full-width lines of a wrapped log go on in a continuation; a log whose longest lines are many
    records of one length (identical loss dicts, table rows, rank-prefixed lines) is not wrapped."""
    wrap = natural = 0
    for a, b in zip(texts, texts[1:]):
        if len(a) == width:
            if not b or NEW_RECORD.match(b) or b[:8] == a[:8]:
                natural += 1
            else:
                wrap += 1
    return wrap > natural


def _same(text):
    return text


_FRAME_END = re.compile(r"line \d+, in [\w<>.]+$")
_RANK_TAG = re.compile(r"\[rank\d+\]:")
_GLUED_RANK = re.compile(r"(?<=\S)" + _RANK_TAG.pattern)
# tqdm's closing bracket, after its rate or its postfix ("…17.85s/it, lr=1e-05, loss=0.3]"), with the
# next output glued on
_GLUED = re.compile(r"(?:/s|/it)(?:, [^\[\]\n]{0,300})?\](?=[^\s,|\]])")


def logical_lines(stream, start_no=1):
    """Yield normalised Line objects from a binary stream (logical_batches, one by one)."""
    for batch in logical_batches(stream, start_no):
        yield from batch


def logical_batches(stream, start_no=1):
    """Lists of normalised Lines, a decoded chunk's worth at a time. Output glued after a progress
    bar's closing bracket (`…it/s]Traceback`, `…examples/s]Killed`: the bar drew no newline) is a
    line of its own, with the bar's line number."""
    for batch in _physical_to_logical(stream, start_no):
        text = "\n".join([ln.text for ln in batch])
        if _glue_in(text):
            batch = [piece for line in batch for piece in _unglued(line)]
        yield batch


def _glue_in(text):
    """True when a line of `text` (lines joined by newlines) holds what _unglued splits off: one
    search for the bars, and a literal search for rank tags, each then asked what stands before it
    (a lookbehind would make re try every position)."""
    if ("/s" in text or "/it" in text) and _GLUED.search(text):
        return True
    return "[rank" in text and any(m.start() > 0 and not text[m.start() - 1].isspace() for m in _RANK_TAG.finditer(text))


def _unglued(line):
    """One logical line, split where a rank's line or a bar's output was glued onto it."""
    text = line.text
    if text.find("[rank", 1) > 0 and "]:" in text:
        # ranks writing at once glue one rank's line onto another's ("…Error: x[rank1]:   File …")
        m = _GLUED_RANK.search(text)
        if m:
            yield Line(line.no, text[:m.start()], line.rank)
            text, rank = strip_wrappers(text[m.start():])
            line = Line(line.no, text, rank)
    while "/s" in text or "/it" in text:
        m = _GLUED.search(text)
        if m is None:
            break
        yield Line(line.no, text[:m.end()], line.rank)
        text, rank = strip_wrappers(text[m.end():])
        line = Line(line.no, text, line.rank if rank is None else rank)
    yield line


def _plain_lines(first_no, segs):
    """Lines with colour stripped, no redraw and no wrap in force: each only loses its prefixes, and
    a batch where no line starts like a prefix is made in one go."""
    if not may_have_prefix("\n".join(segs)):
        return list(map(Line, range(first_no, first_no + len(segs)), segs))
    return [Line(no, *strip_wrappers(seg)) for no, seg in zip(range(first_no, first_no + len(segs)), segs)]


def _physical_to_logical(stream, start_no):
    """Lists of Lines, wraps re-joined and redraws resolved, one physical batch at a time."""
    held = []             # the first physical lines, held back until the wrap width is known
    width = None
    carry = None          # [no, pieces, rank, length] of a line that may continue on the next one
    clean = _same         # strip_ansi from the first chunk that holds a colour code on (it leaves
                          # a line without one as it is, so it is right for earlier lines too)

    def flush():
        nonlocal carry
        line, carry = Line(carry[0], "".join(carry[1]), carry[2]), None
        return line

    def emit(no, raw):
        for seg in resolve_redraws(raw):
            text = clean(seg)
            yield from place(no, text, len(text) if text is seg else len(shown_text(seg)))

    def place(no, seg, shown):
        """One segment, colour stripped, `shown` columns wide on the terminal: joined to the wrapped
        line it continues, or a line of its own."""
        nonlocal carry
        wrapped = width is not None and shown == width
        if carry is not None and (carry[3] > MAX_LINE_HEAD + MAX_LINE_TAIL or NEW_RECORD.match(seg)
                                  or seg[:2] == "  " and _FRAME_END.search(carry[1][-1])):
            # bounded like a physical line (never a quadratic join); a frame header that happens to
            # be as long as the wrap width ends there when an indented source line follows
            yield flush()
        if carry is not None:
            carry[1].append(seg)            # a continuation has no prefixes of its own
            carry[3] += len(seg)
            if not wrapped:
                yield flush()
            return
        text, rank = strip_wrappers(seg)
        if wrapped:
            carry = [no, [text], rank, len(text)]
            return
        yield Line(no, text, rank)

    def release():
        """Decide the wrap width from the held first lines (what a terminal showed: their widths
        without colour codes), then make their Lines."""
        nonlocal width
        texts = [clean(raw.rstrip("\r")) for raw in held]
        shown = texts if clean is _same else [shown_text(raw.rstrip("\r")) for raw in held]
        width = detect_wrap_width([len(t) for t in shown])
        if not (width and plausible_wrap(shown, width)):
            width = confirmed_wrap_width(shown)
        if width is None and not any("\r" in raw for raw in held):
            return _plain_lines(start_no, texts)
        out = []
        for no, raw, seg, seen in zip(range(start_no, start_no + len(held)), held, texts, shown):
            if "\r" in raw:
                out += emit(no, raw)
            elif width is None and carry is None:
                out.append(Line(no, *strip_wrappers(seg)))
            else:
                out += place(no, seg, len(seen))     # no redraw: its colour is already stripped
        return out

    no = start_no - 1
    for batch, coloured in physical_batches(stream):
        if coloured:
            clean = strip_ansi
        if held is not None:
            room = WRAP_SAMPLE - len(held)
            held += batch[:room]
            if len(held) < WRAP_SAMPLE:
                continue
            lines = release()
            no += len(held)
            held, batch = None, batch[room:]
        else:
            lines = []
        if width is None and not any("\r" in raw for raw in batch):      # no wrap: carry stays None
            lines += _plain_lines(no + 1, [clean(raw) for raw in batch])
            no += len(batch)
        else:
            for raw in batch:
                no += 1
                if width is None and carry is None and "\r" not in raw:
                    lines.append(Line(no, *strip_wrappers(clean(raw))))
                else:
                    lines += emit(no, raw)
        if lines:
            yield lines
    if held:
        yield release()
    if carry is not None:
        yield [flush()]


def read_text(text):
    """Normalise an in-memory string (tests, library use)."""
    import io
    return list(logical_lines(io.BytesIO(text.encode("utf-8"))))
