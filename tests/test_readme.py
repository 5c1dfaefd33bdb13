"""The README is the user's manual: short, and every command in it runs as written; each command's
--help carries an example and its exit codes."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent


def _commands():
    """Each line of a ```bash or ```text block that starts with `oom-doctor` (a `$ ` prompt dropped)."""
    out = []
    for block in re.findall(r"```(?:bash|text)\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line[2:] if line.startswith("$ ") else line
            if line.startswith("oom-doctor "):
                out.append(line.split("  #")[0].strip())
    return out


def test_the_readme_is_a_manual_not_a_notebook():
    assert len(README.splitlines()) <= 300
    assert "round" not in README.lower().replace("around", "")


def test_the_first_lines_are_the_two_setup_commands_ci_runs():
    block = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci = ci.replace("pip install -q ", "pip install ")     # CI quietens pip; the commands are the same
    assert len(block) == 2 and all(line in ci for line in block)


@pytest.mark.parametrize("command", _commands())
def test_every_command_in_the_readme_runs_as_written(command, tmp_path):
    shutil.copytree(ROOT / "log_samples", tmp_path / "log_samples")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", NO_COLOR="1")
    p = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode in (0, 1), (command, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    if " > " not in command:
        assert p.stdout.strip()
        return
    written = tmp_path / command.rsplit(" > ", 1)[1].strip()      # the patch taken from the JSON
    assert written.read_text().startswith("--- ")
    if shutil.which("patch"):
        applied = subprocess.run(f"patch -p0 < {written.name}", shell=True, cwd=tmp_path, capture_output=True,
                                 text=True, timeout=60)
        assert applied.returncode == 0, applied.stdout + applied.stderr


def test_the_commands_cover_every_command():
    used = {c.split()[1] for c in _commands()}
    assert {"diagnose", "budget", "triage", "explain", "run"} <= used


@pytest.mark.parametrize("command", ["diagnose", "budget", "triage", "rules", "explain", "run"])
def test_every_help_has_an_example_and_the_exit_codes(command):
    p = subprocess.run([sys.executable, "-m", "advisor.cli", command, "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "Example:" in p.stdout and "Exit codes:" in p.stdout
