"""The shipped samples: a person's expectations (log_samples/expectations.yaml) and reviewed goldens.

Goldens (`<slug>.expected.json`, `<slug>.expected.diff`) are rewritten with OOM_DOCTOR_BLESS=1
after a reviewed change; the expectations file is written by hand and never blessed.
"""

import json
import os
import shutil
import subprocess

import pytest

from advisor.pipeline import diagnose_path
from conftest import ROOT, SAMPLES

BLESS = os.environ.get("OOM_DOCTOR_BLESS") == "1"


def _expectations():
    from ruamel.yaml import YAML
    return YAML(typ="safe").load((SAMPLES / "expectations.yaml").read_text(encoding="utf-8"))


EXPECT = _expectations()
SLUGS = sorted(p.stem for p in SAMPLES.glob("*.log"))


def run(slug):
    cfg = EXPECT.get(slug, {}).get("config")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return diagnose_path(f"log_samples/{slug}.log", config_path=f"log_samples/{cfg}" if cfg else None)
    finally:
        os.chdir(cwd)


def projection(d):
    j = d.to_json_dict()
    keep = ("source", "verdict", "accelerator", "phase", "component", "rule", "confidence", "summary", "memory",
            "facts", "notes", "conflicts")
    out = {k: j[k] for k in keep}
    out["evidence_lines"] = [e["line"] for e in j["evidence"]]
    out["budget_total_gib"] = (j["budget"] or {}).get("total_gib")
    out["plan"] = [{k: s[k] for k in ("action", "changes", "fits_after", "applicability", "alternative")}
                   for s in j["plan"] or []]
    return out


def test_every_sample_has_expectations():
    assert len(SLUGS) >= 12
    assert set(SLUGS) == set(EXPECT), set(SLUGS) ^ set(EXPECT)


@pytest.mark.parametrize("slug", SLUGS)
def test_sample_matches_human_expectation(slug):
    e, d = EXPECT[slug], run(slug)
    assert (d.verdict, d.phase, d.component) == (e["verdict"], e["phase"], e["component"]), e.get("why")
    assert d.accelerator == e["accelerator"]
    first = d.plan[0]["action"] if d.plan else "none"
    assert first == e["first_action"]
    for key, value in (e.get("memory") or {}).items():
        assert d.memory[key] == pytest.approx(value, abs=max(0.011, 0.02 * value)), key
    if e.get("step") is not None:
        assert d.facts["step"] == e["step"]


@pytest.mark.parametrize("slug", SLUGS)
def test_sample_golden(slug):
    d = run(slug)
    got = projection(d)
    golden = SAMPLES / f"{slug}.expected.json"
    if BLESS or not golden.exists():
        golden.write_text(json.dumps(got, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    assert got == json.loads(golden.read_text(encoding="utf-8"))
    diff_golden = SAMPLES / f"{slug}.expected.diff"
    if d.patch:
        if BLESS or not diff_golden.exists():
            diff_golden.write_text(d.patch, encoding="utf-8")
        assert d.patch == diff_golden.read_text(encoding="utf-8")
    elif BLESS:
        diff_golden.unlink(missing_ok=True)       # a sample that lost its patch loses its golden diff too
    else:
        assert not diff_golden.exists()


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1)")
@pytest.mark.parametrize("slug", [s for s in SLUGS if (SAMPLES / f"{s}.expected.diff").exists()])
def test_golden_diff_applies_with_patch_p0(slug):
    diff = (SAMPLES / f"{slug}.expected.diff").read_bytes()
    p = subprocess.run(["patch", "-p0", "--dry-run"], input=diff, cwd=ROOT, capture_output=True)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
