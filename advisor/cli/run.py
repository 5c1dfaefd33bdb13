"""`oom-doctor run [options] -- CMD ARGS...` (also `python -m advisor.cli.run`): run a training
command, pass its output through unchanged, keep the whole log, and on failure diagnose it.

The command's stdout and stderr go to ours byte for byte (through a pseudo-terminal when ours is
one, so colours and `\\r` bars survive) and into the log file. Python children find
advisor/hook/sitecustomize.py first on PYTHONPATH: if the program imports torch, an OOM dumps a
memory snapshot beside the log (torch is imported only by the program, never here). The exit code
is the command's own. A failure writes the report and the suggested patch for the config named on
the command line; the config itself is never written.
"""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import click

HOOK = Path(__file__).resolve().parents[1] / "hook"
_CONFIG_EXT = (".yaml", ".yml", ".json")


def _pump(src_fd, sinks, lock, log):
    """Copy one stream to its terminal and to the log as it comes (no line buffering: bars redraw)."""
    while True:
        try:
            data = os.read(src_fd, 65536)
        except OSError:                      # a pty reports EIO once the child side is closed
            break
        if not data:
            break
        for out in sinks:
            out.write(data)
            out.flush()
        with lock:
            log.write(data)
            log.flush()


def _like_our_terminal(fd):
    """The child's terminal: our window size (bars fit), and '\n' left as it is (no '\r\n' in the log)."""
    import fcntl
    import termios
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, fcntl.ioctl(sys.stdout.fileno(), termios.TIOCGWINSZ, b"\0" * 8))
        attrs = termios.tcgetattr(fd)
        attrs[1] &= ~termios.ONLCR
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    except OSError:
        pass


def _spawn(cmd, env, tty):
    if tty:
        import pty
        master, slave = pty.openpty()
        _like_our_terminal(slave)
        p = subprocess.Popen(cmd, stdout=slave, stderr=slave, env=env)
        os.close(slave)
        return p, [(master, [sys.stdout.buffer])]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return p, [(p.stdout.fileno(), [sys.stdout.buffer]), (p.stderr.fileno(), [sys.stderr.buffer])]


def run_command(cmd, log_path, snapshot_path):
    """Run `cmd`; returns its exit code (128+N when a signal N ended it, as a shell says)."""
    env = dict(os.environ, OOM_DOCTOR_SNAPSHOT=str(snapshot_path),
               PYTHONPATH=os.pathsep.join(p for p in (str(HOOK), os.environ.get("PYTHONPATH")) if p))
    tty = os.name == "posix" and sys.stdout.isatty()
    try:
        p, streams = _spawn(cmd, env, tty)
    except OSError as e:
        raise click.ClickException(f"cannot run {cmd[0]}: {e.strerror or e}")
    # signals sent to us alone (kill, a scheduler's SIGTERM) are passed on to the child
    forward = lambda sig, _frame: p.send_signal(sig)  # noqa: E731
    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP")}
    # a terminal's Ctrl-C already reaches the whole process group; from elsewhere it is passed on
    old[signal.SIGINT] = signal.signal(signal.SIGINT, (lambda *_: None) if sys.stdin.isatty() else forward)
    lock = threading.Lock()
    with open(log_path, "wb") as log:
        threads = [threading.Thread(target=_pump, args=(fd, sinks, lock, log), daemon=True) for fd, sinks in streams]
        for t in threads:
            t.start()
        rc = p.wait()
        for t in threads:
            t.join()
    if tty:
        os.close(streams[0][0])
    for s, h in old.items():
        signal.signal(s, h)
    return 128 - rc if rc < 0 else rc


def config_in(cmd):
    """The first existing .yaml/.yml/.json file the command names (key=path and --key=path too)."""
    for word in cmd[1:]:
        value = word.split("=", 1)[-1]
        if value.lower().endswith(_CONFIG_EXT) and Path(value).is_file():
            return value
    return None


def _snapshots(snapshot_path):
    root = snapshot_path.with_suffix("")
    found = [snapshot_path] if snapshot_path.is_file() else []
    return found + sorted(snapshot_path.parent.glob(root.name + ".rank*" + snapshot_path.suffix))


def after_failure(log_path, snapshot_path, cmd, report, lang):
    """Diagnose the snapshot when one was dumped, else the whole log; write the report and patch."""
    from ..pipeline import diagnose_path
    from ..render import render
    from ..read.files import write_output
    from ..read.reader import InputError
    config = config_in(cmd)
    snaps, d = _snapshots(snapshot_path), None
    for snap in snaps:                       # one per rank: the first that recorded the OOM decides
        try:
            d = diagnose_path(str(snap), config_path=config, lang=lang)
        except InputError:                   # a rank killed while it wrote its snapshot
            continue
        if d.verdict == "device_oom":
            break
    if d is None or d.verdict != "device_oom":
        d = diagnose_path(str(log_path), config_path=config, lang=lang)
    said = [f"log {log_path}"] + [f"snapshot {s}" for s in snaps]
    if report:
        ext = Path(report).suffix.lower()
        fmt = {".html": "html", ".htm": "html", ".md": "markdown", ".json": "json"}.get(ext, "text")
        write_output(report, render(d, fmt, lang))
        said.append(f"report {report}")
    else:
        click.echo(render(d, "text", lang), err=True, nl=False)
    if d.patch:
        patch = log_path.with_suffix(".patch")
        write_output(str(patch), d.patch)
        said.append(f"patch {patch}")
    from ..core.safe import inert_name
    click.echo(inert_name("oom-doctor: " + d.title + " — " + ", ".join(said)), err=True)
    return d


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}, epilog=(
    "\b\nExample:\n  oom-doctor run --log train.log -- llamafactory-cli train train.yaml\n\n"
    "\b\nExit codes: the command's own; 2 when oom-doctor itself cannot start it."))
@click.option("--log", "log", type=click.Path(dir_okay=False), default="oom-doctor-run.log", show_default=True,
              help="Where the whole output is kept.")
@click.option("--report", type=click.Path(dir_okay=False), help="On failure, write the report here (.html, .md, .json, else text).")
@click.option("--lang", type=click.Choice(["en", "zh"]), default=None)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(log, report, lang, cmd):
    """Run CMD (after --), keep its log, and diagnose it if it fails; exits with CMD's code."""
    from .common import default_lang
    log_path = Path(log)
    snapshot_path = log_path.with_suffix(".snapshot.pickle")
    for old in _snapshots(snapshot_path):    # a snapshot left by an earlier run is not this run's
        old.unlink()
    rc = run_command(list(cmd), log_path, snapshot_path)
    if rc != 0:
        try:
            after_failure(log_path, snapshot_path, list(cmd), report, lang or default_lang())
        except Exception as e:              # the command's code matters more than our report
            click.echo(f"oom-doctor: could not diagnose {log_path}: {e}", err=True)
    sys.exit(rc)


capture = run                            # `oom-doctor capture` names the same command


def main():
    args = sys.argv[1:]
    run.main(args=args, prog_name="python -m advisor.cli.run")


if __name__ == "__main__":
    main()
