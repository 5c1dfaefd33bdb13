"""Traceback frames in the three styles users paste: CPython, IPython/Jupyter and rich boxes."""

import re

from .timeline import Frame

_CPYTHON = re.compile(r"Fil+e \"(?P<path>[^\"]+)\", line (?P<no>\d+), in (?P<func>[\w<>.]+)")
# IPython: "File path:N, in f(", Colab's linked "[path](url) in f(", older "path in f("
_IPYTHON = re.compile(r"^(?:File (?P<path>\S+):(?P<no>\d+), in |\[(?P<link>[^\]]+\.py)\]\([^)]*\) in "
                      r"|(?P<bare>/\S+\.py) in )(?P<func>[\w.<>]+)\(")
_RICH = re.compile(r"│\s*(?P<path>[^\s│]+\.py):(?P<no>\d+) in (?P<func>\w+)")   # a path stops at the box
_BARE = re.compile(r"(?:^|\s)line (?P<no>\d+), in (?P<func>[\w<>.]+)\s*$")   # a frame cut before "File"
_CPP = re.compile(r"^frame #\d+: ")
_CONTEXT = re.compile(r"(?:-+>\s*)?\d+(?:\s|$)")      # IPython's numbered context lines (stripped)
_ARROW = re.compile(r"\s*(?:-+>|│\s*❱)\s*\d+\s(.*)")
_RICH_NAME = re.compile(r"\s*│\s*(\w+)\s*│?\s*$")
FRAME_PATTERNS = (_CPYTHON, _IPYTHON, _RICH)     # a frame header: what a wrap must not be allowed to cut unseen


def parse_frame(text):
    for rx in (_CPYTHON, _IPYTHON, _RICH, _BARE):
        m = rx.search(text)
        if m:
            g = m.groupdict()
            path = g.get("path") or g.get("link") or g.get("bare") or ""
            func = m.group("func").split(".")[-1]
            return path.replace("\\", "/"), func
    return None


def frames_of(lines):
    """All Python frames in `lines`, each with the source line that followed it."""
    texts = [ln.text for ln in lines]         # cheap substring tests first: frames are few
    hits = [parse_frame(_rich_header(texts, i) if "│" in t else t)
            if "File" in t or "line" in t or "│" in t or ".py](" in t or ".py in " in t else None
            for i, t in enumerate(texts)]
    frames = []
    for i, (ln, hit) in enumerate(zip(lines, hits)):
        if not hit:
            continue
        source = ""
        if i + 1 < len(lines) and not hits[i + 1]:
            nxt = lines[i + 1].text.strip()
            if _CONTEXT.match(nxt) or nxt[:1] == "│":
                source = _arrow_line(texts, hits, i + 1)
            elif nxt and not _CPP.match(nxt) and not set(nxt) <= set("^~ "):
                source = nxt[:300]
        frames.append(Frame(path=hit[0], func=hit[1], line=ln.no, source=source, rank=ln.rank))
    return frames


def _rich_header(texts, i):
    """A rich box's frame header, with the function name the box wrapped onto the next line
    ("│ …/bitsandbytes/nn/modules.py:268 in   │" then "│ _save_to_state_dict   │")."""
    text = texts[i]
    head = text.rstrip(" │")
    if head.endswith(" in") and i + 1 < len(texts):
        m = _RICH_NAME.match(texts[i + 1])
        if m:
            return head + " " + m.group(1)
    return text


def _arrow_line(texts, hits, start):
    """IPython and rich quote numbered lines around the one that ran, marked by an arrow
    ("--> 207  x = f()", "│ ❱ 268 │   │   x = f()   │"): that one is the frame's source, not the first
    of the context."""
    for j in range(start, min(len(texts), start + 24)):
        if hits[j]:
            break
        m = _ARROW.match(texts[j])
        if m:
            return m.group(1).strip(" │")[:300].strip()
    return ""


def decisive_frames(frames, signal_line, rank=None, boundaries=(), repeats=()):
    """The traceback that belongs to the failure at `signal_line`: frames since the previous
    traceback boundary (an earlier error line), of the same rank when ranks are known. When the
    paste put the frames after the message (a quoted error line, then the trace), take those; the
    copies of the message on the lines right below it (`repeats`: other ranks, the exception's other
    half) do not end that trace. A rank that printed no trace of its own takes the one another rank
    printed beside its message: ranks running one program fail alike."""
    if rank is not None and any(f.rank is not None for f in frames):
        own = _trace_of([f for f in frames if f.rank in (rank, None)], signal_line, boundaries, repeats)
        if own:
            return own
    return _trace_of(frames, signal_line, boundaries, repeats)


def _trace_of(frames, signal_line, boundaries, repeats):
    # an error line right above the message is its head ("RuntimeError: ACL stream synchronize
    # failed." over the runtime's "EL0004: … Failed to allocate memory"), not an earlier failure
    start = max((b for b in boundaries if b < signal_line - 1), default=0)
    before = [f for f in frames if start < f.line < signal_line]
    if before:
        return before
    last, end = signal_line, float("inf")
    for b in sorted(b for b in boundaries if b > signal_line):
        if b != last + 1 or b not in repeats:
            end = b
            break
        last = b
    return [f for f in frames if signal_line < f.line < end]
