"""`oom-doctor triage PATH...`: many logs -> groups of the same failure.

The command only reads its options and writes the report: which files (triage_inputs.py), the run
(triage_run.py, or ray_engine.py), the grouping (triage.py) and the rendering (triage_render.py) are
the triage stage's. Exit codes: 1 when any log shows an OOM, else 0; 2 when no path matched, or no
file could be read at all.
"""

import os
import sys

import click

from ..triage.inputs import expand
from ..triage.render import render_report
from ..triage.run import capped_jobs, run_triage


@click.command("triage", epilog=(
    "\b\nExample:\n  oom-doctor triage reports/ --format markdown --min-count 2\n\n"
    "\b\nExit codes: 0 no OOM in any report, 1 an OOM in at least one, 2 no path matched or nothing could be read."))
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
    from .common import EXIT_OK, EXIT_OOM, EXIT_USAGE, emit, default_lang, fail
    verdicts, rules = _known_verdicts(verdicts), _known_rules(rules)     # a typo fails now, not as an empty view
    from ..triage import week as triage_week
    try:        # read before the run: a wrong path fails in a second, not after 10 000 files
        last = triage_week.load_baseline(baseline) if baseline else None
    except triage_week.BaselineError as e:
        fail(str(e))
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    if output:
        from ..read.files import refuse_input_as_output
        found = expand(paths)[0]
        from ..read.runfolder import pick          # a run folder's log and config are inputs too
        runs = [pick(d) for d in found if os.path.isdir(d)]
        inside = [f for r in runs for f in (r.log, r.config)]
        refuse_input_as_output(output, list(paths) + found + inside)
    if engine == "ray" and issues:
        fail("--issues reads its exports here: use it with the local engine")
    if engine == "ray":
        from ..triage.ray_engine import EngineMissing, run_triage_ray
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
    emit(render_report(report, fmt, lang or default_lang()), output)
    if report["summary"]["ooms"]:
        sys.exit(EXIT_OOM)
    sys.exit(EXIT_OK if report["summary"]["diagnosed"] else EXIT_USAGE)    # nothing readable: an input error


def _known(values, known, flag, listed):
    """Each value in its known spelling (case does not matter), or exit 2 naming the nearest ones."""
    import difflib

    from .common import fail
    by_lower = {k.lower(): k for k in known}
    out = []
    for value in values:
        v = value.strip().lower()
        if v not in by_lower:
            near = sorted(k for k in by_lower if v and v in k) or difflib.get_close_matches(v, list(by_lower), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(by_lower[n] for n in near[:3])}?" if near else ""
            fail(f"{flag} {value}: no such {flag[2:]}{hint} ({listed})")
        out.append(by_lower[v])
    return tuple(out)


def _known_verdicts(values):
    from ..core.vocab import VERDICTS
    return _known(values, VERDICTS, "--verdict", "verdicts: " + ", ".join(VERDICTS))


def _known_rules(values):
    if not values:
        return ()
    from ..diagnosis.rules import load_rules
    return _known(values, [r.id for r in load_rules()], "--rule", "`oom-doctor rules` lists them")

