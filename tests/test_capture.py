"""`oom-doctor run -- CMD`: pass-through, the full log, the command's exit code, the report and patch on
failure; the torch hook tested with a stand-in torch package (the real one is never needed)."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import snapfix
from conftest import ROOT

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.65 GiB of which 1.00 GiB is free. Of the allocated memory 22.00 GiB is allocated by PyTorch, and "
       "100.00 MiB is reserved by PyTorch but unallocated.")
FAKE_TRAIN = textwrap.dedent(f"""
    import sys
    sys.stdout.write("\\x1b[32mloading\\x1b[0m\\n  0%|   | 0/10 [00:00<?, ?it/s]\\r 10%|#  | 1/10 [00:01<00:09]\\r")
    sys.stdout.flush()
    sys.stderr.write('Traceback (most recent call last):\\n  File "/x/transformers/trainer.py", line 3138, in training_step\\n')
    sys.stderr.write({OOM!r} + "\\n")
    sys.exit(int(sys.argv[1]))
""")


def run_cli(tmp_path, *args, env=None):
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [e.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "advisor.cli", "run", *args], capture_output=True, cwd=tmp_path,
                          env=e, timeout=120, stdin=subprocess.DEVNULL)


def test_a_failing_command_keeps_its_code_log_report_and_patch(tmp_path):
    (tmp_path / "train.py").write_text(FAKE_TRAIN)
    (tmp_path / "cfg.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\n"
                                       "finetuning_type: lora\nper_device_train_batch_size: 8\n")
    before = (tmp_path / "cfg.yaml").read_bytes()
    p = run_cli(tmp_path, "--log", "run.log", "--report", "rep.json", "--", sys.executable, "train.py", "3",
                "cfg.yaml")
    alone = subprocess.run([sys.executable, "train.py", "3"], capture_output=True, cwd=tmp_path)
    assert p.returncode == 3
    assert p.stdout == alone.stdout, "stdout passes through byte for byte (colours and \\r intact)"
    assert p.stderr.startswith(alone.stderr)
    log = (tmp_path / "run.log").read_bytes()
    assert alone.stdout in log and OOM.encode() in log
    j = json.loads((tmp_path / "rep.json").read_text())
    assert j["verdict"] == "device_oom" and j["memory"]["tried_gib"] == 2.0
    assert "per_device_train_batch_size" in (tmp_path / "run.patch").read_text()
    assert (tmp_path / "cfg.yaml").read_bytes() == before, "the config is never written"


def test_a_successful_command_exits_0_and_writes_no_report(tmp_path):
    (tmp_path / "train.py").write_text(FAKE_TRAIN)
    p = run_cli(tmp_path, "--report", "rep.html", "--", sys.executable, "train.py", "0")
    assert p.returncode == 0 and not (tmp_path / "rep.html").exists()
    assert (tmp_path / "oom-doctor-run.log").exists()


def test_a_missing_program_is_one_line_and_exit_2(tmp_path):
    p = run_cli(tmp_path, "--", "no-such-program-oom-doctor")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_a_signal_that_ends_the_command_is_reported_as_a_shell_does(tmp_path):
    (tmp_path / "die.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    p = run_cli(tmp_path, "--", sys.executable, "die.py")
    assert p.returncode == 128 + 15


FAKE_TORCH = textwrap.dedent("""
    # a stand-in for torch: what the hook calls, and an OOM that calls the observer
    import pickle, types
    _observers = []
    class OutOfMemoryError(RuntimeError):
        pass
    def _attach(fn):
        _observers.append(fn)
    _C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=_attach)
    def _dump_snapshot(path):
        with open(path, "wb") as f:
            f.write(SNAPSHOT)
    recorded = []
    memory = types.SimpleNamespace(_record_memory_history=lambda **kw: recorded.append(kw), _dump_snapshot=_dump_snapshot)
    cuda = types.SimpleNamespace(_lazy_call=lambda fn: fn(), memory=memory)   # as if CUDA were initialised
    def oom():
        for fn in _observers:
            fn(0, 2 << 30, 22 << 30, 700 << 20)
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
""")


def test_the_hook_dumps_a_snapshot_on_oom_and_run_reads_it(tmp_path):
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    snap = pickle.dumps(snapfix.activations_first_step().data())
    (pkg / "__init__.py").write_text(f"SNAPSHOT = {snap!r}\n" + FAKE_TORCH)
    (tmp_path / "train.py").write_text("import torch\nassert torch.recorded, 'history recorded'\n"
                                       "torch.oom()\n")
    p = run_cli(tmp_path, "--log", "run.log", "--report", "rep.json", "--", sys.executable, "train.py",
                env={"PYTHONPATH": str(tmp_path / "fake")})
    assert p.returncode == 1
    assert (tmp_path / "run.snapshot.pickle").read_bytes() == snap
    j = json.loads((tmp_path / "rep.json").read_text())
    assert j["snapshot"]["live_by_component_gib"] == {"weights": 14.0, "activations": 8.0}
    assert (j["phase"], j["component"]) == ("first_step", "activations")


def test_without_torch_the_hook_does_nothing(tmp_path):
    """A program that never imports torch (or where torch is absent) runs as it would alone."""
    (tmp_path / "plain.py").write_text("import sys\nprint('torch' in sys.modules)\n")
    p = run_cli(tmp_path, "--", sys.executable, "plain.py")
    assert p.returncode == 0 and p.stdout == b"False\n"
    assert not (tmp_path / "oom-doctor-run.snapshot.pickle").exists()


def test_the_users_own_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    (tmp_path / "check.py").write_text("import builtins\nprint(getattr(builtins, 'USER_SITE_RAN', False))\n")
    p = run_cli(tmp_path, "--", sys.executable, "check.py", env={"PYTHONPATH": str(site)})
    assert p.stdout == b"True\n"


def test_with_real_torch_and_no_gpu_the_hook_stays_out_of_the_way(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "t.py").write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    p = run_cli(tmp_path, "--", sys.executable, "t.py")
    assert p.returncode == 0 and p.stdout == b"2.0\n"


@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")
def test_on_a_terminal_the_command_sees_one_and_the_log_keeps_its_bytes(tmp_path):
    import pty
    (tmp_path / "term.py").write_text("import sys\nsys.stdout.write('tty=%s\\n\\x1b[1mbar\\r' % sys.stdout.isatty())\n")
    master, slave = pty.openpty()
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "advisor.cli", "run", "--log", "t.log", "--", sys.executable,
                          "term.py"], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, cwd=tmp_path, env=e)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert p.wait(timeout=60) == 0
    os.close(master)
    assert (tmp_path / "t.log").read_bytes() == b"tty=True\n\x1b[1mbar\r"
    assert b"tty=True" in seen


def test_sigterm_to_run_reaches_the_command(tmp_path):
    import signal
    import time
    (tmp_path / "sleeper.py").write_text(textwrap.dedent("""
        import signal, sys, time
        def bye(*_):
            open("got-term", "w").close()
            sys.exit(7)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        time.sleep(60)
    """))
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "advisor.cli", "run", "--", sys.executable, "sleeper.py"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=tmp_path, env=e)
    assert p.stdout.readline() == b"ready\n"
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 7
    assert (tmp_path / "got-term").exists()
