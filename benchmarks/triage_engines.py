"""Benchmark the two triage engines on one folder: files per second and the driver's peak memory.

    python benchmarks/triage_engines.py [--n 100000] [--jobs N] [--folder DIR] [--keep]

The reports are triage_bench.py's mutated copies of the shipped samples (small ones: no padding).
Each engine runs in its own process, so one's memory does not count in the other's; the peak is
that process's own (ru_maxrss): the parent that groups for the local engine, the Ray driver for Ray,
never the workers. Both reports must be equal, or the run fails.
"""

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RUNNER = r"""
import json, resource, sys, time
engine, folder, jobs, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t = time.perf_counter()
if engine == "ray":
    import ray
    ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
    from advisor.triage.ray_engine import run_triage_ray
    report = run_triage_ray([folder])
else:
    from advisor.triage.run import run_triage
    report = run_triage([folder], jobs=jobs)
seconds = time.perf_counter() - t
with open(out, "w") as fh:
    json.dump(report, fh, sort_keys=True)
print(json.dumps({"seconds": seconds, "files": report["summary"]["files"],
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write(n, folder, seed=0):
    """n small reports: triage_bench's mutations without its padding to ~20 KB."""
    from triage_bench import ROOT, _decode, mutate, variant
    rng = random.Random(seed)
    samples = sorted((ROOT / "log_samples").glob("*.log"))
    texts = {p.stem: _decode(p.read_bytes()) for p in samples}
    variants = max(1, n // 20)
    for i in range(n):
        v = i % variants
        text, _ = variant(texts[samples[v % len(samples)].stem], v)
        data, _ = mutate(text, rng, target=0)
        (folder / f"{rng.getrandbits(40):010x}{rng.choice(['.log', '.txt', '.out', ''])}").write_bytes(data)


def run(engine, folder, jobs, out):
    p = subprocess.run([sys.executable, "-c", RUNNER, engine, str(folder), str(jobs), str(out)],
                       capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{engine}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=None, help="CPUs for each engine (default: all)")
    ap.add_argument("--folder", type=Path, help="reuse (or fill) this folder instead of a temporary one")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    from advisor.triage.run import usable_cpus
    jobs = args.jobs or usable_cpus()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="triage-engines-"))
    folder.mkdir(parents=True, exist_ok=True)
    if not any(folder.iterdir()):
        t = time.perf_counter()
        write(args.n, folder)
        print(f"wrote {args.n} reports in {time.perf_counter() - t:.0f} s "
              f"({sum(p.stat().st_size for p in folder.iterdir()) / args.n / 1024:.1f} KB each)")
    try:
        reports = {}
        for engine in ("local", "ray"):
            out = folder.with_name(folder.name + f".{engine}.json")
            r = run(engine, folder, jobs, out)
            reports[engine] = out.read_text()
            out.unlink()
            print(f"{engine:5}  {r['files']} files  {r['seconds']:.1f} s  {r['files'] / r['seconds']:.0f} files/s  "
                  f"driver peak {r['peak_mib']:.0f} MiB  ({jobs} CPUs)")
        same = reports["local"] == reports["ray"]
        print("reports equal" if same else "REPORTS DIFFER")
        sys.exit(0 if same else 1)
    finally:
        if not args.keep and not args.folder:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
