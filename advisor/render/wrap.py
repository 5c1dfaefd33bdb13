"""Lines that fit the reader's terminal: its width ($COLUMNS, else the terminal's, else 100 when the
report goes to a file or a pipe), measured in columns (a CJK character takes two)."""

import os
import shutil
import sys
import unicodedata

_NO_BREAK_BEFORE = set("，。：；、！？）》」』】…—")   # Chinese punctuation stays with what it closes
DEFAULT = 100          # not a terminal: a width that reads well in a file, an issue or a pager
MINIMUM = 40


def report_width(stream=None):
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) >= MINIMUM:
        return int(env)
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return max(MINIMUM, shutil.get_terminal_size((DEFAULT, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    return DEFAULT


def _cols(ch):
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def columns(text):
    return sum(map(_cols, text))


def wrap(line, width):
    """`line` cut into lines of at most `width` columns, at spaces where it has them (anywhere between
    CJK characters); continuation lines keep the line's indent and two spaces more."""
    if columns(line) <= width:
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    rest = " " * (indent + 2)
    out, cur, cur_w, word, word_w = [], "", 0, "", 0

    def flush_word():
        nonlocal cur, cur_w, word, word_w
        if cur_w + word_w > width and cur.strip():
            out.append(cur.rstrip())
            cur, cur_w = rest, len(rest)
            word = word.lstrip(" ")
            word_w = columns(word)
        cur += word
        cur_w += word_w
        word, word_w = "", 0

    prev = ""
    for ch in line:
        w = _cols(ch)
        # a break may come before a space or a wide character, never before a closing mark, and
        # after a closing mark (a key may follow it without a space)
        if ch == " " or (w == 2 or prev in _NO_BREAK_BEFORE) and ch not in _NO_BREAK_BEFORE:
            flush_word()
        word += ch
        word_w += w
        prev = ch
    flush_word()
    if cur.strip():
        out.append(cur.rstrip())
    return out


def clip(line, width):
    """`line` cut to `width` columns with an ellipsis: a quote of the log stays one line, and the log
    itself holds the rest."""
    if columns(line) <= width:
        return line
    out, used = "", 0
    for ch in line:
        w = _cols(ch)
        if used + w > width - 1:
            break
        out += ch
        used += w
    return out + "…"


def wrap_command(line, width):
    """A shell command cut into lines that end in ` \\` (the shell joins them back), at spaces outside
    quotes only: pasted, it runs as the one line it was."""
    if columns(line) <= width:
        return [line]
    cuts, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " " and i and line[i - 1] != "\\":
            cuts.append(i)
    out, start, last = [], 0, None
    indent = "    "
    for cut in cuts + [len(line)]:
        head = (indent if out else "") + line[start:cut]
        if columns(head) + 2 > width and last is not None:
            out.append((indent if out else "") + line[start:last] + " \\")
            start = last + 1
        last = cut
    out.append((indent if out else "") + line[start:])
    return out
