"""Read: bytes from a file or stdin -> normalised logical lines, streamed in bounded memory.

Normalisation, in order: decode (UTF-8, GB18030/GBK, UTF-16 with BOM; undecodable bytes become
U+FFFD, never an exception), split lines, resolve carriage-return redraws (tqdm writes every bar
state as '\\r' + bar, the last one wins), strip ANSI colour codes, strip paste line numbers,
`host:` and `[rankN]:` / `[default0]:` / Ray `(Actor pid=N)` prefixes (the rank is kept), and re-join
lines that a terminal or web page hard-wrapped at a fixed width. Every logical line keeps the
number of the physical line it started on, so evidence can point back into the user's file.
"""

import codecs
import errno
import os
import re
import stat
import sys

CHUNK = 1 << 20
MAX_LINE_HEAD = 16 * 1024    # an overlong line keeps its head and its tail: a 1 GB single line of
MAX_LINE_TAIL = 48 * 1024    # '\r' progress redraws must not grow memory, and its end is what counts
WRAP_SAMPLE = 2000           # lines looked at to detect a fixed wrap width


class InputError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""


class Line:
    __slots__ = ("no", "text", "rank")

    def __init__(self, no, text, rank=None):
        self.no, self.text, self.rank = no, text, rank

    def __repr__(self):
        return f"Line({self.no}, {self.text!r}, rank={self.rank})"


_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")       # what a terminal does not show
_ANSI = re.compile(_ESCAPE.pattern + r"|(?<![\w\]])\[[0-9;]{1,8}m")       # and the codes a paste lost the ESC of
_PASTE_NO = re.compile(r"^\[\d{1,7}\] ?")
# bounded: no backtracking; Ascend's error codes ("EL0004: …", "EE1001: …") are no host names
_HOST = re.compile(r"^(?![A-Z]{2}\d{4}:)(?:(?:\d{1,3}\.){3}\d{1,3}|[A-Za-z][\w-]{0,62}\d[\w-]{0,62}): (?=\S)")
_RANK = re.compile(r"^\[(?:rank(\d+)|[A-Za-z_]*?(\d+))\]:\s?")
_RAY = re.compile(r"^\((?:[\w.]+) pid=\d+(?:, ip=[\d.]+)?\) ?")
# the start that any of the four prefixes needs: one match tells most lines they have none
_PREFIXES = r"\[\d{1,7}\]|\[(?:rank\d+|[A-Za-z_]*?\d+)\]:|\([\w.]+ pid=\d|" + _HOST.pattern[1:]
_ANY_PREFIX = re.compile(_PREFIXES)
_PREFIX_AFTER_NEWLINE = re.compile("\n(?:" + _PREFIXES + ")")     # a literal first: re skips to each newline
BAR_HINT = re.compile(r"%\||(?<!\d)\d+/\d+ \[|it/s|s/it")


class Snapshot:
    """A regular file read up to the size it had when opened. A log that is still being written (a run
    in progress, `tee`) ends where it stood: reading always ends, whatever the writer does."""

    def __init__(self, fh, size):
        self._fh, self._left = fh, size

    def read(self, n=-1):
        if self._left <= 0:
            return b""
        data = self._fh.read(self._left if n is None or n < 0 else min(n, self._left))
        self._left -= len(data)
        return data

    def __getattr__(self, name):          # fileno, close, name...: the file's own
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


def open_source(path):
    """Return (display name, binary file object) for a path or '-' (stdin)."""
    if path in (None, "-"):
        return "<stdin>", sys.stdin.buffer
    try:
        fh = open(path, "rb")
        st = os.fstat(fh.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            return path, Snapshot(fh, st.st_size)
        return path, fh
    except OSError as e:
        raise input_error(path, e) from None


def input_error(path, error, what="file"):
    """The one line a user sees when their path cannot be read."""
    if isinstance(error, IsADirectoryError):
        return InputError(f"{path}: is a directory, not a {'log file' if what == 'file' else what}")
    if isinstance(error, FileNotFoundError):
        return InputError(f"{path}: no such {what}")
    if isinstance(error, PermissionError):
        return InputError(f"{path}: permission denied")
    if getattr(error, "errno", None) == errno.ELOOP:
        return InputError(f"{path}: a symlink loop (too many levels of symbolic links)")
    return InputError(f"{path}: cannot read ({error.strerror or error})")


_NOT_CONTROL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 27 or 27 < b < 32))


def sniff_encoding(head):
    """Pick a codec from the first bytes; raise InputError for binary data."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    sample = head[:65536]
    if sample and sample.count(b"\x00") > len(sample) // 4:
        # UTF-16 without a BOM puts a NUL beside every ASCII character.
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd > len(sample) // 3 and even < len(sample) // 20:
            return "utf-16-le"
        if even > len(sample) // 3 and odd < len(sample) // 20:
            return "utf-16-be"
        # A crash often leaves a run of NUL bytes after the text (a preallocated file, a log cut by
        # a kill): judge the text without them; only a file that is mostly binary is refused.
        sample = sample.replace(b"\x00", b"")
        if len(sample) < 64:
            raise InputError("input looks like a binary file, not a text log")
    controls = len(sample.translate(None, _NOT_CONTROL))
    if sample and controls > len(sample) // 10:
        raise InputError("input looks like a binary file, not a text log")
    try:
        sample.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as e:
        if e.start >= len(sample) - 4:      # a character cut by the sample's end
            return "utf-8"
    try:
        sample.decode("gb18030")
        return "gb18030"
    except UnicodeDecodeError:
        return "utf-8"                      # mostly UTF-8 with junk: replace the junk


def _decoded_chunks(stream):
    head = stream.read(CHUNK)
    if not head:
        return
    decoder = codecs.getincrementaldecoder(sniff_encoding(head))(errors="replace")
    chunk = head
    while chunk:
        text = decoder.decode(chunk)
        yield text.replace("\x00", "") if "\x00" in text else text     # NUL runs: no text in them
        chunk = stream.read(CHUNK)
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


def physical_batches(stream):
    """Yield (lines, coloured) per decoded chunk: the physical lines the chunk completes (without
    '\\n'; an overlong one keeps only its head and tail), and whether the chunk holds any colour code
    (a chunk without one needs no stripping, line by line)."""
    limit = MAX_LINE_HEAD + MAX_LINE_TAIL
    head, tail, overflow = "", "", False        # the line still open at the chunk's end
    for text in _decoded_chunks(stream):
        coloured = "\x1b" in text or _REMNANT.search(text) is not None \
            or _REMNANT.search((tail or head)[-12:] + text[:12]) is not None    # a code cut by the chunk
        # CRLF -> LF for the whole chunk, not line by line (a '\r' cut from its '\n' by the chunk's end
        # stays behind as trailing whitespace, which resolve_redraws drops)
        parts = text.replace("\r\n", "\n").split("\n")
        if len(parts) > 2 and not overflow and len(head) + len(parts[0]) <= limit \
                and max(map(len, parts[1:-1])) <= limit:
            batch = parts[:-1]                   # the common chunk: no line to bound
            batch[0] = head + batch[0]
            head, parts = "", parts[-1:]
        else:
            batch = []
        for i, part in enumerate(parts):
            if overflow:
                tail = (tail + part)[-MAX_LINE_TAIL:]
            else:
                head += part
                if len(head) > limit:
                    head, tail, overflow = head[:MAX_LINE_HEAD], head[-MAX_LINE_TAIL:], True
            if i < len(parts) - 1:
                batch.append(head + ("\r" + tail if overflow else ""))
                head, tail, overflow = "", "", False
        yield batch, coloured
    if head or tail:
        yield [head + ("\r" + tail if overflow else "")], False


def resolve_redraws(text):
    """'bar1\\rbar2\\rbar3' -> ['bar3']; non-bar messages between redraws are kept in order."""
    text = text.rstrip("\r")
    if "\r" not in text:
        return [text]
    segs = [s for s in text.split("\r") if s.strip()]
    if not segs:
        return [""]
    return [s for s in segs[:-1] if not BAR_HINT.search(s)] + [segs[-1]]


_REMNANT = re.compile(r"\[[0-9;]{1,8}m")     # an escape code whose ESC byte a paste lost


def _shown(text):
    """What a terminal shows of a line: escape codes take no column, but a code whose ESC byte a
    paste lost is printed text (a log wrapped after such a paste wraps with it counted)."""
    return _ESCAPE.sub("", text) if "\x1b" in text else text


def strip_ansi(text):
    return _ANSI.sub("", text) if "\x1b" in text or "[" in text and _REMNANT.search(text) else text


def strip_prefixes(text):
    """Remove ANSI codes and wrapper prefixes; return (text, rank or None)."""
    return strip_wrappers(strip_ansi(text))


def strip_wrappers(text):
    """Remove paste line numbers, host and rank prefixes from an ANSI-free line; (text, rank or None)."""
    if not _ANY_PREFIX.match(text):      # most lines have none of these prefixes
        return text, None
    if text[:1] == "[" and text[1:2].isdigit():
        text = _PASTE_NO.sub("", text, count=1)
    rank = None
    for _ in range(3):
        first = text[:1]
        m = _RANK.match(text) if first == "[" and "]:" in text else None
        if m:
            if rank is None:                  # the outermost launcher prefixes every line: its rank holds
                rank = int(m.group(1) or m.group(2))
            text = text[m.end():]
            continue
        m = _RAY.match(text) if first == "(" else \
            _HOST.match(text) if first.isalnum() and ": " in text[:140] else None
        if m and not text[:m.end()].rstrip(": ").endswith(("Error", "Exception", "Warning")):
            text = text[m.end():]
            continue
        break
    return text, rank


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
        from . import parser, signals, traceback
        from .anchors import minimal, required
        for rx in signals.seam_phrases() + list(traceback.FRAME_PATTERNS) + list(parser.PROGRESS_PATTERNS):
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
    joined = "\n".join(segs)
    if _ANY_PREFIX.match(joined) is None and _PREFIX_AFTER_NEWLINE.search(joined) is None:
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
            yield from place(no, text, len(text) if text is seg else len(_shown(seg)))

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
        shown = texts if clean is _same else [_shown(raw.rstrip("\r")) for raw in held]
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
