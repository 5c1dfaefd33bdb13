"""A log pasted on a terminal: a prompt on stderr, and one Ctrl-D ends the paste (through a real
pseudo-terminal, as a user types it, not a pipe)."""

import os
import select
import sys
import time
from pathlib import Path

import pytest

pty = pytest.importorskip("pty")
ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "log_samples" / "lf-first-step-activations.log"


def _read_until(fd, want, limit):
    got, deadline = b"", time.time() + limit
    while time.time() < deadline and want not in got:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    return got


def test_one_ctrl_d_ends_a_paste_on_a_terminal():
    env = dict(os.environ, COLUMNS="80", NO_COLOR="1", OOM_DOCTOR_LANG="en")
    pid, fd = pty.fork()
    if pid == 0:                                   # the child: the command, its stdin a terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "advisor.cli", "diagnose"], env)
    try:
        prompt = _read_until(fd, b"Ctrl-D", 30)
        assert b"paste the log" in prompt           # the user is told what to do
        data = LOG.read_bytes()[-4000:]
        for i in range(0, len(data), 512):
            os.write(fd, data[i:i + 512].replace(b"\n", b"\r"))
        os.write(fd, b"\r\x04")                     # Enter, then a single Ctrl-D
        out = _read_until(fd, b"What to change", 30)
        assert b"What to change" in out and b"out of memory" in out.lower()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1      # an OOM was diagnosed
        pid = None
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
