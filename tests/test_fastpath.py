"""The windowed reading of big files gives the same diagnosis as reading everything."""

import re
import sys
from pathlib import Path

import pytest

from advisor.diagnosis.diagnose import diagnose_timeline
from advisor.evidence.fastpath import timeline_of
from advisor.evidence.windows import parse_all as _parse_all
from conftest import REAL_LOGS, ROOT, SAMPLES

sys.path.insert(0, str(ROOT / "benchmarks"))
from biglog import write_log  # noqa: E402

LOGS = sorted(SAMPLES.glob("*.log")) + (sorted(REAL_LOGS.glob("*/log.txt")) if REAL_LOGS.is_dir() else [])
# window sizes scaled down so that logs of a few KB exercise every branch of the windowed reader
SCALED = [dict(big=0, head=2000, region_max=3000, window=1500), dict(big=0, head=4000, region_max=500, window=6000),
          dict(big=0, head=8000, region_max=32000, window=8000)]


def key(t):
    d = diagnose_timeline(t).to_json_dict()
    return {k: d[k] for k in ("verdict", "phase", "component", "rule", "memory")} | {"step": d["facts"]["step"]}


@pytest.mark.parametrize("sizes", SCALED, ids=["small-windows", "huge-region", "medium"])
def test_windows_agree_with_full_parse_on_every_log(sizes):
    diffs = []
    for path in LOGS:
        with open(path, "rb") as a, open(path, "rb") as b:
            full, fast = key(_parse_all(a, str(path))), key(timeline_of(b, str(path), **sizes))
        if full != fast:
            diffs.append((path.name, {k: (full[k], fast[k]) for k in full if full[k] != fast[k]}))
    assert not diffs




def test_windowed_evidence_is_marked_approximate(tmp_path):
    path = tmp_path / "big.log"
    write_log(path, 20 << 20, "end")
    with open(path, "rb") as fh:
        d = diagnose_timeline(timeline_of(fh, str(path)))
    oom = next(e for e in d.evidence if e.marker == "oom_error")
    real = next(i for i, line in enumerate(Path(path).read_bytes().split(b"\n"), 1) if b"CUDA out of memory" in line)
    assert oom.approximate and abs(oom.line - real) < 0.05 * real


# ---- the stream path: a pipe cannot seek, yet it parses the same spans as the file path ------------

import io  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import threading  # noqa: E402

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from advisor.evidence import fastpath, stream, windows  # noqa: E402

_PARSE_SPANS = windows.parse_spans


def _spans_of(monkeypatch, run):
    """(timeline, the spans it parsed) of one call; [] when it parsed everything."""
    seen = []

    def spy(mm, spans, *a):
        seen.append(spans)
        return _PARSE_SPANS(mm, spans, *a)
    monkeypatch.setattr(windows, "parse_spans", spy)
    monkeypatch.setattr(stream, "parse_spans", spy)
    return run(), seen


def _both(monkeypatch, tmp_path, data, chunk, **sizes):
    """File path and stream path over the same bytes: (file key, file spans, stream key, stream spans)."""
    monkeypatch.setattr(stream, "CHUNK", chunk)
    path = tmp_path / "log.txt"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        f, f_spans = _spans_of(monkeypatch, lambda: timeline_of(fh, "log", **sizes))
    s, s_spans = _spans_of(monkeypatch, lambda: timeline_of(io.BytesIO(data), "log", **sizes))
    return key(f), f_spans, key(s), s_spans


@pytest.mark.parametrize("sizes,chunk", [(SCALED[0], 977), (SCALED[1], 1 << 16), (SCALED[2], 4093)],
                         ids=["small-windows", "huge-region", "medium"])
def test_stream_agrees_with_file_path_and_full_parse_on_every_log(monkeypatch, tmp_path, sizes, chunk):
    diffs = []
    for path in LOGS:
        data = path.read_bytes()
        fk, f_spans, sk, s_spans = _both(monkeypatch, tmp_path, data, chunk, **sizes)
        full = key(_parse_all(io.BytesIO(data), "log"))
        if not (fk == sk == full and f_spans == s_spans):
            diffs.append((path.name, f_spans, s_spans, {k: (full[k], sk[k]) for k in full if full[k] != sk[k]}))
    assert not diffs


def _variants(data):
    text = data.decode("utf-8", errors="replace")
    wrapped = "\n".join(ln[i:i + 100] for ln in text.split("\n") for i in range(0, max(len(ln), 1), 100))
    return {"crlf": text.replace("\n", "\r\n").encode("utf-8"), "gbk": text.encode("gbk", errors="replace"),
            "utf16": text.encode("utf-16"), "wrapped": wrapped.encode("utf-8"), "bom": text.encode("utf-8-sig")}


@pytest.mark.parametrize("name", ["lf-first-step-activations", "hard-wrapped-paste", "carriage-return-progress",
                                  "gbk-encoded", "host-oom-killed", "ds-zero3-save-oom"])
def test_stream_on_encoded_wrapped_and_crlf_inputs(monkeypatch, tmp_path, name):
    raw = (SAMPLES / f"{name}.log").read_bytes()
    from advisor.read.reader import sniff_encoding
    base = raw.decode(sniff_encoding(raw[:65536]), errors="replace").encode("utf-8")
    for variant, data in _variants(base).items():
        full = key(_parse_all(io.BytesIO(data), "log"))
        for i, sizes in enumerate(SCALED):
            fk, f_spans, sk, s_spans = _both(monkeypatch, tmp_path, data, 1531, **sizes)
            assert fk == sk and f_spans == s_spans, (variant, sizes)
            # a 2 KB head cannot tell a 100-column wrap cut through '\r' redraws: the file path's own
            # windows miss the step there (real windows are 256 KB); everywhere else all three agree
            if (name, variant, i) != ("carriage-return-progress", "wrapped", 0):
                assert sk == full, (variant, sizes)


@pytest.mark.parametrize("failure", ["start", "middle", "end"])
def test_big_generated_log(monkeypatch, tmp_path, failure):
    path = tmp_path / f"{failure}.log"
    write_log(path, 24 << 20, failure)
    with open(path, "rb") as a, open(path, "rb") as b:
        full, (fast, f_spans) = _parse_all(a, str(path)), _spans_of(monkeypatch, lambda: timeline_of(b, str(path)))
    assert fast.exact_lines is not None            # the windowed reader was used
    assert key(fast) == key(full)
    assert key(fast)["verdict"] == "device_oom"
    read, write = os.pipe()                        # the same log through a real pipe: the stream path

    def writer():
        with os.fdopen(write, "wb") as out, open(path, "rb") as src:
            shutil.copyfileobj(src, out)
    threading.Thread(target=writer, daemon=True).start()
    with os.fdopen(read, "rb") as pipe:
        piped, p_spans = _spans_of(monkeypatch, lambda: timeline_of(pipe, "<stdin>"))
    assert p_spans == f_spans                      # the same windows, found without seeking
    assert key(piped) == key(full) and piped.exact_lines is not None


def test_stream_keeps_memory_bounded(monkeypatch):
    """Whatever the length, only the head, the ring and a few windows stay."""
    monkeypatch.setattr(stream, "CHUNK", 1 << 20)
    tape = stream._Tape(fastpath.HEAD, fastpath.REGION_MAX, fastpath.WINDOW)
    bar = b"\r 10%|#  | 100/1000 [00:10<01:30,  1.00it/s]" * 20 + b"\n{'loss': 1.0}\n"
    noise = b"Saving model checkpoint to out/x\nRuntimeError: boom\n" + bar * 3
    for i in range(200):
        tape.feed((noise if i % 7 == 0 else bar) * (1 << 20 // len(bar)))
    held = sum(len(c) for _, c in tape.ring) + sum(map(len, tape.caps.values())) + len(tape.head)
    assert held < 16 << 20 and len(tape.signals) + len(tape.markers) < 1000


_PIECES = [b"\r 50%|#####     | 5/10 [00:05<00:05,  1.00s/it]", b"{'loss': 1.2, 'epoch': 0.1}\n", b"\n",
           b"***** Running training *****\n", b"Saving model checkpoint to out/checkpoint-5\n", b"\r\n",
           b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity"
           b" of 79.15 GiB of which 1.00 GiB is free.\n", b"Traceback (most recent call last):\n",
           "  \u6a21\u578b \u52a0\u8f7d\u4e2d\n".encode("utf-8"), b"[rank1]: RuntimeError: NCCL error\n",
           b"Killed\n", b"  Num examples = 100\n", b"x" * 300 + b"\n"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(_PIECES), min_size=5, max_size=120), chunk=st.integers(7, 400),
       sizes=st.sampled_from(SCALED))
def test_chunk_edges_cut_anchors_characters_and_crlf(monkeypatch, tmp_path, parts, chunk, sizes):
    data = b"".join(parts) * 3
    fk, f_spans, sk, s_spans = _both(monkeypatch, tmp_path, data, chunk, **sizes)
    assert f_spans == s_spans
    assert fk == sk


def test_regex_fallback_finds_what_aho_corasick_finds():
    anchors = stream._ANCHORS
    data = b"".join(_PIECES) * 5 + b"OutOfMemoryError ***** Running training ChildFailedError rror"
    assert stream._matcher(anchors)(data) == stream._regex_matcher(anchors)(data)
    assert stream._matcher(anchors)(memoryview(data)[3:]) == stream._regex_matcher(anchors)(data[3:])


def test_every_signal_and_marker_pattern_has_an_anchor():
    """The windows are found by searching anchors, not by parsing: a pattern none of whose anchors
    the search looks for would never be found in a big file or a pipe."""
    from advisor.evidence.anchors import required
    from advisor.evidence.phrases import MARKER_PHRASES
    from advisor.evidence.signals import PATTERNS
    for table, anchors in [([p for _, _, p in PATTERNS], windows.SIGNALS), ([MARKER_PHRASES.pattern], windows.MARKERS)]:
        for pattern in table:
            literals = required(pattern)
            assert literals, f"no literal of 3+ characters in every alternative of {pattern!r}"
            missed = [lit for lit in literals if not any(a in lit.encode() for a in anchors)]
            assert not missed, f"{pattern!r}: {missed} hold no anchor"
    assert required(r"\d+ ?G|CUDA out of memory") is None          # an alternative without a literal
    assert required(r"(?:CUDA|HIP) out of memory\b") == [" out of memory"]
    assert required(r"NCCL (?:error|WARN)") == ["NCCL error", "NCCL WARN"]
    assert set(required(r"\*{5} Running (?:training|Evaluation) \*{5}")) == {"***** Running training",
                                                                           "***** Running Evaluation"}


def test_literal_gates_change_no_answer():
    """Seam phrases, signal patterns and framework names are asked for by their literals (or an
    automaton) before a regex runs: on every line of the samples each gated search answers as the
    bare regex does, and every match holds one of the literals its gate asks for."""
    from advisor.evidence import lines, phrases, signals
    from advisor.evidence.anchors import Gated, required
    from advisor.evidence.lines import logical_lines
    assert required(r"(?P<pct>\d{1,3})%\s*\|", shortest=1) == ["%"]      # a bar: one character is its literal
    assert required(r"(?P<pct>\d{1,3})%\s*\|") is None
    signals.classify("warm")
    for path in LOGS:
        with open(path, "rb") as fh:
            texts = [ln.text for ln in logical_lines(fh)]
        for text in texts:
            bare = next(((k, d) for k, d, rx in signals._COMPILED if rx.search(text)), None)
            assert signals.classify(text) in (None, bare), (path.name, text)
            for rx, literals in lines._seam_patterns():
                for m in rx.finditer(text) if literals else ():
                    assert any(lit in m.group(0) for lit in literals), (rx.pattern, m.group(0))
            for gated in signals._GATED + [phrases.SAVE_LINE, phrases.LOAD_LINE, phrases.SETUP_LINE]:
                assert bool(gated.search(text)) == bool(gated.rx.search(text)), (gated.rx.pattern, text)
        joined = "\n".join(texts)
        assert list(phrases.framework_names(joined)) == [(m.group(0), m.start())
                                                        for m in phrases.FRAMEWORK_RX.finditer(joined)], path.name


def test_batched_prefilters_change_nothing():
    """feed_batch searches the joined text of many lines at once; line by line must give the same."""
    from advisor.evidence.parser import Parser, parse
    from advisor.evidence.lines import logical_lines
    for path in LOGS:
        with open(path, "rb") as fh:
            lines = list(logical_lines(fh))
        one = Parser(str(path))
        for line in lines:
            one.feed(line)
        assert parse(lines, str(path)).model_dump() == one.finish().model_dump(), path.name


def test_batched_checks_follow_a_split_command_and_the_lines_after_it():
    """A launch command split with backslashes goes on over lines no word marks; the batch path must
    join them as the line-by-line path does, and keep counting and ringing the rest."""
    from advisor.evidence.parser import Parser, parse
    from advisor.evidence.lines import Line
    texts = ["$ CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 src/train.py --do_train \\", "    --stage sft \\",
             "    plain words here \\", "    --per_device_train_batch_size 8", "nothing to see"] + \
            [f"[rank{i % 2}]: filler {i}" for i in range(40)] + ["torch.OutOfMemoryError: CUDA out of memory."]
    lines = [Line(i + 1, t, 1 if t.startswith("[rank1]") else None) for i, t in enumerate(texts)]
    one = Parser("x")
    for line in lines:
        one.feed(line)
    want = one.finish().model_dump()
    got = parse(lines, "x").model_dump()
    assert got == want
    assert "plain words here" in got["command"] and got["facts"]["batch"] == 8


def _ungated_literals(node, gate, guarded=False):
    """The `"x" in text` literals of `node` that neither hold a gate word nor sit under a test that does
    (an `if` whose test, or an `and` one of whose terms, needs a gated literal)."""
    import ast

    def needs_gate(test):              # a test true only on lines holding a gate word
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In) and isinstance(test.left, ast.Constant) \
                and isinstance(test.comparators[0], ast.Name) and test.comparators[0].id == "text":
            return any(w in test.left.value for w in gate)
        if isinstance(test, ast.BoolOp):
            parts = [needs_gate(v) for v in test.values]
            return any(parts) if isinstance(test.op, ast.And) else all(parts)
        return False
    out = []
    if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and isinstance(node.left, ast.Constant) \
            and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == "text":
        return [] if guarded or any(w in node.left.value for w in gate) else [node.left.value]
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) and needs_gate(node):
        guarded = True
    if isinstance(node, ast.If) and needs_gate(node.test):
        for child in node.body:
            out += _ungated_literals(child, gate, True)
        for child in [node.test] + node.orelse:
            out += _ungated_literals(child, gate, guarded)
        return out
    for child in ast.iter_child_nodes(node):
        out += _ungated_literals(child, gate, guarded)
    return out


def test_every_substring_check_of_the_parser_holds_one_of_its_words():
    """A check the batch scan does not run on a line must fail there every substring test it starts with."""
    import ast
    import inspect
    import advisor.evidence.parser as parser
    from advisor.evidence.progress import Progress
    from advisor.evidence.run_facts import FactReader
    tree = ast.parse(inspect.getsource(Progress) + "\n" + inspect.getsource(FactReader))
    words = {"on_progress": parser._PROGRESS_WORDS, "on_marker": parser._MARKER_WORDS, "on_facts": parser._FACT_WORDS,
             "on_script": parser._SCRIPT_WORDS, "on_memory": parser._MEMORY_WORDS}
    checks = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in words]
    assert len(checks) == len(words)
    literals = [(fn.name, lit) for fn in checks for lit in _ungated_literals(fn, words[fn.name])]
    assert not literals, literals


def test_every_signal_pattern_holds_a_key():
    """classify() skips a line holding no key, and the batch scan runs it only where one is: every
    literal a signal pattern requires must hold one."""
    from advisor.evidence import signals as sig
    from advisor.evidence.anchors import required
    missing = [(d, lit) for _, d, p in sig.PATTERNS for lit in required(p) or ["<no literal>"]
               if not any(k in lit for k in sig.KEYS)]
    assert not missing, missing


def test_diagnose_bytes_gives_what_the_file_gives_on_every_log():
    """The library entry for logs already in memory (batch items) diagnoses as the file path does."""
    from advisor.pipeline import diagnose_bytes, diagnose_path

    def facts(d):
        j = d.to_json_dict()
        return {k: j.get(k) for k in ("verdict", "rule", "phase", "component", "memory", "evidence")}
    diffs = [p.name for p in LOGS
             if facts(diagnose_bytes(p.read_bytes(), str(p), with_plan=False)) != facts(diagnose_path(str(p), with_plan=False))]
    assert not diffs
