"""Edit a JSON document's text in place: a member's value replaced, or a missing member added to
the innermost object that exists, every other byte as the user wrote it.

Re-serialising the document would respell what no change touched (`2.0e-5` becomes `2e-05`, `1E-2`
becomes `0.01`, a one-line array is spread over lines), so a small scanner finds where each value
lies and only those bytes change. Arrays are values as a whole: the patcher sets no list element.
"""

import json
import re
from json.decoder import scanstring

_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def _scan(text):
    """({path: (start, end)} of every value, {path: (open, close, keys, where each key starts)} of
    every object)."""
    # raises ValueError (or IndexError) on text that is not one JSON document
    values, objects = {}, {}

    def skip(i):
        return _WS.match(text, i).end()

    def value(i, path):
        i = skip(i)
        start = i
        if text[i:i + 1] != "{":
            _, end = _DECODER.raw_decode(text, i)
            values[path] = (start, end)
            return end
        keys, at = [], []
        i = skip(i + 1)
        while text[i] != "}":
            if keys:
                if text[i] != ",":
                    raise ValueError(f"expected ',' at {i}")
                i = skip(i + 1)
            if text[i] != '"':
                raise ValueError(f"expected a key at {i}")
            at.append(i)
            key, i = scanstring(text, i + 1)
            i = skip(i)
            if text[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            i = skip(value(i + 1, path + (key,)))
            keys.append(key)
        objects[path] = (start, i, keys, at)
        values[path] = (start, i + 1)
        return i + 1

    if text[skip(value(0, ())):]:
        raise ValueError("text after the document")
    return values, objects


def edited(text, changes):
    """`text` with each {dotted key: new value} set in place, or None when the text is not one JSON
    object or a change would go through a value that is not an object."""
    for key, new in changes.items():
        try:
            values, objects = _scan(text)
        except (ValueError, IndexError):
            return None
        if () not in objects:
            return None
        path = (key,) if (key,) in values else tuple(key.split("."))
        if path in values:                            # there already: its value's bytes only
            start, end = values[path]
            text = text[:start] + json.dumps(new, ensure_ascii=False) + text[end:]
            continue
        have = max((p for p in objects if path[:len(p)] == p), key=len)
        if path[:len(have) + 1] in values:            # the way down holds a number, a list...
            return None
        text = _with_member(text, objects[have], values, have, path[len(have):], new)
    return text


def _with_member(text, obj, values, where, rest, new):
    """Add `rest[0]` (holding `rest[1:]` ... `new`) as the last member of the object at `where`."""
    value = new
    for k in reversed(rest[1:]):
        value = {k: value}
    open_, close, keys, at = obj
    newline = "\r\n" if "\r\n" in text else "\n"
    sep = re.search(r'"(\s*:\s*)', text)
    sep = sep.group(1) if sep else ": "
    after = values[where + (keys[-1],)][1] if keys else open_ + 1
    if newline not in text[open_:close]:             # a one-line object stays on one line
        member = f'{json.dumps(rest[0], ensure_ascii=False)}{sep}{json.dumps(value, ensure_ascii=False)}'
        return text[:after] + (", " if keys else "") + member + text[after:]
    line_start = text.rfind("\n", 0, open_) + 1
    outer = len(text[line_start:open_]) - len(text[line_start:open_].lstrip(" "))
    step = _unit(text)
    # the members' own indent, else one step in from the object's line
    indent = at[0] - (text.rfind("\n", 0, at[0]) + 1) if keys else outer + step
    body = json.dumps(value, indent=step, ensure_ascii=False).replace("\n", newline + " " * indent)
    member = f'{" " * indent}{json.dumps(rest[0], ensure_ascii=False)}{sep}{body}'
    if keys:
        return text[:after] + "," + newline + member + text[after:]
    return text[:after] + newline + member + newline + " " * outer + text[after:].lstrip(" \t\r\n")


def _unit(text):
    """The document's indent step: the first indented line's indent."""
    m = re.search(r"\n( +)\S", text)
    return len(m.group(1)) if m else 2
