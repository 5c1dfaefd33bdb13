"""The library entry point: a log (path, '-', bytes or text) -> a complete Diagnosis.

read -> evidence -> diagnosis -> memory -> plans, chained here; each stage is importable on its own.
May import every stage below render; render and triage sit above it.
"""

import io
import sys

from ..read.config import load_config
from ..diagnosis.diagnose import diagnose_timeline
from ..read.reader import open_source


def diagnose_path(path, config_path=None, lang="en", gpu=None, model=None, params=None, with_plan=True, stated=None):
    name, stream = open_source(path)
    try:
        return diagnose_stream(stream, name, config_path, lang, gpu, model, params, with_plan, stated=stated)
    finally:
        if stream is not getattr(sys.stdin, "buffer", None):
            stream.close()


def diagnose_text(text, config_path=None, lang="en", source="<text>", **kw):
    data = text.encode("utf-8") if isinstance(text, str) else text
    return diagnose_bytes(data, source, config_path, lang, **kw)


def diagnose_bytes(data, source="<bytes>", config_path=None, lang="en", gpu=None, model=None, params=None,
                   with_plan=True, adjust=None):
    """A log already in memory (a batch worker's item, an archive member): the bytes are scanned and
    parsed in place, by the same path as a pipe (small: whole; big: the windows around the anchors)."""
    return diagnose_stream(io.BytesIO(data), source, config_path, lang, gpu, model, params, with_plan, adjust)


def diagnose_stream(stream, source, config_path=None, lang="en", gpu=None, model=None, params=None, with_plan=True,
                    adjust=None, stated=None):
    """`stated`: facts the user gave on the command line (method, seq_len, batch): they beat what the
    log and the config say, and what the budget would otherwise assume."""
    from ..read.memsnap import is_snapshot_head
    if is_snapshot_head(_peek(stream)):        # told by content: a pickled PyTorch memory snapshot
        from .memsnap_diag import diagnose_snapshot
        return diagnose_snapshot(stream, source, config_path, lang, gpu, model, params, with_plan)
    from ..evidence.fastpath import timeline_of
    timeline = timeline_of(stream, source)
    if adjust is not None:                    # a run folder's per-step records add to the log's progress
        adjust(timeline)
    config = load_config(config_path) if config_path else None
    if config is None:                        # no file: the launch command the log echoes, if any
        from ..read.config import config_from_log
        config = config_from_log(timeline)
    facts = config.facts if config else None
    diagnosis = diagnose_timeline(timeline, lang=lang, facts=facts, config=config)
    if config and config.from_log is None:
        diagnosis.conflicts = config.conflicts_with(timeline.facts)
    for key, value in (stated or {}).items():
        if value is not None:
            diagnosis.facts[key] = value
    if callable(with_plan):                   # triage: a plan only where its reply will quote one
        with_plan = with_plan(diagnosis)
    if with_plan:
        from ..plans.advise import complete
        complete(diagnosis, config=config, gpu=gpu, model=model, params=params)
    return diagnosis



_WARM_LOG = b"""Traceback (most recent call last):
  File "/x/site-packages/transformers/trainer.py", line 2, in training_step
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of \
which 1.00 GiB is free.
"""


def warm():
    """Load and compile what every diagnosis uses (rules, frame tables, the parser's automaton, the
    patterns compiled on first use) by diagnosing a small log with a frame: a parent about to fork
    workers does it once, instead of each worker on its first file."""
    diagnose_bytes(_WARM_LOG, "<warm>")


def diagnose_run(run, config_path=None, lang="en", gpu=None, model=None, params=None, with_plan=True, stated=None):
    """A run folder (runfolder.Run): its log, or a log made of its records, with its own config."""
    from ..read.runfolder import open_log
    from ..read.runrecords import apply_records
    if config_path:                           # --config beats the folder's own: the line names what was read
        run.config = config_path
    name, stream = open_log(run)
    try:
        d = diagnose_stream(stream, name, run.config, lang, gpu, model, params, with_plan,
                            adjust=lambda t: apply_records(run, t), stated=stated)
    finally:
        stream.close()
    d.run_folder = run.to_json()
    if d.verdict == "no_failure":
        from ..read.runrecords import unfinished_note
        note = unfinished_note(run, lang)
        if note:
            d.notes.append(note)
    d.run_folder["line"] = run.line(lang)
    return d


def diagnose_any(path, **kw):
    """A log file, or a run folder (its newest run)."""
    import os
    if path not in (None, "-") and os.path.isdir(path):
        from ..read.runfolder import find_runs, pick
        runs = find_runs(path)
        if not runs:
            from ..read.reader import InputError
            from ..read.runfolder import WHAT_A_RUN_HOLDS
            raise InputError(f"{path}: is a directory with no training run in it (looked for {WHAT_A_RUN_HOLDS}; a folder of many logs: oom-doctor triage DIR)")
        run = pick(runs[0])
        run.others = runs[1:]
        return diagnose_run(run, **kw)
    return diagnose_path(path, **kw)


def _peek(stream, n=2):
    """The first bytes, left unread: buffered files and stdin peek, others seek back."""
    if hasattr(stream, "peek"):
        return stream.peek(n)[:n]
    if hasattr(stream, "seekable") and stream.seekable():
        pos = stream.tell()
        head = stream.read(n)
        stream.seek(pos)
        return head
    return b""
