"""Triage v2 (issue 16): ids that survive new files, replies a desk can post as they are, members in
every format, and a signature that wraps, colours and launcher tails do not split."""

import csv
import io
import json
import re

import pytest

from conftest import SAMPLES

from advisor.triage.grouping import _phrase, group, id_key
from advisor.triage.render import render_report
from advisor.triage.run import run_triage


def _d(src, phrase="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", frames=(), **kw):
    ev = [{"line": 1, "text": phrase, "marker": "oom_error"}] if phrase else []
    ev += [{"line": 2, "text": f"/x/{f}: {fn} — pass", "marker": "frame"} for f, fn in frames]
    d = {"source": src, "verdict": "device_oom", "rule": "OOM203", "phase": "first_step", "component": "activations",
         "accelerator": "cuda", "evidence": ev, "memory": {"tried_gib": 2.0, "total_gib": 79.15}, "facts": {}}
    return {**d, **kw}


# ---- stable ids ----------------------------------------------------------------------------------------

def test_adding_files_keeps_every_groups_id_unless_the_report_names_a_merge():
    samples = sorted(SAMPLES.glob("*.log"))
    a = run_triage([str(p) for p in samples[::2]], jobs=1)
    ab = run_triage([str(p) for p in samples], jobs=1)
    named = {i for g in ab["groups"] for i in [g["id"]] + g["aliases"]}
    for g in a["groups"]:
        assert g["id"] in named, f"group {g['id']} ({g['signature']}) lost its id"


def test_a_new_signature_that_joins_a_group_lists_the_old_id():
    frames = [("modeling_llama.py", "forward"), ("linear.py", "forward"), ("functional.py", "linear")]
    old = group([_d("a.log", frames=frames)])
    near = frames[:2] + [("functional.py", "linearx")]      # close enough to join
    new = group([_d("a.log", frames=frames), _d("b.log", frames=near)])
    assert len(new) == 1 and old[0].id in [new[0].id] + new[0].aliases


def test_the_id_is_the_signatures_own_not_the_most_common_members():
    f1 = [("a.py", "forward"), ("b.py", "forward"), ("c.py", "inner")]
    f2 = [("a.py", "forward"), ("b.py", "forward"), ("c.py", "innerx")]
    one = group([_d("1", frames=f1), _d("2", frames=f2)])
    other = group([_d("1", frames=f1), _d("2", frames=f2), _d("3", frames=f2), _d("4", frames=f2)])
    assert one[0].id == other[0].id


# ---- a component decided by sizes alone --------------------------------------------------------------

def _sized(src, component="unknown", basis="nothing in the log names it", **kw):
    """A copy whose component only its sizes decided (a tensor shape, a budget term) or nothing did."""
    return _d(src, component=component, basis={"component": basis}, **kw)


_SHAPE = "tensor shape: the request is the logits 4×1024×256000 in fp32"


def test_a_component_only_sizes_decided_does_not_split_a_group():
    named = _d("a.log", basis={"component": "quoted call run_backward("})
    others = [_sized("b.log"), _sized("c.log", "optimizer_states", "tensor shape: the request is an fp32 state")]
    groups = {g.component: g for g in group([named] + others)}
    g = groups["activations"]
    assert g.count == 2 and g.members == ["a.log", "c.log"] and g.representative == "a.log"
    # b's own evidence names nothing: it is never told another member's cause (issue 37)
    assert groups["unknown"].members == ["b.log"]


def test_copies_decided_by_sizes_alone_stay_together_under_their_most_common_component():
    groups = {g.component: g for g in group([_sized("a", "activations", _SHAPE), _sized("b"),
                                             _sized("c", "activations", _SHAPE)])}
    assert groups["activations"].members == ["a", "c"] and groups["unknown"].members == ["b"]


def test_components_the_log_names_still_split_and_an_unnamed_one_stays_apart_from_two():
    frame = {"component": "frame modeling_llama.py forward"}
    groups = group([_d("a", component="weights", basis=frame), _d("b", basis=frame), _sized("c")])
    assert sorted((g.component, g.members[0]) for g in groups) == [("activations", "b"), ("unknown", "c"),
                                                                     ("weights", "a")]


def test_a_named_member_joining_copies_decided_by_sizes_keeps_their_id():
    before = group([_sized("b", "activations", _SHAPE), _sized("c", "activations", _SHAPE)])
    after = group([_sized("b", "activations", _SHAPE), _sized("c", "activations", _SHAPE),
                   _d("a", basis={"component": "quoted call x("})])
    assert len(before) == len(after) == 1 and before[0].id in [after[0].id] + after[0].aliases
    assert id_key(_sized("x", "activations", _SHAPE)) == id_key(_sized("y"))      # one fingerprint either way


def test_partitions_of_copies_decided_by_sizes_merge_to_the_one_pass_grouping():
    from advisor.triage import batch
    from advisor.triage.grouping import signature, weak_component
    rows = [_sized(f"{i}.log", ("unknown", "activations", "optimizer_states")[i % 3], _SHAPE) for i in range(9)]
    rows += [_d("named.log", basis={"component": "quoted call x("})]
    for r in rows:
        r.update(signature=signature(r), component_weak=weak_component(r), mtime=None)
    whole = batch.finish(batch.partial(rows))
    parts = batch.merge_groupings([batch.partial(rows[i::3]) for i in range(3)])
    assert json.dumps(batch.finish(parts), sort_keys=True) == json.dumps(whole, sort_keys=True)
    assert [(g["component"], g["count"]) for g in whole["groups"]] == [("activations", 7), ("unknown", 3)]


# ---- replies ---------------------------------------------------------------------------------------------

def test_a_bare_oom_line_is_asked_for_its_traceback_not_told_to_halve_the_batch(tmp_path):
    log = tmp_path / "bare.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total "
                   "capacity of 39.39 GiB of which 20.00 MiB is free.\n")
    for lang, ask in (("en", "traceback"), ("zh", "调用栈")):
        g = run_triage([str(log)], lang, jobs=1)["groups"][0]
        assert g["needs_info"] and "traceback" in g["needs"]
        assert ask in g["reply"] and "halve" not in g["reply"] and "减半" not in g["reply"]
        assert "1.16 GiB" in g["reply"] and "39.39 GiB" in g["reply"]


def test_replies_quote_a_real_member_and_never_a_placeholder():
    paths = [str(p) for p in sorted(SAMPLES.glob("*.log"))]
    for lang in ("en", "zh"):
        r = run_triage(paths, lang, jobs=1)
        for g in r["groups"]:
            assert "?" not in g["reply"].replace("?it/s", ""), g["reply"]
            assert "oom-doctor explain" not in g["reply"] and "evidence" not in g["reply"], g["reply"]
            for x in re.findall(r"\d+\.\d\d GiB", g["reply"]):     # a size the representative itself has
                rep_sizes = {f"{v:.2f} GiB" for v in g["memory"].values() if isinstance(v, (int, float))}
                assert x in rep_sizes or x in json.dumps(g), (x, g["reply"])


def test_each_member_gets_a_reply_with_its_own_numbers(tmp_path):
    text = (SAMPLES / "fragmentation-expandable.log").read_text()
    assert "Tried to allocate 3.27 GiB" in text and "total capacity of 79.19 GiB" in text
    copies = {"a.log": ("3.27", "79.19"), "b.log": ("2.50", "39.39"), "c.log": ("4.10", "23.65")}
    for name, (tried, total) in copies.items():
        (tmp_path / name).write_text(text.replace("3.27 GiB", f"{tried} GiB").replace("79.19 GiB", f"{total} GiB"))
    r = run_triage([str(tmp_path)], jobs=1)
    (g,) = r["groups"]
    assert [x["source"] for x in g["replies"]] == g["members"]
    own = {x["source"].rsplit("/", 1)[-1]: x for x in g["replies"]}
    for name, (tried, total) in copies.items():
        reply = own[name]["reply"]
        assert (own[name]["tried_gib"], own[name]["total_gib"]) == (float(tried), float(total))
        assert [t for t, _ in copies.values() if f"{t} GiB" in reply] == [tried], reply
    assert own[g["representative"].rsplit("/", 1)[-1]]["reply"] == g["reply"]
    rows = [row for row in csv.DictReader(io.StringIO(render_report(r, "csv"))) if row["kind"] == "member"]
    assert {row["representative"].rsplit("/", 1)[-1]: (row["tried_gib"], row["reply"]) for row in rows} == \
        {n: (str(x["tried_gib"]), x["reply"]) for n, x in own.items()}


def test_a_killed_run_is_never_in_the_healthy_group(tmp_path):
    healthy = tmp_path / "ok.log"
    healthy.write_text("{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n")
    killed = tmp_path / "killed.log"
    killed.write_text("{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
                      "  5%|▌         | 10/200 [00:10<03:10,  1.00s/it]Killed\n")
    r = run_triage([str(healthy), str(killed)], jobs=1)
    group_of = {m: g for g in r["groups"] for m in g["members"]}
    assert group_of[str(healthy)]["id"] != group_of[str(killed)]["id"]
    for g in r["groups"]:
        assert "looks healthy" not in g["reply"]
    assert "dmesg" in group_of[str(killed)]["reply"]


# ---- members everywhere --------------------------------------------------------------------------------

def test_table_markdown_and_csv_list_members_bounded():
    r = run_triage([str(SAMPLES)], jobs=1)
    big = max(r["groups"], key=lambda g: g["count"])
    for fmt in ("table", "markdown"):
        out = render_report(r, fmt)
        assert f"({big['count']})" in out and big["members"][0].rsplit("/", 1)[-1] in out
    assert "<details>" in render_report(r, "markdown")
    rows = list(csv.DictReader(io.StringIO(render_report(r, "csv"))))
    members = [row for row in rows if row["kind"] == "member"]
    assert sorted(row["representative"] for row in members) == sorted(m for g in r["groups"] for m in g["members"])


# ---- the signature ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "rch.OutOfMemoryError: CUDA out of memory. Tried",                      # a wrap cut `to|rch.`
    "torch.OutOfMemoryError: CUDA out of memo",                             # a wrap cut the phrase
    " 5%|▌   | 10/200 [00:10<00:20, 1.2it/s]torch.OutOfMemoryError: CUDA out of memory.",   # a glued bar
])
def test_one_oom_phrase_whatever_the_terminal_did(text):
    assert _phrase(text) == "OutOfMemoryError: CUDA out of memory"


def test_a_launcher_tail_is_not_part_of_the_signature():
    a = _phrase("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 4711) of binary: /usr/bin/python3")
    b = _phrase("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 99) of binary: /opt/conda/bin/python")
    assert a == b and "binary" not in a


def test_an_argument_list_a_wrap_cut_does_not_split_the_phrase():
    """A long phrase ends before its argument list: the values vary by rank and op, and a wrap that was
    not re-joined cuts it first."""
    whole = ("[E1123 00:52:57.66 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=1516, OpType=ALLREDUCE, NumelIn=25427968, Timeout(ms)=600000) ran for 600017 milliseconds")
    cut = whole[:whole.index("OpType")]
    assert _phrase(whole) == _phrase(cut) and _phrase(whole).endswith("timeout: WorkNCCL")
    # a short message keeps its parentheses: there they are the detail that tells failures apart
    assert _phrase("ValueError: bad shape (3, 4)") == "ValueError: bad shape (#, #)"


def test_a_long_phrase_meets_its_copy_with_a_frame_the_original_lacks():
    """Copies of one report, one of which shows a frame (a wrap made a line of it): a long phrase is a
    block of its own, so they are compared and join; a short one does not pull framed reports in."""
    long_phrase = ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 899505 closing signal "
                   "SIGTERM WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 899506 closing signal")
    kw = dict(verdict="host_oom", rule="OOM602", phase="load", component="host_memory")
    groups = group([_d("a.log", long_phrase, **kw), _d("b.log", long_phrase, frames=[("torchrun", "<module>")], **kw)])
    assert len(groups) == 1
    short = group([_d("c.log"), _d("d.log", frames=[("trainer.py", "training_step")])])
    assert len(short) == 2


def test_a_groups_dict_is_what_asdict_gives():
    from dataclasses import asdict
    from advisor.triage import batch
    rows = [batch.diagnose_item(str(p), str(p)) for p in sorted(SAMPLES.glob("*.log"))]
    groups = group([r for r in rows if "error" not in r])
    assert groups and all(g.to_dict() == asdict(g) for g in groups)
