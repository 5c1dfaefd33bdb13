"""The batch API (issue 17): partitions' partial groupings merge to exactly the one-pass report,
whatever the cut; a row's fingerprint depends on its failure only, never on the file around it."""

import json
import random
import sys
from pathlib import Path

import pytest

from advisor.triage import batch
from advisor.triage.batch import FINGERPRINT_VERSION
from advisor.triage.grouping import group, summary
from advisor.triage.run import run_triage

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from triage_bench import generate  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~120 mutated copies of the samples (many per cause, other sizes each) and a broken link."""
    folder = tmp_path_factory.mktemp("batch")
    generate(120, folder, seed=7, variants=40)
    (folder / "broken.log").symlink_to(folder / "gone.log")       # a file that cannot be read: an error row
    paths = sorted(str(p) for p in folder.iterdir())
    rows = batch.diagnose_batch([(p, p) for p in paths])
    return folder, paths, rows


def _one_pass(rows):
    """The grouping as triage did it before the batch API: every full diagnosis in one list."""
    ok = [r for r in rows if "error" not in r]
    errors = [{"path": r["id"], "error": r["error"]} for r in rows if "error" in r]
    groups = group(ok)
    return {"schema": "oom-doctor/triage/v1", "summary": summary(ok, errors, groups),
            "groups": [g.to_dict() for g in groups], "errors": errors}


def _dump(report):
    return json.dumps(report, sort_keys=True, ensure_ascii=False)


def test_rows_are_flat_and_fingerprinted(corpus):
    _, paths, rows = corpus
    assert [r["id"] for r in rows] == paths
    errors = [r for r in rows if "error" in r]
    assert [r["id"] for r in errors] == [p for p in paths if p.endswith("broken.log")]
    for r in rows:
        if "error" not in r:
            assert r["source"] == r["id"] and r["fingerprint"].startswith(FINGERPRINT_VERSION + ":")
            assert {"verdict", "rule", "phase", "component", "accelerator", "memory", "signature"} <= set(r)


def test_partial_of_everything_equals_one_pass(corpus):
    rows = corpus[2]
    assert _dump(batch.finish(batch.partial(rows))) == _dump(_one_pass(rows))


@pytest.mark.parametrize("seed", range(6))
def test_random_partitions_merge_to_the_one_pass_result(corpus, seed):
    rows = corpus[2]
    rng = random.Random(seed)
    shuffled = rows[:]
    rng.shuffle(shuffled)
    cuts = sorted(rng.sample(range(1, len(rows)), rng.randint(1, 12)))
    parts = [shuffled[a:b] for a, b in zip([0] + cuts, cuts + [len(rows)])]
    merged = batch.merge_groupings([batch.partial(p) for p in parts])
    want = _one_pass(rows)
    got = batch.finish(merged)
    # errors follow the parts' order; everything else is the one-pass result exactly
    assert sorted(map(_dump, got.pop("errors"))) == sorted(map(_dump, want.pop("errors")))
    assert _dump(got) == _dump(want)
    # merging is associative: merged halves give the same report as the flat merge
    half = len(parts) // 2 or 1
    nested = batch.merge_groupings([batch.merge_groupings([batch.partial(p) for p in parts[:half]]),
                                    batch.merge_groupings([batch.partial(p) for p in parts[half:]])])
    assert _dump(batch.finish(nested)["groups"]) == _dump(got["groups"])


def test_the_reducer_keeps_few_full_rows(corpus):
    """Stand-ins replace every member that cannot become a representative."""
    rows = corpus[2]
    state = batch.partial(rows)
    full = sum(len(slot["full"]) for sigs in state["keys"].values() for slot in sigs.values())
    members = sum(len(slot["members"]) for sigs in state["keys"].values() for slot in sigs.values())
    assert members == sum(1 for r in rows if "error" not in r)
    assert full < members


def test_local_engine_report_is_the_batch_report(corpus):
    folder, paths, rows = corpus
    local = run_triage([str(folder)], jobs=2)
    by_path = {r["id"]: r for r in rows}
    assert _dump(local) == _dump(_one_pass([by_path[p] for p in sorted(by_path)]))


def test_fingerprint_is_stable(corpus, tmp_path):
    folder, paths, rows = corpus
    row = next(r for r in rows if "error" not in r and r["verdict"] == "device_oom")
    data = Path(row["id"]).read_bytes()
    from_bytes = batch.diagnose_item("elsewhere/any-name.log", data)
    assert from_bytes["fingerprint"] == row["fingerprint"]            # the path does not enter it
    assert from_bytes["source"] == "elsewhere/any-name.log"
    copy = tmp_path / "copy.txt"
    copy.write_bytes(data)
    assert batch.diagnose_item(str(copy), str(copy))["fingerprint"] == row["fingerprint"]
    # one signature alone: its group's id is the fingerprint's hash
    single = batch.finish(batch.partial([row]))["groups"][0]
    assert row["fingerprint"] == FINGERPRINT_VERSION + ":" + single["id"]
    # other failures have other fingerprints
    others = {r["fingerprint"] for r in rows if "error" not in r and r["signature"] != row["signature"]}
    assert row["fingerprint"] not in others


def test_bytes_and_paths_give_the_same_rows(corpus):
    _, paths, rows = corpus
    for r in rows[:20]:
        if "error" in r:
            continue
        again = batch.diagnose_item(r["id"], Path(r["id"]).read_bytes())
        assert {k: v for k, v in again.items() if k != "mtime"} == {k: v for k, v in r.items() if k != "mtime"}
