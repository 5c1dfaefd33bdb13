"""The first screen of a report on an 80×24 terminal: what to change comes within the first 15 lines,
and prose fits 80 columns (only the patch, the command and the run folder's file list are verbatim)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.render.wrap import clip, columns, wrap

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "log_samples"
LOGS = sorted(SAMPLES.glob("*.log"))


def _config(log):
    return next((p for p in (log.with_suffix(".yaml"), log.with_suffix(".json"), log.with_suffix(".sh")) if p.exists()),
                None)


def _report(log, lang):
    cfg = _config(log)
    args = [sys.executable, "-m", "advisor.cli", "diagnose", str(log), "--lang", lang] + (["--config", str(cfg)] if cfg else [])
    env = dict(os.environ, COLUMNS="80", LINES="24", NO_COLOR="1")
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120).stdout


def _verbatim(lines):
    """Lines of the patch and the command block: pasted as they are, never wrapped."""
    keep, inside = set(), False
    for i, ln in enumerate(lines):
        if ln in ("Config patch", "Command", "配置补丁", "命令"):
            inside = True
            continue
        if inside and not ln.startswith("  "):
            inside = False
        if inside:
            keep.add(i)
    return keep


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_what_to_change_comes_first_and_fits_80_columns(log):
    for lang, head in (("en", "What to change"), ("zh", None)):
        lines = _report(log, lang).splitlines()
        if lang == "en" and head in lines:
            assert lines.index(head) < 15, (log.name, lines.index(head) + 1)
        verbatim = _verbatim(lines)
        wide = [ln for i, ln in enumerate(lines) if columns(ln) > 80 and i not in verbatim
                and not ln.startswith(("Run folder", "运行目录")) and len(ln.split()) > 1]   # (one long key: no break)
        assert not wide, (log.name, lang, wide[:2])


def test_wrap_keeps_every_word_and_the_indent():
    line = "  Basis: when — frame trainer.py:compute_loss; progress: step 0; blame — rule OOM201 (first-step)"
    pieces = wrap(line, 40)
    assert all(columns(p) <= 40 for p in pieces) and len(pieces) > 1
    assert " ".join(p.strip() for p in pieces) == line.strip()
    assert all(p.startswith("    ") for p in pieces[1:])


def test_wrap_counts_wide_characters_twice_and_keeps_punctuation_with_its_word():
    line = "  训练信息：任务类型：加载模型，框架：llamafactory，模型：Qwen，微调方法：lora，计算类型：fp16，批处理大小：2"
    pieces = wrap(line, 30)
    assert all(columns(p) <= 30 for p in pieces)
    assert not any(p.strip()[:1] in "，：；。" for p in pieces)
    assert "".join("".join(p.split()) for p in pieces) == "".join(line.split())      # nothing lost
    assert columns(clip("第 7 行  " + "显存" * 40, 20)) <= 20


def test_a_long_command_is_continued_as_the_shell_reads_it():
    import shlex
    from advisor.render.wrap import wrap_command
    cmd = "python3 -m verl.trainer.main_ppo a=1 'b=two words here' c=\"x y\" " + " ".join(f"k{i}=v{i}" for i in range(30))
    lines = wrap_command(cmd, 40)
    assert len(lines) > 1 and all(columns(ln) <= 40 for ln in lines)
    assert all(ln.endswith(" \\") for ln in lines[:-1])
    assert shlex.split(" ".join(ln[:-1] if ln.endswith("\\") else ln for ln in lines)) == shlex.split(cmd)
