"""Pathological sizes (issue 8, item 4): bounded memory and time, and a best-effort verdict.

Each case runs the real command line in a subprocess that reports its own peak memory, on input
built in a temporary folder: a million tiny lines, a 10 000-frame recursion traceback, a 200 MB
single line (the issue's 1 GB scaled down for CI: the reader keeps an overlong line's head and tail
only, so the bound does not depend on the size), and a file that grows while it is read. Last, long
lines built to make the parser's regular expressions backtrack.
"""

import json
import os
import subprocess
import sys
import threading
import time

from conftest import ROOT

OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of " \
      b"23.65 GiB of which 1.00 GiB is free. Of the allocated memory 21.50 GiB is allocated by PyTorch, and " \
      b"100.00 MiB is reserved by PyTorch but unallocated.\n"

# Runs the CLI and writes its peak RSS (ru_maxrss, KiB on Linux) to the file named by $PEAK_RSS_FILE
# when it exits, however it exits.
_MEASURED = """
import os, resource, sys
from advisor.cli.main import main
try:
    main(sys.argv[1:])
finally:
    with open(os.environ["PEAK_RSS_FILE"], "w") as fh:
        fh.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


def run_measured(args, tmp_path, stdin=None, timeout=300, on_start=None):
    """(exit code, parsed JSON or None, stderr, seconds, peak RSS in MiB) of one CLI run;
    on_start(process) is called once it runs."""
    peak = tmp_path / "peak_rss"
    env = dict(os.environ, PEAK_RSS_FILE=str(peak))
    env.pop("OOM_DOCTOR_DEBUG", None)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", _MEASURED, "diagnose", *args, "--format", "json"], stdin=stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        if on_start:
            on_start(p)
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    seconds = time.monotonic() - t0
    err = err.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    report = json.loads(out) if p.returncode in (0, 1) else None
    return p.returncode, report, err, seconds, int(peak.read_text()) / 1024


def baseline_rss(tmp_path):
    small = tmp_path / "small.log"
    small.write_bytes(b"{'loss': 1.0, 'epoch': 0.1}\n" + OOM)
    return run_measured([str(small)], tmp_path)[4]


def test_a_million_tiny_lines(tmp_path):
    log = tmp_path / "train.log"
    with open(log, "wb") as fh:
        fh.write(b"***** Running training *****\n")
        for block in range(1000):
            fh.write(b"".join(b"%d\n" % (block * 1000 + i) for i in range(999)))
            fh.write(b"{'loss': 1.0, 'epoch': %d}\n" % block)
        fh.write(OOM)
    rc, report, err, seconds, rss = run_measured([str(log)], tmp_path)
    assert rc == 1, err
    assert (report["verdict"], report["phase"]) == ("device_oom", "mid_training")
    assert seconds < 120
    assert rss < baseline_rss(tmp_path) + 100


def test_ten_thousand_frame_recursion(tmp_path):
    frames = b"".join(b'  File "/app/model.py", line 12, in descend\n    return descend(node.child)\n'
                      for _ in range(10000))
    head = b"***** Running training *****\n{'loss': 1.0, 'epoch': 0.1}\nTraceback (most recent call last):\n" \
           b'  File "/app/train.py", line 3, in <module>\n    trainer.train()\n' \
           b'  File "/usr/lib/python3/site-packages/transformers/trainer.py", line 1, in training_step\n' \
           b"    loss = self.compute_loss(model, inputs)\n"
    for ending, verdict in ((b"RecursionError: maximum recursion depth exceeded while calling a Python object\n",
                             "not_oom"), (OOM, "device_oom")):
        log = tmp_path / "recursion.log"
        log.write_bytes(head + frames + ending)
        rc, report, err, seconds, _ = run_measured([str(log)], tmp_path)
        assert rc == (1 if verdict == "device_oom" else 0), err
        assert report["verdict"] == verdict
        assert seconds < 60


def _huge_line(path, megabytes):
    """A run whose tqdm bar redrew itself with '\\r' for `megabytes` MB without a newline, then the OOM."""
    unit = b"\r 45%|####5     | 4500/10000 [01:23<01:40, 54.3it/s]"
    block = unit * ((1 << 20) // len(unit) + 1)
    with open(path, "wb") as fh:
        fh.write(b"***** Running training *****\n{'loss': 1.0, 'epoch': 0.1}\n")
        for _ in range(megabytes):
            fh.write(block)
        fh.write(b"\n" + OOM)
    assert path.stat().st_size > megabytes << 20


def test_a_200_mb_single_line_streamed(tmp_path):
    log = tmp_path / "huge.log"
    _huge_line(log, 200)
    base = baseline_rss(tmp_path)
    cat = subprocess.Popen(["cat", str(log)], stdout=subprocess.PIPE)     # a pipe: no size, no mmap
    try:
        rc, report, err, seconds, rss = run_measured(["-"], tmp_path, stdin=cat.stdout)
    finally:
        cat.stdout.close()
        cat.wait()
        log.unlink()
    assert rc == 1, err
    assert (report["verdict"], report["phase"]) == ("device_oom", "mid_training")
    assert seconds < 120
    assert rss < base + 64, f"peak RSS {rss:.0f} MiB for a 200 MiB line (baseline {base:.0f} MiB)"


def test_a_200_mb_single_line_file(tmp_path):
    """The same line as a file: above 16 MiB the CLI reads windows of it by position (fastpath.py)."""
    log = tmp_path / "huge.log"
    _huge_line(log, 200)
    base = baseline_rss(tmp_path)
    try:
        rc, report, err, seconds, rss = run_measured([str(log)], tmp_path)
    finally:
        log.unlink()
    assert rc == 1, err
    assert (report["verdict"], report["phase"]) == ("device_oom", "mid_training")
    assert seconds < 120
    assert rss < base + 64, f"peak RSS {rss:.0f} MiB for a 200 MiB line (baseline {base:.0f} MiB)"


def _wait_until_open(proc, path, limit=60):
    """Wait until `proc` holds `path` open (Linux /proc); elsewhere, return at once."""
    fds = f"/proc/{proc.pid}/fd"
    end = time.monotonic() + limit
    while os.path.isdir("/proc/self/fd") and time.monotonic() < end and proc.poll() is None:
        try:
            if any(os.readlink(os.path.join(fds, fd)) == str(path) for fd in os.listdir(fds)):
                return
        except OSError:
            pass
        time.sleep(0.002)


def test_a_file_that_grows_while_read(tmp_path):
    """A run still writing its log (other ranks report as they go down), faster than any parser:
    reading ends where the file stood when it was opened, so the answer comes while it still grows."""
    log = tmp_path / "running.log"
    step = b"{'loss': 1.0, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
    log.write_bytes(b"***** Running training *****\n" + step * 20000 + OOM)
    cascade = b"W0415 15:31:43.643000 92318 api.py:1010] Sending process 92385 closing signal SIGTERM\n" * 4000
    cap = 512 << 20                         # ~10 s of writing; a bug cannot fill the disk
    stop, written = threading.Event(), [0]

    def writer():
        with open(log, "ab") as fh:
            while not stop.is_set() and written[0] < cap:
                fh.write(cascade)
                fh.flush()
                written[0] += len(cascade)
                time.sleep(0.005)           # ~50 MB/s: several times what a parser reads

    th = threading.Thread(target=writer, daemon=True)

    def start_writing(proc):
        _wait_until_open(proc, log)
        th.start()

    try:
        rc, report, err, seconds, _ = run_measured([str(log)], tmp_path, timeout=120, on_start=start_writing)
        still_writing = th.is_alive()
    finally:
        stop.set()
        if th.is_alive():
            th.join()
        log.unlink()
    assert rc == 1, err
    assert report["verdict"] == "device_oom"
    assert still_writing, f"the diagnosis read on until the writer stopped ({seconds:.1f} s, {written[0] >> 20} MiB)"


# Long lines built to make a regex backtrack: each once took seconds to minutes (quadratic in the
# line's length, and a line may be 64 KiB): a digit run after an OOM message (allocator sizes),
# blanks or words before '%|' (tqdm bars), a host-like 'a1-a1-…' prefix, rich-box bars, NCCL names.
ADVERSARIAL = [("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ", "1", ""), ("", " ", "%|"),
               ("", "\t", "%| 1/2"), ("", "GPU ", "%|"), ("", "Ab ", "%|"), ("", "a1-", ": x"), ("", "│", ""),
               ("", "ProcessGroupNCCL ", ""), ("CUDA out of memory. ", "1.0 GiB ", ""), ("", "1", "/1 ["),
               ("", 'File "x.py", line 1, in ', ""), ("RuntimeError: CUDA error: out of memory ", "of which ", "")]


def test_adversarial_long_lines():
    from advisor.pipeline import diagnose_text
    for head, unit, tail in ADVERSARIAL:
        line = head + unit * (60000 // len(unit)) + tail
        t0 = time.monotonic()
        diagnose_text(("{'loss': 1.0}\n" + line + "\n").encode(), with_plan=False)
        assert time.monotonic() - t0 < 5, (head, unit, tail)


def test_many_long_lines_that_almost_read_as_a_bar():
    """A description search that tried every position would take ~0.1 s a line here; the bar's tail is
    found first, so a hundred such lines stay quick."""
    from advisor.pipeline import diagnose_text
    line = "a" * 60000 + "%/ "
    t0 = time.monotonic()
    diagnose_text(("\n".join([line] * 100) + "\n").encode(), with_plan=False)
    assert time.monotonic() - t0 < 5
