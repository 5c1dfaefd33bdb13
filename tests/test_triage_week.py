"""Week over week (issue 16): a report compared with last week's, and filtered views of it."""

import csv
import io
import json

from click.testing import CliRunner

from conftest import SAMPLES

from advisor.triage.render import render_report
from advisor.triage.run import run_triage
from advisor.cli.triage import triage
from advisor.triage.week import apply_filters, compare


def _g(gid, count, aliases=(), verdict="device_oom", rule="OOM201"):
    return {"id": gid, "count": count, "aliases": list(aliases), "verdict": verdict, "rule": rule, "title": gid}


def test_each_group_is_new_grown_shrunk_or_same_and_the_lost_ones_are_gone():
    last = {"schema": "oom-doctor/triage/v1", "groups": [_g("a", 3), _g("b", 5), _g("c", 2), _g("d", 1)]}
    now = {"groups": [_g("a", 4), _g("b", 2), _g("c", 2), _g("e", 7)]}
    ch = compare(now, last, "last.json")["change"]
    assert [c["id"] for c in ch["new"]] == ["e"] and [c["id"] for c in ch["grown"]] == ["a"]
    assert ch["shrunk"] == [{"id": "b", "was": 5, "now": 2}] and [c["id"] for c in ch["same"]] == ["c"]
    assert [g["id"] for g in ch["gone"]] == ["d"] and ch["merged"] == []
    assert [(g["change"], g["was"]) for g in now["groups"]] == [("grown", 3), ("shrunk", 5), ("same", 2), ("new", 0)]


def test_a_group_found_by_alias_is_the_same_group_and_two_old_ones_in_one_is_a_merge():
    last = {"schema": "oom-doctor/triage/v1", "groups": [_g("m", 2), _g("n", 3)]}
    now = {"groups": [_g("k", 6, aliases=("m", "n"))]}      # a new, smaller signature id joined both
    ch = compare(now, last, "last.json")["change"]
    # the merged group keeps the larger old group's id; the new one is among its aliases
    assert ch["merged"] == [{"id": "n", "from": ["m", "n"]}] and ch["gone"] == []
    assert ch["grown"] == [{"id": "n", "was": 5, "now": 6}]
    assert now["groups"][0]["aliases"] == ["k", "m"]


def test_a_group_that_grew_a_smaller_signature_keeps_last_weeks_id():
    last = {"schema": "oom-doctor/triage/v1", "groups": [_g("m", 2)]}
    now = {"groups": [_g("b", 3, aliases=("m",))]}          # "b" < "m": grouping alone would rename it
    compare(now, last, "last.json")
    assert now["groups"][0]["id"] == "m" and now["groups"][0]["aliases"] == ["b"]


def test_filters_keep_what_matches_every_filter_and_say_what_they_left_out():
    r = {"groups": [_g("a", 5), _g("b", 1), _g("c", 4, verdict="not_oom", rule="OOM901")]}
    apply_filters(r, verdicts=("device_oom",), min_count=2)
    assert [g["id"] for g in r["groups"]] == ["a"]
    assert r["filtered_out"]["groups"] == 2 and r["filtered_out"]["files"] == 5
    r = {"groups": [_g("a", 5), _g("c", 4, rule="OOM901")]}
    assert [g["id"] for g in apply_filters(r, rules=("OOM901",))["groups"]] == ["c"]
    r = {"groups": [_g("a", 5)]}
    assert "filtered_out" not in apply_filters(r)


def test_cli_baseline_from_last_week_marks_the_new_groups_in_json_table_and_csv(tmp_path):
    samples = sorted(SAMPLES.glob("*.log"))
    week1 = tmp_path / "week1.json"
    week1.write_text(json.dumps(run_triage([str(p) for p in samples[::2]], jobs=1)), encoding="utf-8")
    both = run_triage([str(p) for p in samples], jobs=1)
    res = CliRunner().invoke(triage, [*map(str, samples), "-j", "1", "--format", "json",
                                    "--baseline", str(week1)])
    assert res.exit_code == 1, res.output
    r = json.loads(res.output)
    old_ids = {i for g in json.loads(week1.read_text())["groups"] for i in [g["id"]] + g["aliases"]}
    for g in r["groups"]:
        assert (g["change"] == "new") == (not ({g["id"], *g["aliases"]} & old_ids))
    assert r["change"]["gone"] == []                # only files were added: nothing can be gone
    assert len(r["groups"]) == len(both["groups"])
    new_ids = {c["id"] for c in r["change"]["new"]}
    assert new_ids, "the odd samples bring failures the even ones lack"
    table = render_report(r, "table")
    assert f"new {len(new_ids)}" in table and all(f"[{i}]" in table for i in new_ids)
    rows = list(csv.reader(io.StringIO(render_report(r, "csv"))))
    assert rows[0][-2:] == ["change", "was"] and len({len(row) for row in rows}) == 1


def test_a_filtered_view_keeps_the_exit_code_of_every_file(tmp_path):
    samples = [str(p) for p in sorted(SAMPLES.glob("*.log"))]
    res = CliRunner().invoke(triage, [*samples, "-j", "1", "--format", "json", "--verdict", "not_oom"])
    r = json.loads(res.output)
    assert res.exit_code == 1            # the OOMs are still there, only not shown
    assert r["groups"] and all(g["verdict"] == "not_oom" for g in r["groups"])
    assert r["filtered_out"]["files"] + sum(g["count"] for g in r["groups"]) == r["summary"]["diagnosed"]


def test_a_baseline_that_is_not_a_report_is_a_one_line_usage_error(tmp_path):
    bad = tmp_path / "b.json"
    for text in ("{not json", json.dumps({"groups": []}), json.dumps([1, 2])):
        bad.write_text(text, encoding="utf-8")
        res = CliRunner().invoke(triage, [str(SAMPLES), "--baseline", str(bad)])
        assert res.exit_code == 2 and "baseline" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(triage, [str(SAMPLES), "--baseline", str(tmp_path / "missing.json")])
    assert res.exit_code == 2
