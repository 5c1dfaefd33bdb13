"""`oom-doctor triage PATH...`: many logs -> groups of the same failure (the grouping is triage.py).

This module does the I/O around the pure library: expand paths (files, recursive folders, globs),
diagnose them in parallel processes, collect per-file failures under `errors` (one line each, never
a traceback), and render the report as a table, JSON, CSV or Markdown. Exit codes: 1 when any log
shows an OOM, else 0; 2 when no path matched, or no file could be read at all.
"""

import contextlib
import glob
import os
import stat
import sys

import click

SUFFIXES = (".log", ".txt", ".out")
PROGRESS_MIN = 36           # a bar for a handful of files is noise
IN_PROCESS_MAX = 8          # below this, forking workers costs more than it saves


def _regular(path):
    """Only regular files are opened: a FIFO blocks the open until a writer comes, a device may never
    end. (A broken link or a loop is not regular either: its error is reported when diagnosed.)"""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _looks_like_text(path):
    """A file without a suffix joins when its first 4 KB decode as text (the reader's own sniff)."""
    from .reader import InputError, sniff_encoding
    if not _regular(path):
        return False
    try:
        with open(path, "rb") as fh:
            sniff_encoding(fh.read(4096))
        return True
    except (InputError, OSError):
        return False


def _wanted(path):
    if os.path.isdir(path):         # only run folders come out of _walk as folders
        return True
    name = os.path.basename(path)
    suffix = os.path.splitext(name)[1].lower()
    return suffix in SUFFIXES or (not suffix and _looks_like_text(path))


def _walk(folder):
    from .runfolder import is_run
    for root, dirs, files in os.walk(folder):
        if is_run(root):            # a run's output folder is one report (its log, config, records)
            dirs[:] = []
            yield root
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))     # .git, .venv: never logs
        for name in sorted(files):
            if not name.startswith("."):
                yield os.path.join(root, name)


def _identity(path):
    """What makes two paths one file (a symlink, '..', a hard link): its device and inode. One stat
    call, ten times cheaper than realpath over a folder of 10 000 reports."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:                 # a broken link: itself
        return os.path.realpath(path)


def expand(args):
    """PATH arguments -> (files to diagnose, paths that matched nothing), each once, in given order.

    A file named explicitly is always diagnosed (a binary one ends up under errors); files found in
    folders or by a glob are filtered by suffix (.log .txt .out, or none and text-like content).
    """
    seen, files, missing = set(), [], []

    def add(path, explicit):
        key = _identity(path)
        if key not in seen and (explicit or _wanted(path)):
            seen.add(key)
            files.append(path)

    for arg in args:
        if os.path.isdir(arg):
            for path in _walk(arg):
                add(path, False)
        elif os.path.lexists(arg):
            add(arg, True)
        elif glob.has_magic(arg):
            hits = sorted(glob.glob(arg, recursive=True))
            for hit in hits:
                for path in (_walk(hit) if os.path.isdir(hit) else [hit]):
                    add(path, False)
            if not hits:
                missing.append(arg)
        else:
            missing.append(arg)
    return files, missing


def _diagnose_chunk(paths, lang):
    from .batch import diagnose_batch
    return diagnose_batch([(p, p) for p in paths], lang)


def iter_rows(paths, lang="en", jobs=None, progress=False):
    """(index into `paths`, row) as each file is done, diagnosed by `jobs` processes; the caller folds
    them away (advisor.batch.add), so the parent never holds every diagnosis at once."""
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
        from .pipeline import warm
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
        from .issue_input import diagnose_reports
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


# Renderers live in triage_render.py; these names stay importable from here.
from .triage_render import (_named, render_csv, render_markdown, render_report, render_table)  # noqa: E402,F401


@click.command("triage")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "markdown", "html"]), default="table")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Parallel processes (default: the CPU count).")
@click.option("--lang", type=click.Choice(["en", "zh"]), default=None,
              help="Language of the replies (default: $OOM_DOCTOR_LANG, then the locale).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here.")
@click.option("--baseline", type=click.Path(dir_okay=False),
              help="Last run's JSON report: mark groups new, grown, shrunk, and list the ones gone.")
@click.option("--verdict", "verdicts", multiple=True, help="Show only groups with this verdict (repeatable).")
@click.option("--rule", "rules", multiple=True, help="Show only groups of this rule id (repeatable).")
@click.option("--min-count", type=click.IntRange(min=1), default=None, help="Show only groups of at least N files.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Who runs the diagnoses: local processes, or Ray Data (RAY_ADDRESS selects a cluster; "
                   "paths may be URIs such as s3://bucket/logs/).")
@click.option("--issues", is_flag=True,
              help="PATHs are issue exports (gh issue list --json number,title,body,url,comments, or the REST "
                   "API's JSON) or markdown files: one report per issue, its logs taken from code blocks.")
def triage(paths, fmt, jobs, lang, output, engine, baseline, verdicts, rules, min_count, issues):
    """Group many logs by failure: files, folders (recursive) and globs."""
    from .cli import EXIT_OK, EXIT_OOM, EXIT_USAGE, _emit, default_lang, fail
    from . import triage_week
    try:        # read before the run: a wrong path fails in a second, not after 10 000 files
        last = triage_week.load_baseline(baseline) if baseline else None
    except triage_week.BaselineError as e:
        fail(str(e))
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    if output:
        from .files import refuse_input_as_output
        found = expand(paths)[0]
        from .runfolder import pick          # a run folder's log and config are inputs too
        runs = [pick(d) for d in found if os.path.isdir(d)]
        inside = [f for r in runs for f in (r.log, r.config)]
        refuse_input_as_output(output, list(paths) + found + inside)
    if engine == "ray" and issues:
        fail("--issues reads its exports here: use it with the local engine")
    if engine == "ray":
        from .ray_engine import EngineMissing, run_triage_ray
        try:
            report = run_triage_ray(paths, lang or default_lang(), tty)
        except EngineMissing as e:
            fail(str(e))
    else:
        report = run_triage(paths, lang or default_lang(), capped_jobs(jobs), tty, issues)
    if report is None:
        fail("no log files matched: " + " ".join(paths))
    if last is not None:
        triage_week.compare(report, last, baseline)
    triage_week.apply_filters(report, verdicts, rules, min_count)
    _emit(render_report(report, fmt, lang or default_lang()), output)
    if report["summary"]["ooms"]:
        sys.exit(EXIT_OOM)
    sys.exit(EXIT_OK if report["summary"]["diagnosed"] else EXIT_USAGE)    # nothing readable: an input error
