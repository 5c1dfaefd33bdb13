"""Safety (issue 15): nothing of the user's is overwritten, nothing from a log reaches their terminal.

One test per defect found by trying the tool as an attacker would: each recreates the defect on a
copy of a shipped sample, then asserts the promise. Commands run in-process (fast) except where a
hang is the defect: those run in a subprocess under a timeout, so a regression fails, not blocks.
"""

import codecs
import json
import os
import re
import stat
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES

LOG = (SAMPLES / "axolotl-qlora-oom.log").read_bytes()
CFG = (SAMPLES / "axolotl-qlora-oom.yaml").read_bytes()
PATCHED = b"micro_batch_size: 1"            # the plan's first step on this sample (8 -> 1)
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory."
PAYLOAD = ("\x1b\x1b[0m]0;PWNED\x07\x1b\x1b[0m]52;c;ZWNobyBwd25lZA==\x07\x1b]0;PLAIN\x07"
           "\u009b31m\u009d0;C1TITLE\u009c\u202eevil\u202c\u2066iso\u2069")


def controls(text):
    """Terminal controls and bidi characters in an output (what must never come from the input)."""
    return sorted({f"U+{ord(c):04X}" for c in text
                   if c in "\x1b\x07" or 0x80 <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e
                   or 0x2066 <= ord(c) <= 0x2069 or 0xdc80 <= ord(c) <= 0xdc9f})    # last: a raw C1 byte


@pytest.fixture
def cli(capsysbinary, monkeypatch):
    """Run `oom-doctor ARGS` in-process: (exit code, stdout, stderr) as text."""
    from advisor.cli.main import main
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("OOM_DOCTOR_LANG", "en")
    monkeypatch.delenv("OOM_DOCTOR_DEBUG", raising=False)

    def run(*args):
        capsysbinary.readouterr()
        try:
            main(list(args))
            rc = 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
        out, err = capsysbinary.readouterr()
        return rc, out.decode("utf-8", "surrogateescape"), err.decode("utf-8", "surrogateescape")
    return run


def subprocess_cli(*args, cwd, timeout=20, env=None, **kw):
    e = {**os.environ, "NO_COLOR": "1", "OOM_DOCTOR_LANG": "en", **(env or {})}
    e.pop("OOM_DOCTOR_DEBUG", None) if "OOM_DOCTOR_DEBUG" not in (env or {}) else None
    e["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], cwd=cwd, capture_output=True,
                          timeout=timeout, env=e, **kw)


@pytest.fixture
def pair(tmp_path, monkeypatch):
    """train.log + cfg.yaml (the sample) in a fresh folder, which is the working directory."""
    (tmp_path / "train.log").write_bytes(LOG)
    (tmp_path / "cfg.yaml").write_bytes(CFG)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_line(err):
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---- data loss ----------------------------------------------------------------------------------
@pytest.mark.parametrize("args,victim", [
    (["diagnose", "train.log", "--config", "cfg.yaml", "-o", "cfg.yaml"], "cfg.yaml"),
    (["diagnose", "train.log", "-o", "train.log"], "train.log"),
    (["diagnose", "train.log", "-o", "alias.log"], "train.log"),
    (["diagnose", "train.log", "--config", "cfg.yaml", "-o", "./cfg.yaml"], "cfg.yaml"),
    (["diagnose", "train.log", "--config", "cfg.yaml", "--format", "markdown", "-o", "cfg.yaml"], "cfg.yaml"),
    (["budget", "--config", "cfg.yaml", "-o", "cfg.yaml"], "cfg.yaml"),
])
def test_output_over_an_input_is_refused(cli, pair, args, victim):
    os.symlink("train.log", "alias.log")
    before = (pair / victim).read_bytes()
    rc, _, err = cli(*args)
    assert rc == 2 and one_line(err) and "input" in err
    assert (pair / victim).read_bytes() == before


def test_triage_output_inside_the_triaged_folder_is_refused(cli, pair):
    (pair / "runs").mkdir()
    (pair / "runs/x.log").write_bytes(LOG)
    rc, _, err = cli("triage", "runs", "-o", "runs/x.log")
    assert rc == 2 and one_line(err)
    assert (pair / "runs/x.log").read_bytes() == LOG


@pytest.mark.parametrize("out", ["cfg.yaml", "./cfg.yaml"])
def test_write_with_output_the_original_is_refused(cli, pair, out):
    rc, _, err = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write", "-o", out)
    assert rc == 2 and one_line(err)
    assert (pair / "cfg.yaml").read_bytes() == CFG and sorted(os.listdir(pair)) == ["cfg.yaml", "train.log"]


def test_write_keeps_mode_owner_and_group(cli, pair):
    cfg = pair / "cfg.yaml"
    cfg.chmod(0o640)
    if os.geteuid() == 0:           # as root: a file someone else owns must stay theirs
        os.chown(cfg, 65534, 65534)
    before = cfg.stat()
    rc, _, err = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    assert rc == 1 and PATCHED in cfg.read_bytes(), err
    for path in (cfg, pair / "cfg.yaml.bak"):
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == \
            (before.st_uid, before.st_gid, 0o640), path
    assert (pair / "cfg.yaml.bak").read_bytes() == CFG


def test_write_keeps_hard_links(cli, pair):
    os.link(pair / "cfg.yaml", pair / "other-name.yaml")
    inode = (pair / "cfg.yaml").stat().st_ino
    rc, _, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    assert rc == 1
    assert (pair / "cfg.yaml").stat().st_ino == inode
    assert PATCHED in (pair / "other-name.yaml").read_bytes()        # every name sees the patch
    assert (pair / "cfg.yaml.bak").read_bytes() == CFG


def test_write_in_place_when_a_new_file_could_not_keep_the_owner(cli, pair, monkeypatch):
    import advisor.plans.patch
    monkeypatch.setattr(advisor.plans.patch, "_can_keep_owner", lambda st: False)     # not root, someone else's file
    inode = (pair / "cfg.yaml").stat().st_ino
    rc, _, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    assert rc == 1 and PATCHED in (pair / "cfg.yaml").read_bytes()
    assert (pair / "cfg.yaml").stat().st_ino == inode and (pair / "cfg.yaml.bak").read_bytes() == CFG
    assert sorted(os.listdir(pair)) == ["cfg.yaml", "cfg.yaml.bak", "train.log"]


@pytest.mark.parametrize("absolute", [False, True])
def test_write_through_a_symlink_patches_the_target(cli, pair, absolute):
    (pair / "elsewhere").mkdir()
    real = pair / "elsewhere/real.yaml"
    (pair / "cfg.yaml").replace(real)
    (pair / "proj").mkdir()
    target = str(real) if absolute else "../elsewhere/real.yaml"
    os.symlink(target, pair / "proj/cfg.yaml")
    rc, _, err = cli("diagnose", "train.log", "--config", "proj/cfg.yaml", "--write")
    assert rc == 1
    assert os.readlink(pair / "proj/cfg.yaml") == target          # the link stays a link
    assert PATCHED in real.read_bytes() and "real.yaml" in err      # and says which file it wrote
    assert (pair / "elsewhere/real.yaml.bak").read_bytes() == CFG


@pytest.mark.parametrize("kind,command", [("fifo", "diagnose"), ("fifo", "budget"), ("fifo", "write"),
                                          ("device", "write"), ("dev-stdin", "diagnose"), ("proc-link", "write")])
def test_streams_and_devices_as_config_are_refused(pair, kind, command):
    name = "c.yaml"
    if kind == "fifo":
        os.mkfifo(pair / name)
    elif kind == "device":
        os.symlink("/dev/zero", pair / name)
    elif kind == "dev-stdin":
        name = "/dev/stdin"
    else:
        os.symlink("/proc/self/fd/0", pair / name)
    args = {"diagnose": ["diagnose", "train.log", "--config", name],
            "budget": ["budget", "--config", name],
            "write": ["diagnose", "train.log", "--config", name, "--write"]}[command]
    with open(pair / "cfg.yaml", "rb") as stdin:            # stdin is a file: /dev/stdin would "work"
        p = subprocess_cli(*args, cwd=pair, stdin=stdin)
    err = p.stderr.decode()
    assert p.returncode == 2 and one_line(err), err
    assert sorted(os.listdir(pair)) == sorted({"cfg.yaml", "train.log", name} - {"/dev/stdin"})
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(pair / name).st_mode)


def test_latin1_comment_survives_byte_for_byte(cli, pair):
    latin = "# caf\xe9 na\xefve: notes from the last run\n".encode("latin-1")
    (pair / "cfg.yaml").write_bytes(latin + CFG)
    rc, _, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    now = (pair / "cfg.yaml").read_bytes()
    assert rc == 1 and PATCHED in now
    assert now.startswith(latin) and b"\xef\xbf\xbd" not in now


def _changed_lines(before, after):
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    return [ln for ln in a if ln not in b], [ln for ln in b if ln not in a]


@pytest.mark.parametrize("kind", ["crlf", "bom", "utf16"])
def test_line_endings_bom_and_encoding_are_kept(cli, pair, kind):
    orig = {"crlf": CFG.replace(b"\n", b"\r\n"), "bom": codecs.BOM_UTF8 + CFG,
            "utf16": CFG.decode().encode("utf-16")}[kind]
    (pair / "cfg.yaml").write_bytes(orig)
    rc, out, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--format", "json")
    patch = json.loads(out)["patch"]
    removed = [ln for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert rc == 1 and 0 < len(removed) <= 4, patch              # only the changed keys, not the file
    rc, _, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    now = (pair / "cfg.yaml").read_bytes()
    if kind == "utf16":
        assert now.startswith(codecs.BOM_UTF16_LE) and PATCHED in now.decode("utf-16").encode()
        now, orig = now.decode("utf-16").encode(), orig.decode("utf-16").encode()
    assert rc == 1 and PATCHED in now
    if kind == "crlf":
        assert now.count(b"\r\n") == now.count(b"\n") and b"\r\r" not in now
    if kind == "bom":
        assert now.startswith(codecs.BOM_UTF8)
    gone, _ = _changed_lines(orig, now)
    assert all(re.match(rb"(micro_batch_size|gradient_accumulation_steps|gradient_checkpointing):", ln)
               for ln in gone), gone


def test_untouched_yaml_spellings_survive(cli, pair):
    odd = CFG + b"lora_target_modules: [q_proj,v_proj]\nhub_model_id: ~\nwarmup_ratio: 2.0e-5\n"
    (pair / "cfg.yaml").write_bytes(odd)
    rc, _, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    now = (pair / "cfg.yaml").read_bytes()
    assert rc == 1 and PATCHED in now
    for line in (b"lora_target_modules: [q_proj,v_proj]\n", b"hub_model_id: ~\n", b"warmup_ratio: 2.0e-5\n"):
        assert line in now


def test_untouched_json_numbers_survive(cli, pair):
    cfg = {"base_model": "mistralai/Mistral-7B-v0.3", "adapter": "qlora", "load_in_4bit": True,
           "sequence_len": 4096, "micro_batch_size": 8, "gradient_accumulation_steps": 2,
           "gradient_checkpointing": False}
    text = json.dumps(cfg, indent=2)[:-2] + ',\n  "learning_rate": 2.0e-5,\n  "warmup": 1E3\n}\n'
    (pair / "cfg.json").write_text(text)
    rc, _, err = cli("diagnose", "train.log", "--config", "cfg.json", "--write")
    now = (pair / "cfg.json").read_text()
    assert rc == 1 and '"micro_batch_size": 1' in now, err
    assert '"learning_rate": 2.0e-5,' in now and '"warmup": 1E3' in now
    assert json.loads(now)["learning_rate"] == 2e-5


@pytest.mark.parametrize("text", [
    CFG.decode().replace("micro_batch_size: 8\n", "micro_batch_size: &1 8\n") + "eval_batch_size: *1\n",
    CFG.decode().replace("micro_batch_size: 8\n", "micro_batch_size: &\u00e9 8\n") + "eval_batch_size: *\u00e9\n",
    "lora_defaults: &0\n  lora_dropout: 0.05\n" + CFG.decode() + "lora_extra: {<<: *0}\n",
])
def test_anchors_of_any_name_are_refused(cli, pair, text):
    (pair / "cfg.yaml").write_text(text, encoding="utf-8")
    rc, _, err = cli("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    assert rc == 2 and "anchors" in err and one_line(err)
    assert (pair / "cfg.yaml").read_text(encoding="utf-8") == text
    assert sorted(os.listdir(pair)) == ["cfg.yaml", "train.log"]          # no backup, no temp file


def test_duplicate_json_keys_are_refused(cli, pair):
    text = '{\n  "base_model": "m",\n  "adapter": "qlora",\n  "micro_batch_size": 8,\n  "micro_batch_size": 2\n}\n'
    (pair / "cfg.json").write_text(text)
    for extra in ([], ["--write"]):
        rc, _, err = cli("diagnose", "train.log", "--config", "cfg.json", *extra)
        assert rc == 2 and "twice" in err and one_line(err)
    assert (pair / "cfg.json").read_text() == text


def _fsize(limit):
    def pre():
        import resource
        import signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a write past the limit fails with EFBIG
    return pre


@pytest.mark.parametrize("args,limit", [
    (["--write"], 8192), (["--write", "-o", "out.yaml"], 8192), (["-o", "report.txt"], 1024)])
def test_a_failed_write_leaves_nothing_behind(pair, args, limit):
    big = CFG + b"".join(b"# padding line %05d: keeps the config above the file size limit\n" % i
                         for i in range(450))
    (pair / "cfg.yaml").write_bytes(big)
    p = subprocess_cli("diagnose", "train.log", "--config", "cfg.yaml", *args, cwd=pair,
                       preexec_fn=_fsize(limit))
    assert p.returncode == 2 and one_line(p.stderr.decode()), p.stderr
    assert (pair / "cfg.yaml").read_bytes() == big
    assert sorted(os.listdir(pair)) == ["cfg.yaml", "train.log"]


def test_a_second_write_from_the_same_log_is_refused(cli, pair):
    args = ("diagnose", "train.log", "--config", "cfg.yaml", "--write")
    assert cli(*args)[0] == 1
    first = (pair / "cfg.yaml").read_bytes()
    rc, _, err = cli(*args)
    assert rc == 2 and "already patched" in err
    assert (pair / "cfg.yaml").read_bytes() == first
    (pair / "train.log").touch()                # a new run of the patched config: a new log
    os.utime(pair / "train.log", (os.stat(pair / "cfg.yaml.bak").st_mtime + 5,) * 2)
    assert cli(*args)[0] in (0, 1)


# ---- hostile text -------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_controls_from_a_log_are_made_inert(cli, pair, fmt):
    evil = LOG.decode().replace(OOM_LINE, OOM_LINE + PAYLOAD, 1)
    evil = evil.replace("Starting trainer...", "Starting trainer...\x1b]2;T2\x07\u202e", 1)
    (pair / "evil.log").write_text(evil, encoding="utf-8")
    rc, out, _ = cli("diagnose", "evil.log", "--config", "cfg.yaml", "--format", fmt)
    assert rc == 1 and "CUDA out of memory" in out
    assert controls(out) == []
    if fmt == "json":                   # the data is kept exactly: escaped, not dropped
        assert any(PAYLOAD[-8:] in e["text"] for e in json.loads(out)["evidence"])
    if fmt in ("text", "markdown"):
        assert "\\x1b" in out or "\\u202e" in out                     # shown, not hidden


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json", "html"])
def test_file_names_are_made_inert_in_triage(cli, pair, fmt):
    (pair / "runs").mkdir()
    for name in ("x\x1b]0;TITLE\x07.log", "y\u202e\u009b31m.log", "nl\nSPLITNAME.log", b"w\x9b31m.log"):
        with open(os.path.join(b"runs", name if isinstance(name, bytes) else name.encode()), "wb") as fh:
            fh.write(LOG)           # the last is not UTF-8: a raw 0x9b byte is CSI to an 8-bit terminal
    rc, out, _ = cli("triage", "runs", "--format", fmt)
    assert rc == 1 and controls(out) == []
    if fmt in ("table", "markdown"):
        assert not [ln for ln in out.splitlines() if ln.lstrip().startswith("SPLITNAME")]


def test_markdown_fence_cannot_be_closed_by_a_config_value(cli, pair):
    cfg = CFG.replace(b"micro_batch_size: 8\n",
                      b'micro_batch_size: 8\nnote: |\n  ```\n  <img src="https://t.example/p.png">\n  ````\n')
    (pair / "cfg.yaml").write_bytes(cfg)
    rc, out, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--format", "json")
    patch = json.loads(out)["patch"]
    assert rc == 1 and "<img" in patch
    rc, out, _ = cli("diagnose", "train.log", "--config", "cfg.yaml", "--format", "markdown")
    fence = re.search(r"^(`{3,})diff$", out, re.M).group(1)
    assert len(fence) > max(len(r) for r in re.findall("`+", patch))     # longer than any run inside
    assert f"{fence}diff\n{patch.rstrip()}\n{fence}\n" in out    # the whole patch, then the close


def test_markdown_escapes_values_outside_fences():
    from advisor.pipeline import diagnose_path
    from advisor.render import render
    d = diagnose_path(str(SAMPLES / "axolotl-qlora-oom.log"))
    d.facts["model"] = '<img src="https://t.example/p.png">'
    d.notes.append("see [here](https://t.example) | `x`")
    out = render(d, "markdown")
    outside = re.sub(r"(?ms)^(`{3,}).*?^\1$", "", out)
    assert not re.search(r"(?<!\\)<img|(?<!\\)\]\(", outside)      # only backslash-escaped: literal text


# ---- hangs and resources ------------------------------------------------------------------------
def test_fifo_in_a_triaged_folder_is_listed_not_opened(pair):
    (pair / "runs").mkdir()
    (pair / "runs/a.log").write_bytes(LOG)
    os.mkfifo(pair / "runs/pipe.log")
    p = subprocess_cli("triage", "runs", "--format", "json", cwd=pair)
    report = json.loads(p.stdout)
    assert p.returncode == 1 and report["summary"]["diagnosed"] == 1
    assert [e["path"] for e in report["errors"]] == ["runs/pipe.log"] and "FIFO" in report["errors"][0]["error"]
    p = subprocess_cli("triage", "runs/pipe.log", cwd=pair)
    assert p.returncode == 2


def test_config_size_is_capped(cli, pair):
    with open(pair / "cfg.yaml", "ab") as fh:
        fh.write(b"extra_settings:\n" + b"".join(b"  key_%08d: value\n" % i for i in range(80000)))
    rc, _, err = cli("diagnose", "train.log", "--config", "cfg.yaml")
    assert rc == 2 and "too big" in err and one_line(err)


def test_jobs_are_capped_at_the_usable_cpus(cli, pair):
    from advisor.triage.run import usable_cpus
    (pair / "runs").mkdir()
    for i in range(3):
        (pair / f"runs/f{i}.log").write_bytes(LOG)
    rc, _, err = cli("triage", "runs", "--jobs", "1000")
    assert rc == 1 and f"capped at {usable_cpus()}" in err


def test_a_nul_tail_after_the_text_is_cut(cli, pair):
    (pair / "tail.log").write_bytes(LOG + b"\x00" * 65536)
    rc, out, _ = cli("diagnose", "tail.log", "--format", "json")
    assert rc == 1 and json.loads(out)["verdict"] == "device_oom"
    (pair / "zeros.log").write_bytes(b"\x00" * 4096)
    assert cli("diagnose", "zeros.log")[0] == 2                 # all NUL: still not a log


@pytest.mark.parametrize("value,shown", [("0", False), ("", False), ("off", False), ("1", True)])
def test_debug_zero_means_off(cli, pair, monkeypatch, value, shown):
    import advisor.pipeline
    def boom(*a, **k):
        raise ZeroDivisionError("simulated internal error")
    monkeypatch.setattr(advisor.pipeline, "diagnose_path", boom)
    monkeypatch.setenv("OOM_DOCTOR_DEBUG", value)
    if shown:
        with pytest.raises(ZeroDivisionError):
            cli("diagnose", "train.log")
    else:
        rc, _, err = cli("diagnose", "train.log")
        assert rc == 2 and "internal error" in err and one_line(err)


def test_budget_on_a_zero_gib_card_is_a_usage_error(cli, pair):
    rc, _, err = cli("budget", "--params", "7B", "--gpu", "0GiB")
    assert rc == 2 and one_line(err)


def test_a_symlink_loop_is_named(cli, pair):
    os.symlink("loop.yaml", pair / "loop.yaml")
    rc, _, err = cli("diagnose", "train.log", "--config", "loop.yaml")
    assert rc == 2 and "symlink loop" in err
    (pair / "runs").mkdir()
    (pair / "runs/a.log").write_bytes(LOG)
    os.symlink("loop.log", pair / "runs/loop.log")
    rc, out, _ = cli("triage", "runs", "--format", "json")
    errors = json.loads(out)["errors"]
    assert rc == 1 and "symlink loop" in errors[0]["error"]


@pytest.mark.parametrize("name,content,args", [
    ("list.json", "[]\n", ["budget", "--model-config", "list.json"]),
    ("zero.json", json.dumps({"hidden_size": 4096, "num_attention_heads": 0, "num_hidden_layers": 32,
                              "vocab_size": 32000, "intermediate_size": 11008}), ["budget", "--model-config", "zero.json"]),
    ("deep.json", '{"a":' * 20000 + "1" + "}" * 20000, ["diagnose", "train.log", "--config", "deep.json"]),
    ("shape.json", json.dumps({"base_model": "m", "adapter": "lora", "micro_batch_size": 8,
                               "deepspeed": {"zero_optimization": [1]}}), ["diagnose", "train.log", "--config", "shape.json"]),
])
def test_odd_json_shapes_get_a_plain_error(cli, pair, name, content, args):
    (pair / name).write_text(content)
    rc, _, err = cli(*args)
    assert rc == 2 and one_line(err) and "internal error" not in err, err


def test_a_deepspeed_path_in_the_config_is_read_only_if_regular(pair):
    os.mkfifo(pair / "ds.json")
    (pair / "cfg.yaml").write_bytes(CFG + b"deepspeed: ds.json\n")
    p = subprocess_cli("diagnose", "train.log", "--config", "cfg.yaml", "--format", "json", cwd=pair)
    assert p.returncode == 1 and json.loads(p.stdout)["verdict"] == "device_oom"


def test_an_infinite_number_in_the_config_is_ignored_not_a_crash(cli, pair):
    (pair / "cfg.yaml").write_bytes(CFG.replace(b"lora_r: 16", b"lora_r: 1e400"))
    rc, _, err = cli("diagnose", "train.log", "--config", "cfg.yaml")
    assert rc == 1 and "internal error" not in err
