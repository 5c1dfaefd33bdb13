"""Every rule's own samples: trigger ones must be decided by it, ignore ones must not."""

import pytest
from conftest import alternatives, opens_with_literal

from advisor.pipeline import diagnose_text
from advisor.diagnosis.rules import ACTIONS, load_rules

RULES = load_rules()
CASES = [(r.id, "trigger", i, s) for r in RULES for i, s in enumerate(r.samples.trigger)] + \
        [(r.id, "ignore", i, s) for r in RULES for i, s in enumerate(r.samples.ignore)]


@pytest.mark.parametrize("rule_id,kind,index,sample", CASES, ids=[f"{c[0]}-{c[1]}{c[2]}" for c in CASES])
def test_rule_sample(rule_id, kind, index, sample):
    d = diagnose_text(sample, with_plan=False)
    if kind == "trigger":
        assert d.rule == rule_id, f"expected {rule_id}, got {d.rule}: {d.summary}"
    else:
        assert d.rule != rule_id


def test_every_rule_has_samples_both_ways():
    for r in RULES:
        assert r.samples.trigger, r.id
        assert r.samples.ignore, r.id


def test_ids_are_unique_and_priorities_break_ties():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    # two rules that can match the same signal must not share a priority, or file order would decide
    by_prio = {}
    for r in RULES:
        for s in {s.split(":")[0] for s in r.when.signal or ["*"]}:
            by_prio.setdefault((s, r.priority), []).append(r.id)
    clashes = {k: v for k, v in by_prio.items() if len(v) > 1 and k[0] != "error"}
    assert not clashes, clashes


def test_rule_actions_are_in_the_vocabulary():
    for r in RULES:
        assert all(a in ACTIONS for a in r.actions), r.id


def test_broken_rule_file_names_file_and_field(tmp_path):
    from advisor.diagnosis.rules import RuleError
    (tmp_path / "OOM777.yaml").write_text("id: OOM777\nname: x\npriority: 1\nverdict: maybe\n")
    with pytest.raises(RuleError) as e:
        load_rules.__wrapped__(tmp_path)
    assert "OOM777.yaml" in str(e.value)


def test_window_patterns_start_with_literal_text():
    # A window condition scans the whole failure window (hundreds of lines). Python's re finds a
    # pattern that opens with literal text by a fast substring search; a leading \b, group or
    # top-level alternation makes it try every position (~40x slower: 1 ms a log, measured).
    # Alternatives go in the list instead.
    for r in RULES:
        for cond in filter(None, (r.when, r.unless)):
            for p in cond.window or []:
                assert opens_with_literal(p) and len(alternatives(p)) == 1, (r.id, p)


def test_explain_leaves_no_placeholder_in_any_rule():
    """A rule's {tried}/{total}/{step} name a log's numbers; `explain` has no log, so letters stand in."""
    import re

    from advisor.diagnosis.rules import load_rules
    from advisor.render.rule_doc import explain_text
    rules = load_rules()
    with_numbers = [r for r in rules if "{" in r.summary.en + r.explanation.en]
    assert with_numbers                       # the check below has something to check
    for rule in rules:
        for lang in ("en", "zh"):
            text = explain_text(rule, lang)
            assert not re.search(r"\{\w+\}", text), (rule.id, lang)
    assert "N GiB" in explain_text(next(r for r in with_numbers if "{tried}" in r.summary.en), "en")
