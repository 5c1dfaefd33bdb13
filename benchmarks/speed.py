#!/usr/bin/env python3
"""Speed and memory of `oom-doctor diagnose` on big logs, against grep and Python's own start-up.

usage: python benchmarks/speed.py [--sizes 100M,1G,4G] [--stdin-max 1G] [--keep]
For each size: generate a realistic log (benchmarks/biglog.py) into /tmp/oom-doctor-bench/, then in one run
on the same file measure the wall time and peak RSS of `oom-doctor diagnose --format json`, the wall
time of `grep -c -E` with the markers the tool needs, and their ratio; the same log piped through
stdin (no seeking: anchors scanned in C, windows parsed) up to --stdin-max, against `grep -c -E` over
the same pipe (`cat log | grep`). Then the CPU time triage spends on one ~23 KB report (in-process,
mutated samples as benchmarks/triage_bench.py makes them) and cold start: `oom-doctor --version` and
diagnosing a 200-line log, each against `python3 -c pass` (median of 7 runs).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from biglog import parse_size, write_log  # noqa: E402

TOOL = [shutil.which("oom-doctor") or str(Path(sys.executable).with_name("oom-doctor"))]
MARKERS = ("out of memory|Tried to allocate|OutOfMemoryError|DefaultCPUAllocator|exitcode|SIGKILL|Killed|Traceback"
           "|Error|rror:|Watchdog|ALLOC_FAILED|EL0004|Running training|Running Evaluation|Saving model checkpoint"
           "|Loading checkpoint shards|trainable params|[0-9]+/[0-9]+ \\[|\\{'loss'|\\{'eval_loss'")
RSS = ("import resource, subprocess, sys\n"
       "stdin = open(sys.argv[1], 'rb') if sys.argv[1] != '-' else None\n"
       "subprocess.run(sys.argv[2:], stdin=stdin, stdout=subprocess.DEVNULL)\n"
       "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def timed(cmd, stdin="-"):
    """(wall seconds, peak RSS MiB) of a command, measured by a small parent process."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", RSS, stdin, *cmd], capture_output=True, text=True, check=True)
    return time.perf_counter() - t, int(out.stdout.strip()) / 1024


def wall(cmd, runs=7):
    # stdout is a pipe, not /dev/null: GNU grep stops at the first match when it writes to /dev/null
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100M,1G")
    ap.add_argument("--stdin-max", default="1G")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs in /tmp/oom-doctor-bench/")
    a = ap.parse_args()
    out = Path(tempfile.gettempdir()) / "oom-doctor-bench"
    out.mkdir(exist_ok=True)
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs (a shared machine:"
          " compare the ratios, measured in this one run)")
    print(f"{'size':>6} {'diagnose s':>11} {'peak MiB':>9} {'grep s':>8} {'ratio':>6} {'stdin s':>8} {'stdin MiB':>10}"
          f" {'pipe grep s':>12} {'ratio':>6}")
    for size in a.sizes.split(","):
        path = out / f"bench-{size}.log"
        if not path.exists():
            write_log(path, parse_size(size))
        wall(["cat", str(path)], runs=1)                          # same page-cache state for both
        _, d_rss = timed(TOOL + ["diagnose", "--format", "json", str(path)])   # wall time without the RSS parent:
        d_time = wall(TOOL + ["diagnose", "--format", "json", str(path)], runs=3)
        g_time = wall(["grep", "-c", "-E", MARKERS, str(path)], runs=3)
        s_time = s_rss = p_time = float("nan")
        if parse_size(size) <= parse_size(a.stdin_max):
            # a real pipe (a redirected file would be seekable and take the windowed path)
            _, s_rss = timed(["sh", "-c", f"cat '{path}' | '{TOOL[0]}' diagnose --format json -"])
            s_time = wall(["sh", "-c", f"cat '{path}' | '{TOOL[0]}' diagnose --format json -"], runs=3)
            p_time = wall(["sh", "-c", f"cat '{path}' | grep -c -E '{MARKERS}'"], runs=3)
            same = _verdict(["sh", "-c", f"cat '{path}' | '{TOOL[0]}' diagnose --format json -"]) == \
                _verdict(TOOL + ["diagnose", "--format", "json", str(path)])
            print(f"{'':>6} stdin and file path agree on verdict, rule, phase, component, memory: {same}")
        print(f"{size:>6} {d_time:11.2f} {d_rss:9.1f} {g_time:8.2f} {d_time / g_time:6.2f} {s_time:8.2f} {s_rss:10.1f}"
              f" {p_time:12.2f} {s_time / p_time:6.2f}")
        if not a.keep:
            path.unlink()
    triage_cpu()
    small = out / "small-200.log"
    lines = (HERE.parent / "log_samples" / "lf-first-step-activations.log").read_text(encoding="utf-8").splitlines()
    small.write_text("\n".join(lines[-200:]) + "\n", encoding="utf-8")
    base = wall([sys.executable, "-c", "pass"])
    version = wall(TOOL + ["--version"])
    diag = wall(TOOL + ["diagnose", str(small)])
    print(f"\ncold start: {Path(sys.executable).name} -c pass {base * 1000:.0f} ms; oom-doctor --version {version * 1000:.0f} ms "
          f"({version / base:.1f}x); diagnose a 200-line log {diag * 1000:.0f} ms ({diag / base:.1f}x)")


def _verdict(cmd):
    import json
    out = subprocess.run(cmd, capture_output=True, text=True)
    d = json.loads(out.stdout)
    return [str(d.get(k)) for k in ("verdict", "rule", "phase", "component", "memory")]


def triage_cpu(n=200):
    """CPU milliseconds `oom-doctor triage` spends diagnosing one ~23 KB report (reading included)."""
    import random
    import tempfile
    sys.path.insert(0, str(HERE.parent))
    from triage_bench import generate
    from advisor.pipeline import diagnose_path
    with tempfile.TemporaryDirectory() as folder:
        paths = list(generate(n, Path(folder))[0])
        random.Random(0).shuffle(paths)
        size = sum(Path(p).stat().st_size for p in paths) / len(paths)
        for p in paths[:20]:                     # warm: rules, catalogues, regexes compiled
            diagnose_path(p, with_plan=False).to_json_dict()
        t = time.process_time()
        for p in paths:
            diagnose_path(p, with_plan=False).to_json_dict()
        cpu = (time.process_time() - t) / len(paths)
    print(f"\ntriage: {cpu * 1000:.2f} ms CPU a report ({size / 1024:.0f} KiB average, {n} reports, reading and parsing"
          " to the diagnosis; plans left out)")


if __name__ == "__main__":
    main()
