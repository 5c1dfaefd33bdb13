"""What every command shares: exit codes, the one-line failure, language and colour defaults, and
writing or opening a report. Exit codes live here only.

0 no OOM / fits, 1 OOM diagnosed / does not fit, 2 usage or input error (one line on stderr).
"""

import os
import sys

import click

EXIT_OK, EXIT_OOM, EXIT_USAGE = 0, 1, 2


def default_lang():
    env = os.environ.get("OOM_DOCTOR_LANG")
    if env in ("en", "zh"):
        return env
    loc = os.environ.get("LC_ALL") or os.environ.get("LC_MESSAGES") or os.environ.get("LANG") or ""
    return "zh" if loc.lower().startswith("zh") else "en"


def use_color(stream=None):
    stream = stream or sys.stdout
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def check_gpu(gpu):
    """--gpu 0GiB names no card: a usage error, not a budget that 'fits' nothing (catalog.find_gpu
    reads the same size spellings)."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:gib|gb|g)?\s*", str(gpu or "").lower())
    if m and float(m.group(1)) <= 0:
        fail(f"--gpu {gpu}: a card needs some memory; give a name (4090, A100-80G) or a size (24GiB)")


def fail(message):
    """One clear line on stderr and exit 2 (a file name in it may hold anything: made inert)."""
    from ..core.safe import inert_name
    click.echo(f"oom-doctor: {inert_name(message)}", err=True)
    sys.exit(EXIT_USAGE)


LANG = click.option("--lang", type=click.Choice(["en", "zh"]), default=None,
                    help="Language of the report (default: $OOM_DOCTOR_LANG, then the locale).")


def emit(text, output):
    if output:
        from ..read.files import write_output
        write_output(output, text)      # a temporary file and a rename: never a truncated report
    else:
        click.echo(text, nl=not text.endswith("\n"))


def open_format(fmt, open_):
    """--open shows the HTML report: it replaces the default text format, and refuses the others."""
    if open_ and fmt == "text":
        return "html"
    if open_ and fmt != "html":
        fail(f"--open shows the HTML report; it cannot open --format {fmt}")
    return fmt


def open_target(output, open_):
    if open_ and not output:
        from ..render.html import temp_report_path
        return temp_report_path()
    return output


def open_report(output, open_):
    """Open the written report in a browser when one exists; never fails (the report is written)."""
    if not open_:
        return
    from ..render.html import open_in_browser
    if not open_in_browser(output):
        click.echo(f"oom-doctor: no browser found; the report is at {output}", err=True)
    else:
        click.echo(f"oom-doctor: opened {output}", err=True)


def debug_on():
    """OOM_DOCTOR_DEBUG=1 (or yes/true/on) shows tracebacks; 0, no, false, off and empty do not."""
    return os.environ.get("OOM_DOCTOR_DEBUG", "").strip().lower() not in ("", "0", "no", "false", "off")


def epilog(example, codes):
    """The end of a command's --help: one example and what its exit codes mean (\b keeps click from
    re-flowing the lines)."""
    return f"\b\nExample:\n  {example}\n\n\b\nExit codes: {codes}"


OOM_CODES = "0 no OOM, 1 an OOM diagnosed, 2 a usage or input error."

