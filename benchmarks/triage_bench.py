"""Benchmark `oom-doctor triage`: N mutated copies of the shipped samples -> wall time, purity, recall.

    python benchmarks/triage_bench.py [--n 10000] [--jobs N] [--keep] [--profile]

Each copy comes from one sample in log_samples/ (its known cause) and is mutated the way real
reports differ: other sizes (scaled together, so the allocator's ratios and the cause stay), PIDs,
timestamps, step counts, losses, traceback line numbers, home directories and environment paths;
`[rankN]:` / `[defaultN]:` prefixes; harmless lines dropped (config dumps) or padded in (dataset
notices, up to ~20 KB); a hard wrap at 100 columns or else ANSI colour on error lines; CRLF; GBK,
UTF-16 or UTF-8-with-BOM encodings. File names are random, so nothing but the content tells a
copy's cause.

Purity: the share of grouped copies that sit in a group whose majority cause is their own (a group
holds one true cause). Recall: the share of all copies that sit in their cause's largest group
(copies of one cause land in one group; unreadable copies count as misses).
"""

import argparse
import datetime as dt
import json
import os
import random
import resource
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_SIZE = re.compile(r"(\d+(?:\.\d+)?)(\s*)(GiB|MiB|KiB|GB|MB)\b")
_BYTES = re.compile(r"(\d{5,})(\s*bytes)\b")
_PID = re.compile(r"(\bpid[:=]\s*|\bProcess |\[PID:|\bpid )(\d{2,})")
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)([ T])(\d\d):(\d\d):(\d\d)")
_US = re.compile(r"\b(\d\d)/(\d\d)/(\d{4}) (\d\d):(\d\d):(\d\d)")
_LINE = re.compile(r"(, line )(\d+)")
_LOSS = re.compile(r"('(?:loss|grad_norm)': )(\d+\.\d+)")
_BAR = re.compile(r"(\|\s*)(\d+)/(\d+)( \[[^\]]*(?:it/s|s/it))")
_HOME = re.compile(r"/(?:home|Users)/[\w.-]+|/root(?=/)|/opt/conda(?=/)|/usr/local(?=/lib/python)")
_DROPPABLE = re.compile(r"loading file |loading weights file|^\s+\"[a-z_]+\": [^{\[]*,?$")
HOMES = ["/data/bob", "/home/carol", "/mnt/nfs/u4711", "/workspace/dave", "/home/ubuntu", "/root", "/Users/erin"]
# Dataset and tokenizer notices: no marker, no signal; their paths and hashes differ in every copy.
PADS = [
    "[INFO|{ts}] datasets.builder:{n} >> Tokenized shard {a:05d} of {b:05d}: {c} examples, {d} tokens",
    "[INFO|{ts}] datasets.arrow_dataset:{n} >> Caching processed dataset at "
    "{home}/.cache/huggingface/datasets/json/{kind}-{h}/0.0.0/cache-{h2}.arrow",
    "[INFO|{ts}] tokenization_utils_base.py:{n} >> loading file tokenizer.json from cache at "
    "{home}/.cache/huggingface/hub/models--org--model/snapshots/{h}{h2}/tokenizer.json",
]


def _shift_time(text, rng):
    delta = dt.timedelta(days=rng.randint(-400, 400), seconds=rng.randint(0, 86399))

    def iso(m):
        t = dt.datetime(*map(int, m.group(1, 2, 3, 5, 6, 7))) + delta
        return t.strftime(f"%Y-%m-%d{m.group(4)}%H:%M:%S")

    def us(m):
        t = dt.datetime(int(m.group(3)), int(m.group(1)), int(m.group(2)), *map(int, m.group(4, 5, 6))) + delta
        return t.strftime("%m/%d/%Y %H:%M:%S")
    return _US.sub(us, _ISO.sub(iso, text))


def _numbers(text, rng):
    f = rng.uniform(0.8, 1.25)              # one factor for every size: the ratios that decide stay
    text = _SIZE.sub(lambda m: f"{float(m.group(1)) * f:.2f}{m.group(2)}{m.group(3)}", text)
    text = _BYTES.sub(lambda m: f"{int(int(m.group(1)) * f)}{m.group(2)}", text)
    pids = defaultdict(lambda: str(rng.randint(1000, 4_000_000)))
    text = _PID.sub(lambda m: m.group(1) + pids[m.group(2)], text)
    off = rng.randint(-3, 40)               # another library version: other line numbers
    text = _LINE.sub(lambda m: m.group(1) + str(max(1, int(m.group(2)) + off)), text)
    text = _LOSS.sub(lambda m: m.group(1) + f"{float(m.group(2)) * rng.uniform(0.7, 1.3):.4f}", text)
    k = rng.uniform(0.5, 2.0)               # another dataset size: other step counts (0 stays 0)

    def bar(m):
        n, total = int(m.group(2)), int(m.group(3))
        if total < 50:                      # shard counts and short bars mean something: keep them
            return m.group(0)
        new_total = max(50, int(total * k))
        new_n = new_total if n == total else (0 if n == 0 else min(new_total - 1, max(1, int(n * k))))
        return f"{m.group(1)}{new_n}/{new_total}{m.group(4)}"
    return _shift_time(_BAR.sub(bar, text), rng)


def mutate(text, rng, target=20_000, wrap=True):
    """One sample's text -> the bytes of a plausible other report of the same failure. With
    wrap=False no hard wrap is made (a wrapped original comes back unwrapped): the caller wraps."""
    from advisor.evidence.lines import detect_wrap_width, read_text
    from advisor.read.reader import resolve_redraws
    width = detect_wrap_width([len(ln) for ln in text.split("\n")])
    if width:                               # a wrapped paste: unwrap, mutate, wrap again at its width
        text = "\n".join(ln.text for ln in read_text(text))
    home = rng.choice(HOMES)
    text = _HOME.sub(home, _numbers(text, rng))
    lines = text.split("\n")
    head = len(lines) // 4                  # config dumps and file loading sit at the top
    lines = [ln for i, ln in enumerate(lines) if not (i < head and _DROPPABLE.search(ln) and rng.random() < 0.4)]
    pad, size = [], sum(len(ln) + 1 for ln in lines)
    while size < target * rng.uniform(0.9, 1.1):
        ln = rng.choice(PADS).format(kind="default" if rng.random() < 0.1 else "json", ts=f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 0{rng.randint(0, 9)}:1{rng.randint(0, 9)}:00",
                        n=rng.randint(100, 999), a=rng.randint(0, 99), b=100, c=rng.randint(1000, 9999),
                        d=rng.randint(10**6, 10**7), home=home, h=f"{rng.getrandbits(32):08x}",
                        h2=f"{rng.getrandbits(48):012x}")
        pad.append(ln)
        size += len(ln) + 1
    at = rng.randint(1, min(4, len(lines)))
    lines[at:at] = pad
    if rng.random() < 0.3:                  # torchrun's per-rank prefixes
        prefix = rng.choice(["[rank{}]:", "[default{}]:"]).format(rng.randint(0, 7))
        lines = [f"{prefix}{ln}" for ln in lines]
    if not wrap:
        pass
    elif width or rng.random() < 0.3:       # pasted from a 100-column terminal (a paste has no colour)
        width = width or 100
        flat = [seg for ln in lines for seg in resolve_redraws(ln)]
        lines = [ln[i:i + width] for ln in flat for i in range(0, max(len(ln), 1), width)]
    elif rng.random() < 0.3:                # a captured log keeps the colour of the error lines
        lines = [f"\x1b[31m{ln}\x1b[0m" if "Error" in ln else ln for ln in lines]
    out = ("\r\n" if rng.random() < 0.2 else "\n").join(lines)
    enc = rng.choices(["utf-8", "gbk", "utf-16", "utf-8-sig"], [70, 12, 12, 6])[0]
    return out.encode(enc, errors="replace"), enc


def _decode(data):
    from advisor.read.reader import sniff_encoding    # some samples are GBK or UTF-16 themselves
    return data.decode(sniff_encoding(data[:1 << 20]), errors="replace")


_FILE = re.compile(r'(File "(?:[^"\n]*/)?)(\w+)(\.py")')


def variant(text, v):
    """Another program failing the same way: every traceback file renamed with the variant's own tag
    (letters only: the normaliser keeps them), so variants differ in every frame of the signature."""
    r = random.Random(v)
    tag = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))   # far below SIMILARITY to another
    return _FILE.sub(lambda m: f"{m.group(1)}{m.group(2)}_{tag}{m.group(3)}", text), tag


def generate(n, folder, seed=0, variants=0):
    """Write n mutated copies into folder; return ({path: source sample name}, {path: variant label}).

    With `variants`, copy i is of variant i % variants (of sample v % samples): its frames carry the
    variant's tag, so the copies hold about `variants` distinct signatures (samples without frames
    have one), a few copies each, and grouping has real work at scale."""
    rng = random.Random(seed)
    samples = sorted((ROOT / "log_samples").glob("*.log"))
    texts = {p.stem: _decode(p.read_bytes()) for p in samples}
    truth, label = {}, {}
    for i in range(n):
        v = i % variants if variants else i % len(samples)
        name = samples[v % len(samples)].stem
        text, tag = variant(texts[name], v) if variants else (texts[name], "")
        data, _ = mutate(text, rng)
        path = folder / f"{rng.getrandbits(40):010x}{rng.choice(['.log', '.txt', '.out', ''])}"
        path.write_bytes(data)
        truth[str(path)] = name
        label[str(path)] = name + ("/" + tag if text != texts[name] else "")
    return truth, label


def quality(report, truth):
    by_group = [Counter(truth[m] for m in g["members"]) for g in report["groups"]]
    grouped = sum(sum(c.values()) for c in by_group)
    purity = sum(max(c.values()) for c in by_group) / max(grouped, 1)
    per_cause = defaultdict(list)
    for c in by_group:
        for cause, k in c.items():
            per_cause[cause].append(k)
    totals = Counter(truth.values())
    recall = sum(max(per_cause.get(c, [0])) for c in totals) / max(len(truth), 1)
    detail = {c: (max(per_cause.get(c, [0])), totals[c], len(per_cause.get(c, []))) for c in sorted(totals)}
    return purity, recall, detail


def original_groups():
    """{sample name: id of the group it joins when the unmutated samples are triaged together}."""
    from advisor.triage.run import run_triage
    report = run_triage([str(p) for p in sorted((ROOT / "log_samples").glob("*.log"))], jobs=1)
    return {Path(m).stem: g["id"] for g in report["groups"] for m in g["members"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=None, help="passed to triage --jobs (default: the CPU count)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="generate into benchmarks/out/triage and keep it")
    ap.add_argument("--profile", action="store_true", help="also time the stages in-process")
    ap.add_argument("--variants", type=int, default=None,
                    help="distinct program variants (default n/4: many distinct signatures; 0: the samples only)")
    ap.add_argument("--group-only", type=int, nargs="*", metavar="N",
                    help="only time group() on N synthetic distinct signatures (default 10000 30000)")
    args = ap.parse_args()
    if args.group_only is not None:
        return group_scale(args.group_only or [10_000, 30_000])
    variants = args.n // 4 if args.variants is None else args.variants

    folder = ROOT / "benchmarks" / "out" / "triage" if args.keep else Path(tempfile.mkdtemp(prefix="oom-triage-"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    truth, label = generate(args.n, folder, args.seed, variants)
    mb = sum(os.path.getsize(p) for p in truth) / 2**20
    print(f"generated {len(truth)} reports, {mb:.0f} MiB ({mb * 1024 / max(len(truth), 1):.1f} KiB each) "
          f"from {len(set(truth.values()))} samples in {time.perf_counter() - t0:.1f} s")

    out = folder.with_name(folder.name + "-report.json")
    # The working tree's command (an installed copy may be stale), interpreter startup included.
    cmd = [sys.executable, "-m", "advisor.cli", "triage", str(folder), "--format", "json", "-o", str(out)]
    cmd += ["--jobs", str(args.jobs)] if args.jobs else []
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    jobs = args.jobs or os.cpu_count()
    report = json.loads(out.read_text(encoding="utf-8"))
    print(f"triage wall time: {wall:.1f} s for {len(truth)} files ({len(truth) / wall:.0f} files/s, "
          f"jobs={jobs}, exit {rc}; load average before: {load:.1f} on {os.cpu_count()} CPUs)")
    print(f"triage CPU time: {cpu:.1f} s ({cpu * 1000 / len(truth):.1f} ms a file) "
          f"-> about {cpu / 2:.1f} s of wall time on an idle 2-core machine")
    sigs = sum(1 + len(g.get("aliases", [])) for g in report["groups"])
    print(f"groups: {len(report['groups'])}, distinct signatures: {sigs}, errors: {len(report['errors'])}")
    purity, recall, detail = quality(report, truth)
    print(f"by source sample:      purity {purity:.2%}   recall {recall:.2%}")
    if variants:
        p3, r3, _ = quality(report, label)
        print(f"by variant:            purity {p3:.2%}   recall {r3:.2%}   ({len(set(label.values()))} variants)")
    same = original_groups()                # samples that triage itself puts together are one cause
    p2, r2, _ = quality(report, {path: same[name] for path, name in truth.items()})
    print(f"by original's group:   purity {p2:.2%}   recall {r2:.2%}   "
          f"({len(set(same.values()))} causes among {len(same)} samples)")
    for cause, (best, total, spread) in detail.items():
        print(f"  {cause:<34} {best:>6}/{total:<6} in its largest group, spread over {spread} group(s)")
    for g in report["groups"]:              # a group that holds several samples: say which, and why
        sources = Counter(truth[m] for m in g["members"])
        if len(sources) > 1:
            print(f"  group {g['id']} ({g['rule']} {g['phase']}/{g['component']}) holds "
                  + ", ".join(f"{c} {k}" for c, k in sources.most_common()) + f": {g['signature'][:100]}")
    if args.profile:
        profile(folder, args.jobs)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
        out.unlink()


def group_scale(sizes, seed=0):
    """group() alone on n synthetic diagnoses with n distinct signatures: one OOM phrase, three frames
    each, the innermost drawn from 50 common ones (blocks are then large, as real tracebacks share
    torch's frames), the other two the program's own."""
    from advisor.triage.grouping import group
    rng = random.Random(seed)

    def word(k=8):
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(k))
    common = [f"/torch/nn/{word(6)}.py: {word()}" for _ in range(50)]
    for n in sizes:
        ds = []
        for i in range(n):
            frames = [rng.choice(common)] + [f"/src/{word(6)}.py: {word()}" for _ in range(2)]
            ev = [{"marker": "oom_error", "text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}]
            ev += [{"marker": "frame", "text": f + " — y = f(x)"} for f in frames]
            ds.append({"source": f"r{i}", "verdict": "device_oom", "rule": "OOM203", "phase": "first_step",
                       "component": "activations", "accelerator": "cuda", "evidence": ev,
                       "memory": {"tried_gib": 2.0, "total_gib": 80.0}, "facts": {}})
        t0 = time.perf_counter()
        groups = group(ds)
        print(f"group(): {n} distinct signatures -> {len(groups)} groups in {time.perf_counter() - t0:.2f} s")


def profile(folder, jobs):
    """Per-stage times in-process: expand, diagnose (parallel), group."""
    from advisor.triage.grouping import group
    from advisor.triage.run import diagnose_all
    from advisor.triage.inputs import expand
    t0 = time.perf_counter()
    files, _ = expand([str(folder)])
    t1 = time.perf_counter()
    results = diagnose_all(files, "en", jobs)
    t2 = time.perf_counter()
    group([d for d, _ in results if d is not None])
    t3 = time.perf_counter()
    print(f"profile: expand {t1 - t0:.2f} s, diagnose {t2 - t1:.2f} s, group {t3 - t2:.2f} s")


if __name__ == "__main__":
    main()
