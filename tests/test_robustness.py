"""Robustness (issue 8): whatever a user pastes, the diagnosis never crashes and never hangs, and a log
that a terminal re-wrapped or an editor re-encoded gets the same verdict, phase and component.

Library-level properties run diagnose_text in-process (fast); a few run the command line to check
its contract on junk: exit 0, 1 or 2, and never a traceback. The mutations are those of
benchmarks/fuzz.py, which also runs here in a short version (2 000 cases).
"""

import functools
import importlib.util
import json
import os
import random
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import REAL_LOGS, ROOT, SAMPLES

from advisor.pipeline import diagnose_text
from advisor.read.reader import InputError

_spec = importlib.util.spec_from_file_location("oom_fuzz", ROOT / "benchmarks" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

LOGS = sorted(SAMPLES.glob("*.log")) + (sorted(REAL_LOGS.glob("*/log.txt")) if REAL_LOGS.is_dir() else [])
IDS = [fuzz.log_name(p) for p in LOGS]
SECONDS = 10          # one diagnosis of a small mutated log; they take milliseconds
SEEDS = st.integers(0, 2**32 - 1).map(random.Random)   # one draw, however many lines a mutation touches
FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(data):
    """(verdict, phase, component), or 'input_error' (exit 2): anything else raised is a crash."""
    t0 = time.perf_counter()
    try:
        d = diagnose_text(data, with_plan=False)
        got = (d.verdict, d.phase, d.component)
    except InputError as e:
        assert str(e) and "\n" not in str(e)
        got = "input_error"
    assert time.perf_counter() - t0 < SECONDS
    return got


@functools.lru_cache(maxsize=None)
def original(path):
    got = outcome(path.read_bytes())
    assert got != "input_error", f"{path} is refused as it stands"
    return got


@functools.lru_cache(maxsize=None)
def text_of(path):
    text = fuzz.decode(path.read_bytes())
    if text is None:
        pytest.skip(f"{path.name}: encoding not certain")
    return text


# ---- any bytes -------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_any_bytes_diagnose_or_input_error(data):
    outcome(data)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_any_text_diagnose_or_input_error(text):
    outcome(text.encode("utf-8"))
    outcome(text.encode("utf-16"))


_LOGGISH = st.lists(st.sampled_from([
    "Traceback (most recent call last):", '  File "/x/trainer.py", line 1, in training_step', "    loss.backward()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of",
    "23.65 GiB of which 1.00 GiB is free.", "Killed", "{'loss': 1.0, 'epoch': 0.1}", "***** Running training *****",
    " 10%|#         | 1/10 [00:01<00:09, 1.0it/s]", "[rank1]: RuntimeError: CUDA error: out of memory", "",
    "Loading checkpoint shards:  50%|#####     | 1/2", "exitcode  : -9 (pid: 1)", "\x1b[31mERROR\x1b[0m failed",
    "Saving model checkpoint to out/checkpoint-50", "RuntimeError: NCCL error", "\r", "\x00", "中文日志",
]), max_size=60)


@settings(max_examples=300, deadline=None)
@given(_LOGGISH, st.sampled_from(["\n", "\r\n", "\r", ""]))
def test_log_fragments_in_any_order(lines, sep):
    outcome(sep.join(lines).encode("utf-8"))


# ---- damaged logs: never crash ---------------------------------------------------------------------
@settings(max_examples=400, deadline=None)
@given(st.sampled_from(LOGS), st.sampled_from(sorted(fuzz.DAMAGING)), SEEDS)
def test_damaged_log_never_crashes(path, kind, rnd):
    outcome(fuzz.DAMAGING[kind](path.read_bytes(), rnd))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(LOGS), st.sampled_from(sorted(fuzz.DAMAGING_TEXT)), SEEDS)
def test_damaged_text_never_crashes(path, kind, rnd):
    text = fuzz.decode(path.read_bytes())
    if text is not None:
        outcome(fuzz.DAMAGING_TEXT[kind](text, rnd))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(LOGS), st.data())
def test_truncated_at_any_byte(path, data):
    raw = path.read_bytes()
    cut = data.draw(st.integers(0, len(raw)))
    outcome(raw[:cut])
    outcome(raw[cut:])


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(LOGS), SEEDS)
def test_interleaved_ranks_and_nul_bytes(path, rnd):
    raw = path.read_bytes()
    outcome(fuzz.interleave_ranks(raw, rnd))
    outcome(fuzz.nul_bytes(fuzz.stray_cr(raw, rnd), rnd))


# ---- what terminals and editors do: same diagnosis ---------------------------------------------------
@pytest.mark.parametrize("path", LOGS, ids=IDS)
@FEW
@given(width=st.integers(80, 250))
def test_rewrapped_log_same_diagnosis(path, width):
    assert outcome(fuzz.hard_wrap(text_of(path), width).encode("utf-8")) == original(path), f"width {width}"


@pytest.mark.parametrize("path", LOGS, ids=IDS)
def test_reencoded_log_same_diagnosis(path):
    text = text_of(path)
    variants = {
        "gb18030": text.encode("gb18030"),
        "utf-16": text.encode("utf-16"),
        "utf-16-be+bom": b"\xfe\xff" + text.encode("utf-16-be"),
        "utf-8-sig": text.encode("utf-8-sig"),
        "crlf": fuzz.crlf(text).encode("utf-8"),
        "crlf+utf-16": fuzz.crlf(text).encode("utf-16"),
    }
    gbk, lossless = fuzz.encode(text, "gbk")
    if lossless:
        variants["gbk"] = gbk
    if text.isascii():                  # Latin-1 cannot hold CJK or tqdm's block characters
        variants["latin-1"] = text.encode("latin-1")
    for name, data in variants.items():
        assert outcome(data) == original(path), name


@pytest.mark.parametrize("path", LOGS, ids=IDS)
@FEW
@given(rnd=SEEDS)
def test_ansi_coloured_log_same_diagnosis(path, rnd):
    assert outcome(fuzz.inject_ansi(text_of(path), rnd).encode("utf-8")) == original(path)


@pytest.mark.parametrize("path", LOGS, ids=IDS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(width=st.integers(80, 250), encoding=st.sampled_from(["utf-8", "gb18030", "utf-16", "utf-8-sig"]),
       newline=st.sampled_from(["\n", "\r\n"]), rank=st.sampled_from([None, 0, 3]),
       rnd=SEEDS, colour=st.booleans())
def test_terminal_copy_same_diagnosis(path, width, encoding, newline, rank, rnd, colour):
    """A torchrun rank prefix, colour, a terminal's wrap, Windows newlines and another encoding at once."""
    text = text_of(path)
    if rank is not None:
        text = fuzz.rank_prefix(text, rank)
    if colour:
        text = fuzz.inject_ansi(text, rnd)
    text = fuzz.hard_wrap(text, width).replace("\n", newline)
    assert outcome(text.encode(encoding)) == original(path)


# ---- the reader's wrap decisions, one case each -----------------------------------------------------------
def texts(data):
    import io
    from advisor.evidence.lines import logical_lines
    return [ln.text for ln in logical_lines(io.BytesIO(data))]


def test_one_long_line_wrapped_once_is_rejoined():
    """Too few full-width lines for statistics; the cut phrase (a frame split in its line number,
    an allocator message split in a word) shows the wrap (real_logs ot-017, lf-014)."""
    frame = '  File "/home/user/envs/trf/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", ' \
            'line 1432, in all_gather'
    host = "RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate " \
           "memory: you tried to allocate 104857600 bytes. Error code 12 (Cannot allocate memory)"
    for line in (frame, host):
        for width in (80, 97, 110):
            assert line in texts(fuzz.hard_wrap(line + "\nnext\n", width).encode()), width


def test_a_full_width_piece_does_not_swallow_the_next_record():
    """A message whose length is a multiple of the width ends in a full-width piece; the launcher's
    next line is a record of its own (real_logs ot-008, ot-030)."""
    msg = "torch.OutOfMemoryError: CUDA out of memory. " + "x" * 155
    wrapped = fuzz.hard_wrap(msg, 100) + "\n[2023-12-22 07:10:38,757] [WARNING] Sending process 1 closing signal SIGTERM\n"
    got = texts(("\n".join(["a" * 100, "b" * 100, "c" * 90]) + "\n" + wrapped).encode())
    assert msg in got
    assert got[-1].startswith("[2023-12-22")


def test_many_records_of_one_length_are_not_a_wrap():
    """Identical loss lines are the longest lines of this log: not a wrap, and never joined into one."""
    step = "{'loss': 1.0, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}"
    got = texts(("\n".join([step] * 20000) + "\nRuntimeError: CUDA error: out of memory\n").encode())
    assert len(got) == 20001 and got[0] == step


def test_a_wrap_chain_is_bounded():
    """Thousands of full-width lines that all look like continuations (a base64 blob) join in linear
    time, into lines no longer than a physical line may be."""
    t0 = time.perf_counter()
    got = texts(("\n".join(f"{i:08d}" + "QUJD" * 17 for i in range(100000)) + "\nend\n").encode())
    assert time.perf_counter() - t0 < 20
    assert max(map(len, got)) <= 64 * 1024 + 76 and got[-1].endswith("end")


def test_a_growing_file_is_read_as_it_stood(tmp_path):
    from advisor.read.reader import open_source
    log = tmp_path / "train.log"
    log.write_bytes(b"first\n")
    name, stream = open_source(str(log))
    with open(log, "ab") as fh:
        fh.write(b"written later\n")
    try:
        assert stream.read() == b"first\n" and stream.read(10) == b""
    finally:
        stream.close()


# ---- the command line on junk -------------------------------------------------------------------------
def cli(args, stdin=None):
    env = dict(os.environ)
    env.pop("OOM_DOCTOR_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "advisor.cli", *args], input=stdin, capture_output=True, cwd=ROOT,
                       env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def assert_contract(rc, err):
    assert rc in (0, 1, 2), err
    assert "Traceback" not in err
    if rc == 2:
        assert err.startswith("oom-doctor: ") and err.count("\n") <= 1, err


@settings(max_examples=6, deadline=None)
@given(st.binary(max_size=3000))
def test_cli_any_bytes_on_stdin(data):
    rc, out, err = cli(["diagnose", "-", "--format", "json"], stdin=data)
    assert_contract(rc, err)
    if rc in (0, 1):
        assert json.loads(out)["verdict"]


@settings(max_examples=4, deadline=None)
@given(st.sampled_from(LOGS), st.sampled_from(["truncate_bytes", "nul_bytes", "byte_flips", "binary_junk"]),
       SEEDS)
def test_cli_damaged_log_as_file(tmp_path_factory, path, kind, rnd):
    f = tmp_path_factory.mktemp("damaged") / "train.log"
    f.write_bytes(fuzz.DAMAGING[kind](path.read_bytes(), rnd))
    for fmt in ("text", "json"):
        rc, out, err = cli(["diagnose", str(f), "--format", fmt])
        assert_contract(rc, err)


@pytest.mark.parametrize("data", [b"", b"\x00" * 5000, bytes(range(256)) * 40, b"\xff\xfe", b"\r\r\r", b"\xef\xbb\xbf"],
                         ids=["empty", "nuls", "binary", "bom-only", "cr-only", "utf8-bom-only"])
def test_cli_degenerate_input_is_one_line(data):
    rc, out, err = cli(["diagnose", "-"], stdin=data)
    assert_contract(rc, err)


# ---- the fuzz script, short -----------------------------------------------------------------------------
def test_fuzz_script_short_run():
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz.py"), "--n", "2000", "--jobs", "2", "--json",
                        "--quiet"], capture_output=True, cwd=ROOT, timeout=300, text=True)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["total"] == 2000, p.stdout + p.stderr
    assert (report["crashed"], report["hung"], report["changed"]) == (0, 0, 0), p.stdout
    assert p.returncode == 0, p.stdout + p.stderr
    assert time.monotonic() - t0 < 240
