"""A triage run on this machine: the files diagnosed by worker processes, folded into the report.

Files are diagnosed in chunks by a process pool (a worker that dies has its files redone here), each
row folded into the report as it arrives (advisor.triage.batch), so the parent never holds every diagnosis.
"""

import contextlib
import os
import sys

import click

from .inputs import expand

PROGRESS_MIN = 36           # a bar for a handful of files is noise
IN_PROCESS_MAX = 8          # below this, forking workers costs more than it saves


def _diagnose_chunk(paths, lang):
    from .batch import diagnose_batch
    return diagnose_batch([(p, p) for p in paths], lang)


def iter_rows(paths, lang="en", jobs=None, progress=False):
    """(index into `paths`, row) as each file is done, diagnosed by `jobs` processes; the caller folds
    them away (advisor.triage.batch.add), so the parent never holds every diagnosis at once."""
    from .batch import diagnose_item
    jobs = max(1, jobs or os.cpu_count() or 1)
    bar = click.progressbar(length=len(paths), label="diagnosing", file=sys.stderr) if progress else None
    with bar or contextlib.nullcontext():
        if jobs == 1 or len(paths) <= IN_PROCESS_MAX:
            for i, p in enumerate(paths):
                yield i, diagnose_item(p, p, lang)
                if bar:
                    bar.update(1)
            return
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from ..pipeline import warm
        warm()                              # before forking: every worker inherits the compiled tables
        # Chunks amortise the pickling; ~8 per worker keep the bar moving and the load balanced.
        size = max(1, min(64, len(paths) // (jobs * 8)))
        retry = []
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_diagnose_chunk, paths[i:i + size], lang): i for i in range(0, len(paths), size)}
            for fut in as_completed(futures):
                start = futures.pop(fut)        # dropped: a done chunk's rows are not kept here
                try:
                    chunk = fut.result()
                except Exception:       # a worker died (killed, out of memory): redo its files here
                    retry.append(start)
                    continue
                for k, row in enumerate(chunk):
                    yield start + k, row
                if bar:
                    bar.update(len(chunk))
        for start in retry:
            for i in range(start, min(start + size, len(paths))):
                yield i, diagnose_item(paths[i], paths[i], lang)
                if bar:
                    bar.update(1)


def diagnose_all(paths, lang="en", jobs=None, progress=False):
    """[(dict or None, error or None)] in the order of `paths`, diagnosed by `jobs` processes."""
    results = [None] * len(paths)
    for i, row in iter_rows(paths, lang, jobs, progress):
        results[i] = (None, row["error"]) if "error" in row else (row, None)
    return results


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def capped_jobs(jobs):
    """--jobs above the CPUs this process may use only adds start-up and contention (1000 workers
    took 38 s where 2 took 2 s): capped, and said once on stderr."""
    cpus = usable_cpus()
    if jobs and jobs > cpus:
        click.echo(f"oom-doctor: --jobs {jobs} capped at {cpus} (the CPUs this machine lets it use)", err=True)
        return cpus
    return jobs


def run_triage(args, lang="en", jobs=None, tty=False, issues=False):
    """PATH arguments -> the triage/v1 report as a dict (None when no file matched at all).
    With `issues`, each file is an issue export or a markdown file of reports (advisor/issue_input)."""
    from . import batch
    files, missing = expand(args)
    if not files:
        return None
    state, failed = batch.empty(), []
    unmatched = [{"path": m, "error": "no such file, folder or glob match"} for m in missing]
    if issues:
        from .issues import diagnose_reports
        rows, unread = diagnose_reports(files, lang)
        for row in rows:
            batch.add(state, row)
        return batch.finish(state, lang, unmatched + unread)
    for i, row in iter_rows(files, lang, jobs, tty and len(files) > PROGRESS_MIN):
        if "error" in row:
            failed.append((i, row))      # listed in the order of the paths, whatever order they finish in
        else:
            batch.add(state, row)
    for _, row in sorted(failed, key=lambda f: f[0]):
        batch.add(state, row)
    return batch.finish(state, lang, unmatched)
