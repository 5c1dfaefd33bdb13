"""Issue trackers as triage input (issue 16): gh and REST exports and markdown, one report per issue,
its logs from code fences and <details> blocks, a config block as its config, the URL as the member."""

import json

from click.testing import CliRunner

from conftest import SAMPLES

from advisor.triage.issues import blocks_of, report_of, reports_in
from advisor.cli.triage import triage

LOG = (SAMPLES / "lf-first-step-activations.log").read_text(encoding="utf-8")
CFG = (SAMPLES / "lf-first-step-activations.yaml").read_text(encoding="utf-8")
NOT_OOM = (SAMPLES / "nccl-timeout-not-oom.log").read_text(encoding="utf-8") \
    if (SAMPLES / "nccl-timeout-not-oom.log").exists() else None


def _fence(body, info=""):
    return f"```{info}\n{body}\n```"


def _gh_export():
    return [
        {"number": 1, "title": "OOM on first step", "url": "https://github.com/o/r/issues/1",
         "body": "I ran this:\n\n" + _fence(CFG, "yaml") + "\n\nand got\n\n" + _fence(LOG),
         "comments": [{"body": "same here"}]},
        {"number": 2, "title": "OOM too", "url": "https://github.com/o/r/issues/2",
         "body": "log below", "comments": [{"body": "<details><summary>log</summary>\n\n" + _fence(LOG) + "\n</details>"}]},
        {"number": 3, "title": "help", "url": "https://github.com/o/r/issues/3", "body": "it crashed, please help",
         "comments": []},
    ]


def test_blocks_come_in_order_and_a_fence_inside_details_counts_once():
    text = "a\n<details><summary>x</summary>\n\n```\nL1\n```\n</details>\n<details>raw L2</details>\n~~~yaml\nk: v\n~~~\n"
    assert blocks_of(text) == [("", "L1"), ("", "raw L2"), ("yaml", "k: v")]


def test_a_config_block_is_the_config_and_the_rest_is_the_log():
    log, config, suffix = report_of(["run:\n" + _fence(CFG, "yaml"), _fence("Traceback (most recent call last):\nx")])
    assert config == CFG.rstrip("\n") and suffix == ".yaml" and log.startswith(b"Traceback")
    # an untagged block of key: value lines is a config too; one with an error in it is not
    log, config, _ = report_of([_fence("a: 1\nb: 2\nc: 3"), _fence("a: 1\nRuntimeError: CUDA out of memory\nc: 3")])
    assert config == "a: 1\nb: 2\nc: 3" and b"RuntimeError" in log


def test_gh_export_one_member_per_issue_named_by_its_url_with_its_config(tmp_path):
    export = tmp_path / "issues.json"
    export.write_text(json.dumps(_gh_export()), encoding="utf-8")
    res = CliRunner().invoke(triage, ["--issues", str(export), "--format", "json", "-j", "1"])
    assert res.exit_code == 1, res.output
    r = json.loads(res.output)
    members = sorted(m for g in r["groups"] for m in g["members"])
    assert members == [f"https://github.com/o/r/issues/{n}" for n in (1, 2, 3)]
    oom = next(g for g in r["groups"] if "https://github.com/o/r/issues/1" in g["members"])
    assert oom["verdict"] == "device_oom" and "https://github.com/o/r/issues/2" in oom["members"]
    assert oom["reply"] and "?" not in oom["reply"]
    chat = next(g for g in r["groups"] if "https://github.com/o/r/issues/3" in g["members"])
    assert chat["verdict"] != "device_oom"       # prose only: nothing to diagnose, the reply asks


def test_rest_issue_and_comments_and_markdown(tmp_path):
    issue = {"html_url": "https://github.com/o/r/issues/9", "url": "https://api.github.com/repos/o/r/issues/9",
             "number": 9, "body": _fence(LOG)}
    (tmp_path / "issue.json").write_text(json.dumps(issue), encoding="utf-8")
    assert [r[0] for r in reports_in(str(tmp_path / "issue.json"))] == ["https://github.com/o/r/issues/9"]
    comments = [{"issue_url": "https://api.github.com/repos/o/r/issues/9", "body": "x"},
                {"issue_url": "https://api.github.com/repos/o/r/issues/9", "body": _fence(LOG)}]
    (tmp_path / "comments.json").write_text(json.dumps(comments), encoding="utf-8")
    (name, log, config, _), = reports_in(str(tmp_path / "comments.json"))
    assert name.endswith("/issues/9") and b"out of memory" in log and config is None
    md = tmp_path / "report.md"
    md.write_text("# my run\n\n" + _fence(LOG, "text") + "\n", encoding="utf-8")
    (name, log, _, _), = reports_in(str(md))
    assert name == str(md) and log.decode().strip() == LOG.strip()


def test_a_file_that_is_not_an_export_is_an_error_line_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"title": "no body"}', encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    res = CliRunner().invoke(triage, ["--issues", str(bad), str(broken), "--format", "json"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    r = json.loads(res.output)
    assert {e["path"] for e in r["errors"]} == {str(bad), str(broken)}


def test_the_issues_config_block_is_used_as_its_config(tmp_path):
    from advisor.triage.issues import diagnose_reports
    export = tmp_path / "issues.json"
    export.write_text(json.dumps(_gh_export()[:2]), encoding="utf-8")
    rows, errors = diagnose_reports([str(export)])
    with_cfg, without = rows
    assert errors == [] and with_cfg["config"] == "from the issue" and "config" not in without
    # the config says checkpointing is off: only the issue that pasted it is offered checkpointing
    assert "grad_checkpointing" in [s["action"] for s in with_cfg["plan"]]
    assert "grad_checkpointing" not in [s["action"] for s in without["plan"]]
