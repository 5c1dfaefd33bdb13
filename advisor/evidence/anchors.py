"""Anchors: literal byte strings at least one of which every failure signal or phase marker contains.

The big-file and stream paths look for these with C-speed searches instead of parsing every line,
so they are derived from the pattern tables themselves (signals.PATTERNS, phrases.MARKER_PHRASES):
a pattern added there brings its own anchor, and a pattern without a literal of MIN characters in
every alternative is refused by the tests (it could never be found without parsing every line).
"""

import functools
import re

try:
    from re import _constants as _c, _parser as _sre
except ImportError:          # Python < 3.11
    import sre_constants as _c
    import sre_parse as _sre

MIN = 3
_TRANSPARENT = (_c.AT, _c.ASSERT, _c.ASSERT_NOT)    # zero-width: a literal run goes on across them


def required(pattern, shortest=MIN):
    """Literals of `shortest` characters or more, one of which every match of `pattern` contains
    (the longest choice), or None."""
    return _seq(_sre.parse(pattern), shortest)


def _branch(alternatives, shortest):
    out = []
    for alt in alternatives:
        lits = _seq(alt, shortest)
        if lits is None:
            return None
        out += lits
    return out


def _seq(items, shortest):
    best, run = [], ""

    def better(cands):
        nonlocal best
        if cands and (not best or min(map(len, cands)) > min(map(len, best))):
            best = cands
    for op, av in items:
        if op is _c.LITERAL:
            run += chr(av)
            continue
        if op in _TRANSPARENT:
            continue
        if op is _c.MAX_REPEAT and av[0] == av[1] and len(av[2]) == 1 and av[2][0][0] is _c.LITERAL:
            run += chr(av[2][0][1]) * av[0]          # \*{5}
            continue
        words = _words(av[-1]) if op is _c.SUBPATTERN else _words([(op, av)]) if op is _c.BRANCH else None
        if words and run:                            # "NCCL (?:error|WARN)": "NCCL error", "NCCL WARN"
            better([run + w for w in words])
            run = ""
            continue
        better([run] if len(run) >= shortest else [])
        run = ""
        if op is _c.SUBPATTERN:
            better(_seq(av[-1], shortest))
        elif op is _c.BRANCH:
            better(_branch(av[1], shortest))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and av[0] >= 1:
            better(_seq(av[2], shortest))
    better([run] if len(run) >= shortest else [])
    return best or None


def _words(items):
    """The alternatives of a group of plain words, else None."""
    if len(items) != 1 or items[0][0] is not _c.BRANCH:
        return None
    alts = items[0][1][1]
    if not all(alt and all(op is _c.LITERAL for op, _ in alt) for alt in alts):
        return None
    return ["".join(chr(av) for _, av in alt) for alt in alts]


def minimal(literals):
    """Drop a literal that holds another one: finding the shorter finds it too."""
    lits = sorted(set(literals), key=lambda lit: (len(lit), lit))
    return tuple(lit for i, lit in enumerate(lits) if not any(o in lit for o in lits[:i]))


class Gated:
    """A compiled pattern whose search first asks `in` for one of its required literals: C's
    substring search skips a 20 KB text in microseconds, where a pattern that starts with \\b or a
    repeat makes re try every position."""

    def __init__(self, pattern):
        self.rx = re.compile(pattern)
        lits = None if self.rx.flags & re.IGNORECASE else required(pattern)
        self.literals = tuple(minimal(lits)) if lits else None

    def search(self, text):
        if self.literals is None:
            return self.rx.search(text)
        for lit in self.literals:        # a loop, not any(genexpr): this runs on many lines
            if lit in text:
                return self.rx.search(text)
        return None


def automaton(words, of_bytes=False, leftmost_first=False):
    """An Aho-Corasick automaton over `words` (str, or bytes), or None without the library. Built as
    a DFA: for a few hundred short words it builds in milliseconds and searches a 20 KB report ~1.7x
    faster than the default NFA."""
    try:
        import ahocorasick_rs as ac
    except ImportError:
        return None
    make = ac.BytesAhoCorasick if of_bytes else ac.AhoCorasick
    kind = ac.MatchKind.LeftmostFirst if leftmost_first else ac.MatchKind.Standard
    return make(list(words), matchkind=kind, implementation=ac.Implementation.DFA)


# re's own cache holds 512 patterns; the frame table alone compiles ~1000, so tables that search
# per call keep theirs here
compiled = functools.lru_cache(maxsize=None)(re.compile)


@functools.lru_cache(maxsize=None)
def gated(pattern):
    """The Gated form of `pattern`, made once."""
    return Gated(pattern)
