"""Triage (issue 5): different causes stay apart, a re-numbered copy joins its original, and a mixed
folder lists its unreadable files under `errors` while still exiting 1 for the OOMs it found."""

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from conftest import SAMPLES

from advisor.triage.grouping import group, normalise, signature
from advisor.triage.run import run_triage
from advisor.cli.triage import triage

EXPECTED = SAMPLES / "expectations.yaml"


def _expectations():
    from ruamel.yaml import YAML
    return YAML(typ="safe").load(EXPECTED.read_text(encoding="utf-8")) if EXPECTED.exists() else {}


def _samples():
    return sorted(SAMPLES.glob("*.log"))


def _oom_samples():
    exp = _expectations()
    return [p for p in _samples() if exp.get(p.stem, {}).get("verdict") in ("device_oom", "host_oom")]


def _text(path):
    from advisor.read.reader import sniff_encoding
    data = path.read_bytes()
    return data.decode(sniff_encoding(data[:65536]), errors="replace")


def _mutate(text, k=1.13):
    """Another run of the same failure: other sizes (scaled together, so the allocator's ratios stay),
    PIDs, timestamps, line numbers, home directory, torchrun's rank prefix on every line; a paste that
    was hard-wrapped is unwrapped first and wrapped again at the same width, as its terminal would."""
    from advisor.evidence.lines import detect_wrap_width, read_text
    width = detect_wrap_width([len(ln) for ln in text.split("\n")])
    if width:
        text = "\n".join(ln.text for ln in read_text(text))
    text = re.sub(r"(\d+(?:\.\d+)?)(\s*)(GiB|MiB|KiB|GB|MB)\b", lambda m: f"{float(m.group(1)) * k:.2f}{m.group(2)}"
                  f"{m.group(3)}", text)
    text = re.sub(r"(\d{5,})(\s*bytes)", lambda m: f"{int(int(m.group(1)) * k)}{m.group(2)}", text)
    text = re.sub(r"(\bpid[:=]\s*|\bProcess |\[PID:)(\d{2,})", lambda m: m.group(1) + str(int(m.group(2)) * 7 + 3), text)
    text = re.sub(r"(\d{4})-(\d\d)-(\d\d)", lambda m: f"{int(m.group(1)) + 1}-{m.group(2)}-{m.group(3)}", text)
    text = re.sub(r"(, line )(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 17), text)
    text = re.sub(r"/(?:home|Users)/[\w.-]+|/root(?=/)|/opt/conda(?=/)", "/data/bob", text)
    lines = ["[rank3]:" + ln for ln in text.split("\n")]
    if width:
        lines = [ln[i:i + width] for ln in lines for i in range(0, max(len(ln), 1), width)]
    return "\n".join(lines)


def _diagnose(path, text=None):
    from advisor.pipeline import diagnose_path, diagnose_text
    d = diagnose_text(text, source=str(path)) if text is not None else diagnose_path(str(path))
    return d.to_json_dict()


def _group_of(groups, path):
    found = [g for g in groups if str(path) in g.members]
    assert len(found) == 1, f"{path} is in {len(found)} groups"
    return found[0]


# ---- the normalised signature --------------------------------------------------------------------

def test_normalise_removes_what_a_run_makes_up_and_keeps_the_phrase():
    line = ("\x1b[31m[rank3]: [2025-04-17 09:32:18,798] pid: 12345 at 0x7f3a2b1c in /home/alice/run/train.py, "
            "line 812 on GPU 3 (cuda:1): CUDA out of memory. Tried to allocate 1.16 GiB; Process 4711 has 3.00 GiB\x1b[0m")
    out = normalise(line)
    for gone in ("\x1b", "2025", "09:32", "12345", "0x7f3a", "/home/alice", "812", "GPU 3", "cuda:1", "1.16", "4711"):
        assert gone not in out, gone
    assert "CUDA out of memory" in out and "train.py" in out


def test_a_bare_oom_phrase_does_not_swallow_a_signature_with_frames():
    # token_set_ratio would score these 100 (one is a subset of the other); token_sort_ratio must not merge them
    def d(src, frames):
        ev = [{"line": 1, "text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "marker": "oom_error"}]
        ev += [{"line": 2, "text": f"/x/{f}: {fn} — pass", "marker": "frame"} for f, fn in frames]
        return {"source": src, "verdict": "device_oom", "rule": "OOM200", "phase": "unknown", "component": "unknown",
                "accelerator": "cuda", "evidence": ev, "memory": {}, "facts": {}}
    groups = group([d("bare.log", []), d("deep.log", [("modeling_llama.py", "forward"), ("linear.py", "forward")])])
    assert len(groups) == 2


# ---- done-when 1: two real different causes never share a group ------------------------------------

def test_two_real_different_causes_never_share_a_group():
    exp = _expectations()
    paths = [p for p in _samples() if p.stem in exp]
    cause = {str(p): tuple(exp[p.stem].get(k) for k in ("verdict", "phase", "component")) for p in paths}
    assert len(set(cause.values())) >= 2, "need at least two different causes among the samples"
    groups = group([_diagnose(p) for p in paths])
    assert sorted(m for g in groups for m in g.members) == sorted(cause)
    for g in groups:
        assert len({cause[m] for m in g.members}) == 1, f"group {g.id} mixes causes: {g.members}"


# ---- done-when 2: a copy with other numbers and paths joins its original --------------------------

@pytest.mark.parametrize("sample", _oom_samples(), ids=lambda p: p.stem)
def test_copy_with_other_numbers_and_paths_joins_its_original(sample):
    original = _diagnose(sample)
    copy = _diagnose("copy/" + sample.name, _mutate(_text(sample)))
    assert copy["memory"].get("tried_gib") != original["memory"].get("tried_gib") or \
        original["memory"].get("tried_gib") is None            # the copy really has other numbers
    alone = group([original])
    together = group([original, copy])
    assert len(together) == 1, [g.signature for g in together]
    assert together[0].count == 2
    assert together[0].id == alone[0].id                       # the same failure keeps its id


def test_group_ids_and_members_do_not_depend_on_input_order():
    ds = [_diagnose(p) for p in _samples()]
    ds += [_diagnose("copy/" + p.name, _mutate(_text(p))) for p in _oom_samples()[:3]]

    def view(groups):
        return {g.id: (sorted(g.members), g.representative, g.first, g.last, g.reply) for g in groups}
    assert view(group(ds)) == view(group(list(reversed(ds))))


# ---- done-when 3: a mixed folder with a binary file and an empty file ------------------------------

def _mixed_folder(tmp_path, samples):
    folder = tmp_path / "logs"
    (folder / "nested").mkdir(parents=True)
    for i, s in enumerate(samples):
        shutil.copy(s, (folder if i % 2 else folder / "nested") / s.name)
    (folder / "core.log").write_bytes(bytes(range(256)) * 64)         # binary, with a log's suffix
    (folder / "empty.txt").write_bytes(b"")
    (folder / "model.bin").write_bytes(b"\x00\x01" * 100)             # not a log: not even listed
    (folder / "README").write_text("plain notes, no failure here\n")   # no suffix but text: diagnosed
    return folder


def test_mixed_folder_lists_binary_and_empty_files_under_errors_and_exits_1(tmp_path):
    oom = _oom_samples()[:2]
    folder = _mixed_folder(tmp_path, oom)
    result = CliRunner().invoke(triage, [str(folder), "--format", "json", "--jobs", "1"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["schema"] == "oom-doctor/triage/v1"
    errors = {e["path"]: e["error"] for e in report["errors"]}
    assert set(errors) == {str(folder / "core.log"), str(folder / "empty.txt")}
    assert "binary" in errors[str(folder / "core.log")] and "empty" in errors[str(folder / "empty.txt")]
    members = [m for g in report["groups"] for m in g["members"]]
    expected = {str(folder / "nested" / oom[0].name), str(folder / oom[1].name), str(folder / "README")}
    assert sorted(members) == sorted(expected)                       # every input exactly once
    assert not set(members) & set(errors)
    for g in report["groups"]:
        for key in ("id", "count", "members", "verdict", "rule", "phase", "component", "representative",
                    "reason", "reply"):
            assert key in g
    assert report["summary"]["errors"] == 2 and report["summary"]["files"] == 5


def test_parallel_and_in_process_runs_agree(tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(12):                                              # above the in-process threshold
        s = _samples()[i % len(_samples())]
        (folder / f"{i:02d}-{s.name}").write_bytes(s.read_bytes())
    one = run_triage([str(folder)], jobs=1)
    two = run_triage([str(folder)], jobs=2)
    assert one["groups"] == two["groups"] and one["errors"] == two["errors"]


def test_no_matching_path_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(triage, [str(tmp_path / "nothing-*.log")])
    assert result.exit_code == 2
    assert "no log files matched" in result.output


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_formats_and_chinese_replies(tmp_path, fmt):
    sample = SAMPLES / "lf-first-step-activations.log"
    if not sample.exists():
        pytest.skip("sample missing")
    out = tmp_path / f"report.{fmt}"
    result = CliRunner().invoke(triage, [str(sample), "--format", fmt, "--lang", "zh", "-o", str(out)])
    assert result.exit_code == 1
    text = out.read_text(encoding="utf-8")
    assert sample.name in text and "建议先" in text                   # a pasteable reply, in Chinese
    assert signature(_diagnose(sample)) and "1." in text and "2." in text


def test_a_worker_that_dies_does_not_lose_its_files(tmp_path, monkeypatch):
    import multiprocessing
    import os

    import advisor.triage.run as tc
    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the patched worker only reaches forked children")
    folder = tmp_path / "many"
    folder.mkdir()
    for i, s in enumerate(_samples()[:10]):
        (folder / f"{i:02d}.log").write_bytes(s.read_bytes())
    real = tc._diagnose_chunk

    def dying(paths, lang):
        if any(p.endswith("03.log") for p in paths):
            os._exit(9)                                               # as if the OOM killer took it
        return real(paths, lang)
    monkeypatch.setattr(tc, "_diagnose_chunk", dying)
    report = run_triage([str(folder)], jobs=2)
    assert sum(g["count"] for g in report["groups"]) == 10 and not report["errors"]


def test_a_file_reached_twice_is_diagnosed_once(tmp_path):
    from advisor.triage.inputs import expand
    log = tmp_path / "logs" / "a.log"
    log.parent.mkdir()
    log.write_text("RuntimeError: CUDA out of memory.\n")
    (tmp_path / "logs" / "link.log").symlink_to(log)
    files, missing = expand([str(log), str(tmp_path / "logs"), str(tmp_path / "logs" / ".." / "logs" / "a.log"),
                             str(tmp_path / "nothing-here.log")])
    assert files == [str(log)]
    assert missing == [str(tmp_path / "nothing-here.log")]
