"""Triage recall and purity on mutated copies of the real logs (../shared/real_logs/*/log.txt).

    python benchmarks/triage_real.py [--copies 4] [--seed 0] [--show] [--logs DIR]

`--logs` takes another folder laid out like real_logs (<case>/log.txt): a held-out set of logs the
tool was never tuned on measures how grouping generalises.

Each real log gets `--copies` mutated copies: the triage benchmark's mutations (sizes, PIDs,
timestamps, line numbers, homes, padding, rank prefixes, encodings; not its wrap) and then the way a
terminal shows a log: colour on lines and spans (fuzz.inject_ansi), then in half the copies one hard
wrap at 80 to 200 columns (a wrapped original: at its own width) in which escape codes take no
column (fuzz.hard_wrap). Truth is the group the unmutated log
joins when the originals are triaged alone (like peek.py, one label per log: its own diagnosis);
copies whose own diagnosis differs from their original's count as misses of the reader, reported
apart so grouping is judged on its own.

Recall: the share of copies that sit in their original's group. Purity: the share of grouped files
in a group whose majority truth is their own.
"""

import argparse
import random
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
REAL = ROOT.parent / "shared" / "real_logs"


def terminal(text, rng, width=None):
    """What a terminal and a copy-paste do to a log after the run's own differences: colour, then one
    hard wrap at the terminal's width (the original's, when it was a wrapped paste) in which escape
    codes take no column."""
    import fuzz
    if rng.random() < 0.4:
        text = fuzz.inject_ansi(text, rng)
    if width or rng.random() < 0.5:
        text = fuzz.hard_wrap(text, width or rng.randint(80, 200))
    return text


def main():
    import triage_bench as tb
    from advisor.evidence.lines import detect_wrap_width
    from advisor.triage.run import run_triage
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--show", action="store_true", help="list every copy that left its original's group")
    ap.add_argument("--keep", metavar="DIR", help="write the copies into DIR and keep them")
    ap.add_argument("--logs", metavar="DIR", type=Path, default=REAL, help="the folder of <case>/log.txt (default: real_logs)")
    args = ap.parse_args()
    originals = sorted(args.logs.glob("*/log.txt"))
    alone = run_triage([str(p) for p in originals], jobs=args.jobs)
    truth_of = {m: g["id"] for g in alone["groups"] for m in g["members"]}
    key_of = {m: (g["verdict"], g["rule"], g["phase"], g["component"]) for g in alone["groups"] for m in g["members"]}
    rng = random.Random(args.seed)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="oom-triage-real-"))
    folder.mkdir(parents=True, exist_ok=True)
    origin = {}
    for p in originals:
        text = tb._decode(p.read_bytes())
        width = detect_wrap_width([len(ln) for ln in text.split("\n")])
        for k in range(args.copies):
            data, enc = tb.mutate(text, rng, target=rng.choice([0, 5000, 20000]), wrap=False)
            copy = terminal(data.decode(enc, errors="replace").replace("\r\n", "\n"), rng, width)
            out = folder / f"{p.parent.name}-{k}.log"
            out.write_bytes(copy.encode(enc, errors="replace"))
            if (p.parent / "config.yaml").exists():     # the same report: its config travels with the copy
                shutil.copy(p.parent / "config.yaml", out.with_suffix(".yaml"))
            origin[str(out)] = str(p)
    report = run_triage([str(p) for p in originals] + [str(folder)], jobs=args.jobs)
    group_of = {m: g for g in report["groups"] for m in g["members"]}
    copies = list(origin)
    same_key = [c for c in copies if c in group_of and
                (group_of[c]["verdict"], group_of[c]["rule"], group_of[c]["phase"], group_of[c]["component"])
                == key_of.get(origin[c])]
    hit = [c for c in copies if c in group_of and group_of[c] is group_of.get(origin[c])]
    hit_k = [c for c in same_key if group_of[c] is group_of.get(origin[c])]
    labels = {**{o: truth_of[o] for o in map(str, originals) if o in truth_of},
              **{c: truth_of.get(origin[c]) for c in copies}}
    by_group = [Counter(labels[m] for m in g["members"] if m in labels) for g in report["groups"]]
    grouped = sum(sum(c.values()) for c in by_group)
    purity = sum(max(c.values()) for c in by_group if c) / max(grouped, 1)
    print(f"{len(originals)} real logs, {len(copies)} mutated copies -> {len(report['groups'])} groups "
          f"(originals alone: {len(alone['groups'])})")
    print(f"recall {len(hit) / len(copies):.2%}   purity {purity:.2%}")
    print(f"grouping alone (copies diagnosed like their original, {len(same_key)}/{len(copies)}): "
          f"recall {len(hit_k) / max(len(same_key), 1):.2%}")
    if args.show:
        for c in sorted(set(same_key) - set(hit_k)):
            print(f"  split: {Path(c).name}: {group_of[c]['signature'][:90]!r}\n"
                  f"         original: {group_of[origin[c]]['signature'][:90]!r}")
        for c in sorted(set(copies) - set(same_key)):
            g, o = group_of.get(c), group_of.get(origin[c])
            print(f"  rediagnosed: {Path(c).name}: {g and (g['rule'], g['phase'], g['component'])} "
                  f"vs {o and (o['rule'], o['phase'], o['component'])}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
