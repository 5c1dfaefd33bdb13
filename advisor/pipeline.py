"""The library entry point: a log (path, '-', bytes or text) -> a complete Diagnosis.

read -> parse -> diagnose -> budget -> plan -> patch; each stage is importable on its own.
"""

import io
import sys

from .config import load_config
from .diagnose import diagnose_timeline
from .reader import open_source


def diagnose_path(path, config_path=None, lang="en", gpu=None, model=None, params=None, with_plan=True):
    name, stream = open_source(path)
    try:
        return diagnose_stream(stream, name, config_path, lang, gpu, model, params, with_plan)
    finally:
        if stream is not getattr(sys.stdin, "buffer", None):
            stream.close()


def diagnose_text(text, config_path=None, lang="en", source="<text>", **kw):
    data = text.encode("utf-8") if isinstance(text, str) else text
    return diagnose_stream(io.BytesIO(data), source, config_path, lang, **kw)


def diagnose_stream(stream, source, config_path=None, lang="en", gpu=None, model=None, params=None, with_plan=True):
    from .fastpath import timeline_of
    timeline = timeline_of(stream, source)
    config = load_config(config_path) if config_path else None
    if config is None:                        # no file: the launch command the log echoes, if any
        from .config import config_from_log
        config = config_from_log(timeline)
    facts = config.facts if config else None
    diagnosis = diagnose_timeline(timeline, lang=lang, facts=facts)
    if config and config.from_log is None:
        diagnosis.conflicts = config.conflicts_with(timeline.facts)
    if callable(with_plan):                   # triage: a plan only where its reply will quote one
        with_plan = with_plan(diagnosis)
    if with_plan:
        from .advise import complete
        complete(diagnosis, config=config, gpu=gpu, model=model, params=params)
    return diagnosis

