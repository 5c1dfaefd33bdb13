"""Read: bytes from a file or stdin -> physical lines of text, streamed in bounded memory.

Decode (UTF-8, GB18030/GBK, UTF-16 with BOM; undecodable bytes become U+FFFD, never an exception),
split lines (an overlong one keeps its head and tail), and the per-line clean-ups that need no
knowledge of what a log says: carriage-return redraws (tqdm writes every bar state as '\\r' + bar,
the last one wins), ANSI colour codes, paste line numbers, `host:` and `[rankN]:` / `[default0]:` /
Ray `(Actor pid=N)` prefixes (the rank is kept). Re-joining lines a terminal hard-wrapped needs the
phrases the parser knows, so it is the evidence layer's first step (evidence/lines.py).
"""

import codecs
import errno
import io
import os
import re
import stat
import sys

CHUNK = 1 << 20
MAX_LINE_HEAD = 16 * 1024    # an overlong line keeps its head and its tail: a 1 GB single line of
MAX_LINE_TAIL = 48 * 1024    # '\r' progress redraws must not grow memory, and its end is what counts


class InputError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""


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


TERMINAL_MAX = 64 << 20      # what a paste on a terminal may hold (bounded: nobody pastes more)
PASTE_PROMPT = ("oom-doctor: paste the log, then press Ctrl-D on an empty line "
                "(Ctrl-Z then Enter on Windows)")


def open_source(path):
    """Return (display name, binary file object) for a path or '-' (stdin)."""
    if path in (None, "-"):
        if _is_terminal(sys.stdin):
            return "<stdin>", io.BytesIO(read_terminal(sys.stdin.fileno()))
        return "<stdin>", sys.stdin.buffer
    try:
        fh = open(path, "rb")
        st = os.fstat(fh.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            return path, Snapshot(fh, st.st_size)
        return path, fh
    except OSError as e:
        raise input_error(path, e) from None


def _is_terminal(stream):
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def read_terminal(fd, prompt=PASTE_PROMPT):
    """A paste on a terminal, read up to the first end-of-file: Ctrl-D on an empty line makes read()
    return nothing once, and a buffered reader asked for more would wait for another one (a paste
    needed four). Read straight from the descriptor instead, after a prompt on stderr."""
    if prompt:
        print(prompt, file=sys.stderr, flush=True)
    parts, size = [], 0
    while size < TERMINAL_MAX:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk or chunk in (b"\x1a\r\n", b"\x1a\n"):      # end of file; Ctrl-Z Enter on Windows
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


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


def shown_text(text):
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


def may_have_prefix(joined):
    """Whether any line of `joined` (lines joined by newlines) may start with a wrapper prefix."""
    return _ANY_PREFIX.match(joined) is not None or _PREFIX_AFTER_NEWLINE.search(joined) is not None
