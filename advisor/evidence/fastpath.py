"""How much of the log to read. Small logs and pipes: all of it, streamed. Big files: windows.

For a seekable file above BIG bytes only the spans windows.py chooses are parsed, read by position
(`os.pread`), so memory stays bounded whatever the file's size; a pipe is scanned as it passes
(stream.py); anything else is parsed whole.
"""

import os
import stat

from ..read.reader import InputError, sniff_encoding
from .stream import timeline_of_stream
from .windows import File, parse_all, parse_windows

BIG = 16 << 20
HEAD = 256 << 10
REGION_MAX = 4 << 20
WINDOW = 128 << 10


def timeline_of(stream, source, big=BIG, head=HEAD, region_max=REGION_MAX, window=WINDOW):
    """Parse a binary stream into a Timeline, choosing the strategy by what the stream allows."""
    fileno = _fileno(stream)
    size = os.fstat(fileno).st_size if fileno is not None else 0
    if fileno is None:
        timeline = timeline_of_stream(stream, source, big, head, region_max, window)
    elif size <= big:
        timeline = parse_all(stream, source)
    else:
        data = File(fileno, size)
        if sniff_encoding(data[0:65536]).startswith("utf-16"):
            timeline = parse_all(stream, source)
        else:
            timeline = parse_windows(data, source, head, region_max, window)
    if timeline.line_count == 0:
        raise InputError(f"{source}: the log is empty")
    return timeline


def _fileno(stream):
    """The descriptor of a regular file (seekable, positional reads); None for pipes, terminals and in-memory data."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None
