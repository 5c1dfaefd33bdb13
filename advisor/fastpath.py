"""How much of the log to read: all of it for now (see issue on speed)."""

from .parser import parse
from .reader import InputError, logical_lines


def timeline_of(stream, source):
    timeline = parse(logical_lines(stream), source)
    if timeline.line_count == 0:
        raise InputError(f"{source}: the log is empty")
    return timeline
