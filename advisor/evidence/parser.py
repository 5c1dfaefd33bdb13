"""Parse: normalised lines -> a Timeline, in one streaming pass with bounded state.

Every line first meets cheap substring tests; only a line that may matter reaches a regex.
The parser keeps the line rings and a window of lines around the final failure, and hands each
line to the checks its words call for: progress and phase markers (progress.py), the run's facts
(run_facts.py), failure signals (signals.py); the phrases they look for are in phrases.py. The
window: the first failure signal after the last real progress is pinned with the lines before and
after it, so a cascade of thousands of NCCL lines from other ranks cannot push it out.
"""

from bisect import bisect_right
from collections import deque
from itertools import accumulate, islice

from . import signals as sig
from .anchors import automaton
from .phrases import (ALL, ARG, COMMAND, COMMAND_WORDS, FACT, FLAG, FRAMEWORK, FRAMEWORK_HEAD, FRAMEWORKS, MARKER,
                      MEMORY, PROGRESS, SCRIPT, SIGNAL, zero_of_frames)
from .progress import Progress
from .run_facts import FactReader
from .timeline import Signal, Timeline

RING = 3000            # the log's last lines, kept for incomplete pastes and late evidence
PIN_BEFORE = 300       # lines kept before the first signal of the final failure
PIN_AFTER = 600        # and after it
RECOVERED = 5          # steps of progress after a failure that show the run got past it (rank 0 can
                       # still draw a step or two while another rank is dying)
MAX_SIGNALS = 400

BATCH = 256            # lines whose text is searched at once (feed_batch)
# The words each per-line check tests a line for first, each a part of every literal that check's
# tests start with (tests/test_fastpath.py checks it): a line holding none of a check's words cannot
# change what that check keeps, so a batch's one automaton scan tells each line which checks to run,
# and a line no check wants changes nothing but the line count and the rings.
_PROGRESS_WORDS = ("%", "{'", "oss", "Epoch")
_MARKER_WORDS = ("*****", "aving", "saved", "Failed to clone", "oad", "nstantiating", "uantizing", "zero.init", "trainable params",
                 "model checkpoint weights were used", "Gradient checkpointing enabled", "Fine-tuning method",
                 "DeepSpeed", "ZeRO", "optimizer states", "__init__]", "model parallel", "environment is initialized", "-of-0", "Starting trainer", "Unsloth - 2x faster",
                 "raining", "use_cache", "Batch generation can be very slow", "eval", "alidation", "testing")
# (a launcher's flags are asked for by ARG's own literals, `--model`…: see _words)
_FACT_WORDS = (" = ", "trainable params", "Process rank", "......", "ZeRO", "Gradient checkpointing enabled",
               "does not support gradient checkpointing", "Fine-tuning method", "uantizing", "-bit", "raining",
               "vanilla attention", "Pure bf16", "distributed tasks at", "GPU type:", "GPU name", "oading",
               "name_or_path", "nstantiating", "expandable_segments:True")
_SCRIPT_WORDS = (".py", ".sh")
_MEMORY_WORDS = ("emory",)


class Parser:
    def __init__(self, source="<stdin>"):
        self.t = Timeline(source=source)
        self.f = self.t.facts
        self.ring = deque(maxlen=RING)
        self.pinned = None              # lines around the final failure's first signal
        self.pin_left = 0
        self.pin_line = None
        self.ranks = set()
        self.progress = Progress(self.t)
        self.facts = FactReader(self.t, self.progress)

    def feed_batch(self, lines):
        """Feed lines, finding the words every check starts with in one scan of their joined text
        instead of line by line: each line then runs only the checks whose words it holds, with the
        same result (every word and pattern stays within a line, so a line holds a word exactly when
        the joined text has one there)."""
        text = "\n".join(ln.text for ln in lines)
        words = _words()
        if words is None or text.count("\n") != len(lines) - 1:     # no automaton; a line holding a newline
            for ln in lines:
                self.feed(ln)
            return
        scanner, bits = words
        ends = list(accumulate(len(ln.text) + 1 for ln in lines))
        masks = {}
        for w, start, _ in scanner.find_matches_as_indexes(text, overlapping=True):
            i = bisect_right(ends, start)
            masks[i] = masks.get(i, 0) | bits[w]
        start = 0
        if not self._command_goes_on():
            for i in sorted(masks):                   # the lines no check wants go by in runs, kept in bulk
                if i > start:
                    self._keep_all(lines[start:i])
                self._feed_masked(lines[i], masks[i])
                start = i + 1
                if self._command_goes_on():
                    break
            else:
                if start < len(lines):
                    self._keep_all(lines[start:])
                return
        for i in range(start, len(lines)):            # a command split with backslashes: every line goes on
            self._feed_masked(lines[i], masks.get(i, 0))

    def _command_goes_on(self):
        command = self.t.command
        return command is not None and command.endswith("\\")

    def _feed_masked(self, line, mask):
        """One line, running the checks its words call for."""
        if line.no > FRAMEWORK_HEAD:
            mask &= ~(FRAMEWORK | COMMAND)
        elif self.t.command is not None:              # the first command counts, or goes on when split
            mask = ALL if self._command_goes_on() else mask & ~COMMAND
        if mask & FRAMEWORK and self.f.framework == "llamafactory":
            mask &= ~FRAMEWORK
        if mask:
            self._feed(line, mask)
        else:
            self._keep(line)

    def _keep_all(self, lines):
        """_keep for a run of lines, in bulk."""
        self.t.line_count = lines[-1].no
        self.ring.extend(lines)
        if self.pinned is not None and self.pin_left > 0:
            taken = lines[:self.pin_left]
            self.pinned.extend(taken)
            self.pin_left -= len(taken)
        ranks = {ln.rank for ln in lines}
        ranks.discard(None)
        self.ranks |= ranks

    def _keep(self, line):
        """What every line does: count, the rings, its rank."""
        self.t.line_count = line.no
        self.ring.append(line)
        if self.pinned is not None and self.pin_left > 0:
            self.pinned.append(line)
            self.pin_left -= 1
        if line.rank is not None:
            self.ranks.add(line.rank)

    def feed(self, line):
        """One line, every check run."""
        self._feed(line, ALL)

    def _feed(self, line, mask):
        self._keep(line)
        text = line.text
        if not text:
            return
        if mask & PROGRESS:                       # bars, logged dicts, loss lines
            self.progress.on_progress(line, text)
        if mask & MARKER:
            self.progress.on_marker(line, text)
        if mask & (FACT | FRAMEWORK | COMMAND):
            self.facts.on_facts(line, text, mask)
        elif mask & SCRIPT:
            self.facts.on_script(line, text)
        if mask & MEMORY and ("GiB" in text or "GB" in text or "MB" in text):
            self.facts.on_memory(line, text)
        kind = sig.classify(text) if mask & SIGNAL else None
        if kind:
            self._signal(line, *kind)

    def finish(self):
        t = self.t
        t.markers = list(self.progress.markers)
        t.ranks = sorted(self.ranks)
        if self.pinned is None:
            t.context = self.progress.context()
        # the lines around the final failure's first signal, then the log's last lines
        window = list(self.pinned or [])
        seen = {id(ln) for ln in window}
        window += [ln for ln in self.ring if id(ln) not in seen]
        t.window = sorted(window, key=lambda ln: ln.no)
        if self.f.framework != "llamafactory":     # the frames and logger names around the failure
            self.facts.frameworks_of([ln.text for ln in t.window
                                 if "File" in ln.text or "│" in ln.text or "[" in ln.text[:1]])
        if self.f.deepspeed is None:          # the ZeRO stage the frames ran under, when no line said
            self.f.deepspeed = zero_of_frames(t.window)
        if self.f.num_gpus is None and len(self.ranks) > 1:
            self.f.num_gpus = max(self.ranks) + 1
        if self.f.step is None:
            self.f.step = t.context.step
        if self.f.total_steps is None:
            self.f.total_steps = t.context.total_steps
        return t

    def _signal(self, line, kind, dialect):
        t = self.t
        if self.pinned is None or self.progress.since_failure >= RECOVERED:
            if self.pinned is not None:
                t.earlier_failures += 1
                t.signals = []
            self.pinned = list(islice(reversed(self.ring), PIN_BEFORE))[::-1]   # not a copy of the whole ring
            self.pin_left = PIN_AFTER
            self.pin_line = line.no
            self.progress.failing, self.progress.since_failure = True, 0
            t.context = self.progress.context()
        if len(t.signals) < MAX_SIGNALS:
            t.signals.append(Signal(kind=kind, dialect=dialect, line=line.no, text=line.text[:2000], rank=line.rank))


_WORDS = []


def _words():
    """(automaton, bits): one Aho-Corasick automaton over every check's words, reporting overlapping
    matches, and for each word the bits of the checks that want it; None without the library."""
    if not _WORDS:
        from .anchors import minimal, required
        groups = [(PROGRESS, _PROGRESS_WORDS), (MARKER, _MARKER_WORDS), (FACT, _FACT_WORDS),
                  (FACT | FLAG, minimal(required(ARG.pattern))),      # a line of dashes holds no flag
                  (SCRIPT, _SCRIPT_WORDS), (MEMORY, _MEMORY_WORDS), (SIGNAL, sig.KEYS),
                  (FRAMEWORK, tuple(n for n, _ in FRAMEWORKS)), (COMMAND, COMMAND_WORDS)]
        bits = {}
        for bit, words in groups:
            for w in words:
                bits[w] = bits.get(w, 0) | bit
        found = automaton(bits)
        _WORDS.append(found and (found, list(bits.values())))
    return _WORDS[0]


def parse(lines, source="<stdin>"):
    p = Parser(source)
    lines = iter(lines)
    for batch in iter(lambda: list(islice(lines, BATCH)), []):
        p.feed_batch(batch)
    return p.finish()
