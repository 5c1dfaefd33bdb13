"""The shipped JSON snapshot of rules and catalogues must match its YAML sources."""

from advisor.cli import compile as compiled


def test_snapshot_is_fresh():
    assert compiled.main(["--check"]) == 0, "run: python -m advisor.cli.compile"


def test_snapshot_matches_a_fresh_build():
    import json
    shipped = json.loads(compiled.SNAPSHOT.read_text(encoding="utf-8"))
    assert shipped == json.loads(json.dumps(compiled.build()))
