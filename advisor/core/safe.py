"""Make text from logs, file names and configs inert before it reaches a terminal, a page or a file.

A log is written by whatever ran, and a file name or a config by whoever made it: any of them may
hold escape sequences (an OSC that sets the window title or writes the clipboard), C1 controls
(U+0080-U+009F: a terminal reads U+009B as CSI and U+009D as OSC) or bidi overrides that make text
read differently from what it is. Every output format runs its finished text through one of these
functions, so no renderer has to remember which of its strings came from outside.

Controls are replaced visibly (`\\x1b`, `\\u202e`), never dropped: a reader of the report sees that
something was there. JSON keeps the exact data (a `\\u009b` escape is the same string to a parser).
"""

import re

# C0 except tab and newline, DEL, C1, lone surrogates (undecodable bytes), bidi embeddings, overrides,
# isolates and marks. One character class: a single pass, never "strip once" (stripping ESC [ 0 m
# from ESC ESC [ 0 m ] 0 ; leaves a working ESC ] behind; replacing visibly cannot build a new one).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")
_UNSAFE_NAME = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")      # a name: \t and \n too
_OWN_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _visible(m):
    ch = m.group(0)
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def inert(text):
    """Text for a terminal, markdown or HTML: every control but tab and newline shown as an escape.
    CRLF becomes LF first (a config's line ending is not a control worth showing)."""
    if not text:
        return text
    text = text.replace("\r\n", "\n")
    return _UNSAFE.sub(_visible, text)


def inert_name(name):
    """A file name or one-line value: newlines and tabs escaped too, so it cannot split a table row."""
    return _UNSAFE_NAME.sub(_visible, str(name))


def inert_coloured(text):
    """`inert` for a report that holds its own colour codes: `\\x1b[..m` stays, any other ESC shows.
    The renderer escapes outside text before colouring it (see render/text.py), so every SGR code
    left here is the renderer's own."""
    parts = _OWN_SGR.split(text)
    codes = _OWN_SGR.findall(text)
    out = [inert(parts[0])]
    for code, part in zip(codes, parts[1:]):
        out += [code, inert(part)]
    return "".join(out)


_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\ud800-\udfff{_BIDI}]")


def inert_json(text):
    """A JSON document with C1, DEL and bidi characters written as \\u escapes: the same data to a
    parser, inert on a terminal (json.dumps already escapes C0). A lone surrogate (a file name's
    byte that is not UTF-8) becomes an escape too, never a raw byte such as 0x9b (CSI)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


# ---- markdown -----------------------------------------------------------------------------------
def md_fence(body, info=""):
    """A fenced block that no content can close: the fence is longer than any backtick run inside."""
    runs = [len(r) for r in re.findall(r"`+", body)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence + info, body.rstrip("\n"), fence] if body.strip("\n") else [fence + info, fence]


def md_code(text):
    """An inline code span around any text: delimiters longer than the longest backtick run, padded
    by a space when the text starts or ends with a backtick (CommonMark §6.1)."""
    text = inert_name(text)
    runs = [len(r) for r in re.findall(r"`+", text)]
    tick = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{tick}{pad}{text}{pad}{tick}"


# What can start markup inside a line: links and images ([ ]), HTML and autolinks (< >), entities
# (&#x202e; would render a bidi override), code spans, emphasis, strikethrough, table cells. An
# underscore inside a word is no emphasis in GFM (reduce_batch stays readable).
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md_text(text):
    """Outside text in running markdown, backslash-escaped where it could start markup: a value
    cannot open a link, an image, an HTML tag or a table cell."""
    return _MD_SPECIAL.sub(r"\\\1", inert_name(text))


def inert_tree(value):
    """A copy of a record (a Diagnosis), list or dict with every string in it made inert: the
    renderers can then add their own markup and colour codes around it."""
    import dataclasses
    if isinstance(value, str):
        return inert(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: inert_tree(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, list):
        return [inert_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(inert_tree(v) for v in value)
    if isinstance(value, dict):
        return {inert_tree(k): inert_tree(v) for k, v in value.items()}
    return value
