"""Chinese output: reviewed goldens per format, typography and vocabulary over every sample in every
format, and the number statements of issue 22 in both languages.

Goldens live in tests/golden_zh/ and are rewritten with OOM_DOCTOR_BLESS=1 after a reviewed change.
The checks read the report's own prose: log lines quoted as evidence, the patch, code spans and
config keys are the user's text, not ours, and are taken out first.
"""

import html
import json
import os
import re
from pathlib import Path

import pytest

from advisor.core.i18n import ZH_AVOID
from conftest import ROOT, SAMPLES

BLESS = os.environ.get("OOM_DOCTOR_BLESS") == "1"
GOLDEN = Path(__file__).parent / "golden_zh"
FORMATS = {"text": "text", "markdown": "md", "json": "json", "html": "html"}
GOLDEN_SLUGS = ("lf-first-step-activations", "npu-oom", "other-process-nvml-lines", "ds-zero3-save-oom",
                "llamaboard-webui-zh", "fragmentation-expandable")
CJK = "\u4e00-\u9fff"


def _expectations():
    from ruamel.yaml import YAML
    return YAML(typ="safe").load((SAMPLES / "expectations.yaml").read_text(encoding="utf-8"))


EXPECT = _expectations()
SLUGS = sorted(EXPECT)


def diagnosis(slug, lang="zh"):
    from advisor.pipeline import diagnose_path
    cfg = EXPECT[slug].get("config")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return diagnose_path(f"log_samples/{slug}.log", config_path=f"log_samples/{cfg}" if cfg else None, lang=lang)
    finally:
        os.chdir(cwd)


def report(slug, fmt, lang="zh"):
    from advisor.render import render
    return render(diagnosis(slug, lang), fmt, lang)


# ---- the report's own prose -------------------------------------------------------------------------
def theirs(d):
    """Strings the report quotes from the user: log lines, the patch, config keys and values, paths."""
    out = [e.text[:200] for e in d.evidence] + [e.text[:160] for e in d.evidence]
    out += (d.patch or "").splitlines() + [d.source or ""]
    for step in d.plan or []:
        out += [f"{k}: " for k in step.get("changes") or {}]
    out += [str(v) for v in (d.facts or {}).values() if isinstance(v, str)]
    return sorted({s for s in out if s.strip()}, key=len, reverse=True)


def prose(text, fmt, quoted=()):
    if fmt == "html":
        text = re.sub(r"<style>.*?</style>|<code>.*?</code>|<pre.*?</pre>", " ", text, flags=re.S)
        text = html.unescape(re.sub(r"<[^>]+>", "\n", text))
    for s in quoted:
        text = text.replace(s, "Q")           # a placeholder that is neither space nor punctuation
    text = re.sub(r"`[^`\n]*`", "Q", text)                    # code spans: commands, keys, variables
    return text


def json_prose(text):
    j = json.loads(text)
    parts = [j.get("title") or "", j.get("summary") or "", j.get("explanation") or ""] + list(j.get("notes") or [])
    for step in j.get("plan") or []:
        parts += [step.get("why") or "", step.get("display") or ""]
    return "\n".join(parts)


def typography_faults(text):
    faults = []
    for pattern, what in ((rf"[{CJK}][:,]", "ASCII colon or comma after Chinese"),
                          (rf"[{CJK}][(\[]", "ASCII bracket after Chinese"),
                          (r"[、，。；：（][ \t]", "space after full-width punctuation"),
                          (r"(?<=\d) %", "space before %"),
                          (r"[^\s|][ \t]+（", "space before a full-width bracket"),
                          (rf"[{CJK}] [{CJK}]", "space between two Chinese characters"),
                          (rf"\[[^\]\n]*[{CJK}][^\]\n]*\]", "ASCII brackets around Chinese")):
        faults += [f"{what}: …{text[max(0, m.start() - 12):m.end() + 12]}…" for m in re.finditer(pattern, text)]
    return faults


def vocabulary_faults(text):
    from advisor.plans.plan import BUILDERS
    codes = "|".join(sorted(BUILDERS, key=len, reverse=True))
    faults = [f"action code without its Chinese name: …{text[max(0, m.start() - 12):m.end() + 12]}…"
              for m in re.finditer(rf"(?<![（\w=])({codes})(?![）\w:])", text)]
    for word, use in ZH_AVOID.items():
        pattern = rf"(?<![A-Za-z_]){re.escape(word)}(?![A-Za-z_])" if word[-1].isalpha() and word.isascii() \
            else re.escape(word)
        for m in re.finditer(pattern, text):
            faults.append(f"{word!r} (use {use}): …{text[max(0, m.start() - 12):m.end() + 12]}…")
    return faults


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("slug", SLUGS)
def test_zh_typography_and_vocabulary(slug, fmt):
    d = diagnosis(slug)
    from advisor.render import render
    out = render(d, fmt, "zh")
    text = json_prose(out) if fmt == "json" else prose(out, fmt, theirs(d))
    assert re.search(f"[{CJK}]", text), "a Chinese report"
    faults = typography_faults(text) + vocabulary_faults(text)
    assert faults == [], "\n".join(faults)


def test_every_rule_reads_well_in_chinese():
    from advisor.diagnosis.rules import load_rules
    faults = []
    for r in load_rules():
        for part in ("title", "summary", "explanation"):
            text = prose(getattr(r, part).zh, "text")
            faults += [f"{r.id} {part}: {f}" for f in typography_faults(text) + vocabulary_faults(text)]
    assert faults == [], "\n".join(faults)


def test_explain_and_rules_in_chinese():
    from advisor.render.rule_doc import explain_text
    from advisor.diagnosis.rules import load_rules
    faults = []
    for r in load_rules():
        text = explain_text(r, "zh")
        head, body = text.split("\n", 1)
        body = re.sub(r"(触发条件|例外条件)：.*", "", body)       # condition names are the rule file's keys
        body = re.sub(r"[（(][a-z_0-9]+[）)]", "", body)           # action codes in brackets
        faults += [f"{r.id}: {f}" for f in typography_faults(prose(body, "text")) + vocabulary_faults(prose(body, "text"))]
        assert "verdict:" not in text and "first moves" not in text and "matches when" not in text
    assert faults == [], "\n".join(faults)


def _budget(fmt, lang="zh", **kw):
    from advisor.memory.budget import estimate
    from advisor.render.budget_text import render_budget_text
    from advisor.render.html import render_budget_html
    from advisor.plans.runspec import spec_from_facts
    spec, notes = spec_from_facts({}, gpu=kw.pop("gpu", "4090"), model=kw.pop("model", "Qwen2.5-7B"),
                                  overrides=kw)
    b = estimate(spec)
    b.assumptions = notes + b.assumptions
    return render_budget_html(b, spec, lang) if fmt == "html" else render_budget_text(b, lang, fmt)


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
@pytest.mark.parametrize("kw", [{}, {"method": "full", "precision": "fp32", "batch": 4, "seq_len": 4096,
                                     "grad_ckpt": False, "num_gpus": 2, "deepspeed": "zero3_offload"},
                                {"method": "qlora", "quantization_bit": 4, "flash_attn": False}])
def test_budget_in_chinese(fmt, kw):
    text = prose(_budget(fmt, **kw), fmt)
    faults = typography_faults(text) + vocabulary_faults(text)
    assert faults == [], "\n".join(faults)
    assert "假设" in text and "可训练参数" in text


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_triage_in_chinese(fmt):
    from advisor.render.html import render_triage_html
    from advisor.triage.render import render_report
    from advisor.triage.run import run_triage
    r = run_triage([str(SAMPLES)], "zh", jobs=1)
    out = render_triage_html(r, "zh") if fmt == "html" else render_report(r, fmt, "zh")
    quoted = [g["signature"] for g in r["groups"] if g["signature"]] + \
        [m for g in r["groups"] for m in g["members"]]
    text = prose(out, fmt, sorted(set(quoted), key=len, reverse=True))
    faults = typography_faults(text) + vocabulary_faults(text)
    assert faults == [], "\n".join(faults)
    assert "分组依据" in text and "代表日志" in text


# ---- goldens ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("slug", GOLDEN_SLUGS)
def test_zh_golden(slug, fmt):
    got = report(slug, fmt)
    if fmt == "html":                       # the words, not the style sheet
        got = got[got.index("<body"):]
    golden = GOLDEN / f"{slug}.{FORMATS[fmt]}"
    if BLESS or not golden.exists():
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8")


# ---- numbers that say what they are (both languages) ------------------------------------------------
def _plan_lines(slug, lang):
    """The plan's numbered lines, each with the lines it wrapped onto (indented four spaces) joined back."""
    out = []
    for ln in report(slug, "text", lang).splitlines():
        if re.match(r"\s+\d+\. ", ln):
            out.append(ln.strip())
        elif out and re.match(r"    \S", ln):
            out[-1] += ("" if lang == "zh" else " ") + ln.strip()
    return out


@pytest.mark.parametrize("lang, first, later, alt", [
    ("en", "saves ~242.4 GiB — still short", "saves ~25.3 GiB on top of step 1 — fits with step 1 (20 % margin)",
     "on top of steps 1–2 — fits with steps 1–2"),
    ("zh", "节省约 242.4 GiB；仍然放不下", "在第 1 步之上再节省约 25.3 GiB；连同第 1 步放得下（留 20% 余量）",
     "在第 1–2 步之上再节省约 4.7 GiB；连同第 1–2 步放得下")])
def test_a_saving_says_what_it_is_on_top_of(lang, first, later, alt):
    lines = _plan_lines("lf-first-step-activations", lang)
    assert first in lines[0] and "step 1" not in lines[0] and "第 1 步" not in lines[0]
    assert later in lines[1]
    assert alt in lines[2] and ("alternative" in lines[2] or "备选" in lines[2])


@pytest.mark.parametrize("slug", SLUGS)
def test_no_step_saving_about_nothing_is_offered(slug):
    for step in diagnosis(slug, "en").plan or []:
        if step["saves_gib"] is not None and step["action"] != "expandable_segments":
            assert step["saves_gib"] >= 0.05, step


def test_the_zero_gib_offload_is_gone():
    assert "cpu_offload" not in [s["action"] for s in diagnosis("hf-optimizer-step-oom", "en").plan]


@pytest.mark.parametrize("lang, said, wrong", [("en", "fall to about 1/8", "halv"), ("zh", "约降到原来的 1/8", "减半")])
def test_the_batch_move_says_its_own_numbers(lang, said, wrong):
    step = diagnosis("lf-first-step-activations", lang).plan[0]
    assert step["changes"]["per_device_train_batch_size"] == [8, 1]
    assert said in step["why"] and wrong not in step["why"]
    assert ("8 × 2 = 16" in step["why"])


@pytest.mark.parametrize("lang, said", [("en", "halve"), ("zh", "减半")])
def test_a_real_halving_says_halve(lang, said):
    step = diagnosis("torchrun-multirank-oom", lang).plan[0]
    old, new = next(v for k, v in step["changes"].items() if "batch" in k)
    assert (old, new) == (2 * new, new) and said in step["why"]


@pytest.mark.parametrize("lang, said", [("en", "moves the effective batch from 5 × 1 = 5 to 2 × 2 = 4"), ("zh", "从 5 × 1 = 5 变为 2 × 2 = 4")])
def test_an_effective_batch_that_changes_is_said_to(lang, said):
    from advisor.plans.planwords import _batch_why
    assert said in _batch_why(lang, [5, 2], [1, 2])


@pytest.mark.parametrize("lang, said", [("en", "headroom 10 %, less than the 20 % margin → tight"),
                                        ("zh", "余量 10%，少于要求的 20% → 偏紧")])
def test_the_margin_is_stated_when_a_positive_headroom_does_not_fit(lang, said):
    # between 80 % and 100 % of usable memory the verdict is `tight`, in every language
    assert said in report("other-process-holds-gpu", "text", lang)
    assert diagnosis("other-process-holds-gpu", lang).budget["fit"] == "tight"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("slug", SLUGS)
def test_budget_and_plan_agree_on_whether_the_run_fits(slug, lang):
    """The plan measures against max(estimate, in use + failed request); the card line says the same."""
    from advisor.plans.plan import observed_need
    d = diagnosis(slug, lang)
    b = d.budget
    if not b or not b.get("usable_gib"):
        return
    seen = observed_need(d.memory or {}) or 0
    fits = max(b["total_gib"], seen) <= 0.8 * b["usable_gib"] + 1e-9
    text = report(slug, "text", lang)
    budget = text[text.index("显存预算" if lang == "zh" else "Memory budget"):]
    budget = budget[:budget.index("\n\n")]
    short = ("放不下", "偏紧") if lang == "zh" else ("does not fit", "tight")   # tight: without the margin
    assert (not any(w in budget for w in short)) == fits, budget


@pytest.mark.parametrize("lang, said", [("en", "in use plus the failed request"), ("zh", "已占用加上失败的申请")])
def test_a_sum_says_what_it_adds(lang, said):
    d = diagnosis("lf-first-step-activations", lang)
    assert any(said in n for n in d.notes)
    assert not any("already in use" in n or "失败时已占用的" in n for n in d.notes)


def test_an_allocator_figure_never_exceeds_the_card():
    from advisor.render.html import alloc_parts
    _, used = alloc_parts({"total_gib": 10.0, "allocated_by_pytorch_gib": 9.5, "reserved_unallocated_gib": 1.0})
    assert used <= 10.0
    for slug in SLUGS:
        m = diagnosis(slug, "en").memory or {}
        if m.get("total_gib"):
            assert alloc_parts(m)[1] <= m["total_gib"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_this_runs_memory_is_named_as_the_allocator_does(lang):
    d = diagnosis("other-process-nvml-lines", lang)
    assert ("PyTorch had allocated only 5.31 GiB" if lang == "en" else "PyTorch 只分配了 5.31 GiB") in d.summary
    assert "this run's" not in d.summary and "属于本次训练" not in d.summary


@pytest.mark.parametrize("fmt", ["text", "html"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_npu_has_no_cuda_context(lang, fmt):
    out = report("npu-oom", fmt, lang)
    assert "CUDA context" not in out and "CUDA 上下文" not in out


@pytest.mark.parametrize("lang, manual, outside", [("en", "[not in the patch: change by hand]", "[outside the config]"),
                                                   ("zh", "【补丁未包含，需手动修改】", "【配置之外】")])
def test_outside_the_config_is_never_a_config_change(lang, manual, outside):
    from advisor.plans.planwords import MANUAL
    assert manual in _plan_lines("ds-zero3-save-oom", lang)[0]
    for slug in SLUGS:
        for step, line in zip(diagnosis(slug, lang).plan or [], _plan_lines(slug, lang)):
            if outside in line:
                assert step["action"] not in MANUAL, line


def test_titles_do_not_repeat_the_verdict():
    from advisor.core.i18n import label
    from advisor.diagnosis.rules import load_rules
    for r in load_rules():
        assert label(r.verdict, "zh") not in r.title.zh, r.id


@pytest.mark.parametrize("lang, said", [("en", "on its own"), ("zh", "单独这一项节省")])
def test_a_what_if_saving_is_said_to_be_alone(lang, said):
    out = _budget("html", lang, batch=4, seq_len=2048)
    assert out.count(said) >= 2


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_a_conflict_reads_in_chinese(fmt):
    from advisor.render import render
    d = diagnosis("lf-first-step-activations")
    d.conflicts = [{"fact": "batch", "log": 8, "config": 4}]
    out = render(d, fmt, "zh")
    assert "批处理大小：日志 8 / 配置 4" in out
    text = prose(out, fmt, theirs(d))
    assert typography_faults(text) + vocabulary_faults(text) == []


@pytest.mark.parametrize("slug", SLUGS)
def test_the_after_plan_bar_says_what_the_plan_says(slug):
    from advisor.render.html import render_html
    d = diagnosis(slug, "en")
    page = render_html(d, "en")
    judged = [s["fits_after"] for s in d.plan or [] if not s["alternative"] and s["fits_after"] is not None]
    m = re.search(r'<span class="name">After the plan</span>\s*<span class="val">[^<]*<span class="(ok|no)">', page)
    if m and judged:
        assert (m.group(1) == "ok") == judged[-1]
