"""The patch: only the named keys change, comments and order survive, JSON stays JSON, twice is once;
and `--write` never loses the user's file."""

import json
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.read.config import load_config
from advisor.plans.patch import patched_text, unified_diff
from conftest import ROOT

KEYS = ["model_name_or_path", "stage", "finetuning_type", "lora_target", "template", "cutoff_len",
        "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "bf16", "val_size",
        "eval_strategy", "output_dir", "deepspeed", "quantization_bit", "per_device_eval_batch_size"]
CHANGEABLE = ["per_device_train_batch_size", "gradient_accumulation_steps", "cutoff_len", "quantization_bit",
              "per_device_eval_batch_size", "eval_accumulation_steps", "disable_gradient_checkpointing", "bf16",
              "deepspeed", "pure_bf16"]
values = st.one_of(st.integers(0, 4096), st.booleans(), st.sampled_from(["lora", "sft", "qwen", "saves/x", "all"]))
words = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters=" -_中文"), min_size=1,
                max_size=20)


@st.composite
def yaml_configs(draw):
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=2, max_size=len(KEYS), unique=True))
    lines, data = [], {}
    for key in keys:
        if draw(st.booleans()):
            lines.append(f"### {draw(words).strip() or 'section'}")
        value = draw(values)
        data[key] = value
        text = json.dumps(value) if not isinstance(value, str) else value
        comment = f"  # {draw(words).strip() or 'note'}" if draw(st.booleans()) else ""
        lines.append(f"{key}: {text}{comment}")
        if draw(st.booleans()):
            lines.append("")
    return "\n".join(lines) + "\n", data


changes_st = st.dictionaries(st.sampled_from(CHANGEABLE), st.one_of(st.integers(1, 64), st.booleans()),
                             min_size=1, max_size=4)


def _comments(text):
    return [ln.strip() for ln in text.splitlines() if "#" in ln]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=yaml_configs(), changes=changes_st)
def test_yaml_patch_properties(tmp_path, cfg, changes):
    text, data = cfg
    path = tmp_path / "train.yaml"
    path.write_text(text, encoding="utf-8")
    config = load_config(str(path))
    new = patched_text(config, {k: [data.get(k), v] for k, v in changes.items()})
    path2 = tmp_path / "patched.yaml"
    path2.write_text(new, encoding="utf-8")
    patched = load_config(str(path2))
    # only the named keys change; everything else keeps its value and order
    for key, value in data.items():
        assert patched.data[key] == (changes[key] if key in changes else value)
    assert [k for k in patched.data if k in data] == list(data)
    assert set(patched.data) == set(data) | set(changes)
    # every comment survives, in order
    comments = _comments(text)
    kept = [c for c in _comments(new) if any(c.endswith(x.split("#", 1)[1]) for x in comments if "#" in x)]
    assert len(kept) >= len(comments)
    # the diff touches only lines naming changed keys
    for line in unified_diff(config, new).splitlines()[2:]:
        if line[:1] in "+-" and line.strip("+- "):
            assert any(line[1:].startswith(f"{k}:") for k in changes), line
    # a second run is a no-op
    assert patched_text(patched, {k: [changes[k], v] for k, v in changes.items()}) == new


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=8), changes=changes_st,
       indent=st.sampled_from([2, 4]))
def test_json_stays_json(tmp_path, data, changes, indent):
    path = tmp_path / "args.json"
    path.write_text(json.dumps(data, indent=indent) + "\n")
    config = load_config(str(path))
    new = patched_text(config, {k: [data.get(k), v] for k, v in changes.items()})
    out = json.loads(new)
    assert list(out)[:len(data)] == list(data)
    assert all(out[k] == v for k, v in changes.items())
    assert new.splitlines()[1].startswith(" " * indent + '"')


def test_a_nested_json_change_keeps_every_other_byte(tmp_path):
    """A key added inside a nested object (DeepSpeed's zero_optimization) or changed deep down touches
    only its own bytes: numbers keep their spelling, one-line arrays stay on one line, CRLF stays."""
    text = ('{\r\n  "warmup_ratio": 2.0e-5,\r\n  "weight_decay": 1E-2,\r\n  "betas": [0.9,0.95],\r\n'
            '  "zero_optimization": {\r\n    "stage": 2,\r\n    "overlap_comm": true\r\n  },\r\n'
            '  "bf16": {"enabled": "auto"}\r\n}\r\n')
    path = tmp_path / "ds.json"
    path.write_bytes(text.encode())
    config = load_config(str(path))
    new = patched_text(config, {"zero_optimization.offload_optimizer.device": [None, "cpu"],
                                "zero_optimization.stage": [2, 3], "bf16.enabled": ["auto", True]})
    assert json.loads(new)["zero_optimization"] == {"stage": 3, "overlap_comm": True, "offload_optimizer": {"device": "cpu"}}
    kept = [ln for ln in text.split("\r\n") if "stage" not in ln and "overlap_comm" not in ln and "bf16" not in ln]
    assert all(ln in new.split("\r\n") for ln in kept)
    assert '    "overlap_comm": true,\r\n    "offload_optimizer": {\r\n      "device": "cpu"\r\n    }\r\n  },' in new
    assert '  "bf16": {"enabled": true}\r\n' in new and "\n" not in new.replace("\r\n", "")


def test_json_edits_refuse_what_they_cannot_do_in_place():
    from advisor.plans.json_edit import edited
    assert edited('{"a": 1}', {"a.b": 2}) is None           # the way down holds a number
    assert edited("[1, 2]", {"a": 1}) is None               # not an object
    assert edited('{"a": 1', {"a": 2}) is None              # cut
    assert edited('{"a": {}}', {"a.b": 1}) == '{"a": {"b": 1}}'


# ---- --write safety -----------------------------------------------------------------------------
LOG = ("Traceback (most recent call last):\n"
       '  File "/env/lib/python3.11/site-packages/transformers/trainer.py", line 3730, in training_step\n'
       "    loss = self.compute_loss(model, inputs)\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 23.65 GiB"
       " of which 500.00 MiB is free. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 100.00 MiB is"
       " reserved by PyTorch but unallocated.\n")
CFG = ("# my run\nmodel_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\n"
       "per_device_train_batch_size: 8  # big\ngradient_accumulation_steps: 1\ncutoff_len: 2048\nbf16: true\n")


def cli(*args):
    p = subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True, cwd=ROOT, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "train.log").write_text(LOG)
    (tmp_path / "train.yaml").write_text(CFG)
    return tmp_path


def test_write_keeps_a_backup_and_never_overwrites_one(run_dir):
    cfg = run_dir / "train.yaml"
    rc, _, err = cli("diagnose", str(run_dir / "train.log"), "--config", str(cfg), "--write")
    assert rc == 1 and "backup" in err
    assert (run_dir / "train.yaml.bak").read_text() == CFG
    assert cfg.read_text() != CFG and "# big" in cfg.read_text()
    first = cfg.read_text()
    cfg.write_text(CFG)                                    # the user reverts, then writes again
    cli("diagnose", str(run_dir / "train.log"), "--config", str(cfg), "--write")
    assert (run_dir / "train.yaml.bak").read_text() == CFG and (run_dir / "train.yaml.bak.1").exists()
    assert cfg.read_text() == first


def test_write_to_output_leaves_the_original(run_dir):
    out = run_dir / "patched.yaml"
    cli("diagnose", str(run_dir / "train.log"), "--config", str(run_dir / "train.yaml"), "--write", "-o", str(out))
    assert (run_dir / "train.yaml").read_text() == CFG and out.exists() and not (run_dir / "train.yaml.bak").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write read-only files")
def test_write_read_only_file_is_refused(run_dir):
    cfg = run_dir / "train.yaml"
    cfg.chmod(stat.S_IRUSR)
    rc, _, err = cli("diagnose", str(run_dir / "train.log"), "--config", str(cfg), "--write")
    assert rc == 2 and "not writable" in err and cfg.read_text() == CFG


def test_write_read_only_directory_is_refused(run_dir):
    sub = run_dir / "ro"
    sub.mkdir()
    cfg = sub / "train.yaml"
    cfg.write_text(CFG)
    sub.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        rc, _, err = cli("diagnose", str(run_dir / "train.log"), "--config", str(cfg), "--write")
        if os.geteuid() != 0:
            assert rc == 2 and "Traceback" not in err
        assert cfg.read_text() == CFG if rc == 2 else True
    finally:
        sub.chmod(stat.S_IRWXU)


@pytest.mark.parametrize("make", [lambda d: d, lambda d: (d / "bad.yaml").write_text("a: [1,\n b") and d / "bad.yaml",
                                  lambda d: (d / "dup.yaml").write_text("a: 1\na: 2\n") and d / "dup.yaml"])
def test_bad_configs_exit_2_and_stay_unchanged(run_dir, make):
    target = make(run_dir)
    before = target.read_bytes() if target.is_file() else None
    rc, _, err = cli("diagnose", str(run_dir / "train.log"), "--config", str(target), "--write")
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    if before is not None:
        assert target.read_bytes() == before


@pytest.mark.parametrize("text,needle", [
    ("base: &b\n  per_device_train_batch_size: 8\nrun:\n  <<: *b\nmodel_name_or_path: x\nstage: sft\n"
     "finetuning_type: lora\n", "anchors"),
    ("foo: 1\nbar: 2\n", "not a LLaMA-Factory"),
    ("model_name_or_path: x\n\tstage: sft\n", "invalid YAML"),
])
def test_write_refuses_configs_it_could_damage(run_dir, text, needle):
    cfg = run_dir / "odd.yaml"
    cfg.write_text(text)
    rc, _, err = cli("diagnose", str(run_dir / "train.log"), "--config", str(cfg), "--write")
    assert rc == 2 and needle in err and cfg.read_text() == text
