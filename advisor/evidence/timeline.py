"""Typed events of a run, in log order: what the parser hands to the diagnosis (its Facts: facts.py)."""

from dataclasses import dataclass, field
from typing import List, Optional

from ..core.facts import Facts
from ..core.record import Record


@dataclass
class Marker(Record):
    """A phase marker: loading, setup, training start, evaluation, save, end of training."""
    kind: str            # load | load_done | setup | prep | train_start | eval_start | eval_done | save | train_done | predict
    line: int
    text: str
    step: Optional[int] = None           # the training step the run was at (None: it had not stepped)


@dataclass
class Frame(Record):
    """One traceback frame; `line` is the log line, not the source line number."""
    path: str
    func: str
    line: int
    source: str = ""
    rank: Optional[int] = None


@dataclass
class Signal(Record):
    """A line that reports a failure (see signals.py for the kinds)."""
    kind: str
    dialect: str
    line: int
    text: str
    rank: Optional[int] = None


@dataclass
class Context(Record):
    """The state of the run when its final failure began."""
    last_marker: Optional[Marker] = None
    step: Optional[int] = None              # training steps completed (from the progress bar)
    total_steps: Optional[int] = None
    losses_logged: int = 0
    in_eval: bool = False
    eval_step: Optional[int] = None         # the evaluation bar's batches done, and of how many
    eval_total: Optional[int] = None


@dataclass
class Timeline(Record):
    """Everything the diagnosis needs, bounded in size whatever the log's length."""
    source: str = "<stdin>"
    line_count: int = 0
    facts: Facts = field(default_factory=Facts)
    markers: List[Marker] = field(default_factory=list)
    signals: List[Signal] = field(default_factory=list)      # the final failure's signals
    earlier_failures: int = 0                                # failures the run recovered from
    context: Context = field(default_factory=Context)        # at the final failure (or the end)
    ranks: List[int] = field(default_factory=list)
    window: list = field(default_factory=list)               # lines.Line objects around the failure
    fact_lines: dict = field(default_factory=dict)           # fact name -> log line it came from
    exact_lines: Optional[int] = None                        # big files: line numbers past this are estimates
    memory_series: list = field(default_factory=list)        # (log line, GiB) of per-step memory records, the last 64
    command: Optional[str] = None                            # the launch command the log echoes (first lines)
    command_line: Optional[int] = None
