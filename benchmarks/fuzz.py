"""Fuzz the diagnosis: mutate real and sample logs, count crashes, hangs and broken invariants.

    python benchmarks/fuzz.py [--n 100000] [--seconds N] [--jobs 2] [--seed 0] [--timeout 5]
    python benchmarks/fuzz.py --case 1234 [--seed 0]      # replay one case, print its traceback
    python benchmarks/fuzz.py --full ...                  # also plan and render every format

Every case is derived from (seed, case number) alone, so a failure is reproducible with --case.
Mutations come in two kinds:

- invariance-preserving — what a terminal, an editor or a web page does to a log without changing
  what it says: hard wraps at 80-250 columns (every longer line cut at exactly that width), re-encoding
  (GBK, GB18030, UTF-16 with and without BOM, UTF-8 with BOM, Latin-1 for ASCII-only logs), CRLF,
  ANSI colour codes, a torchrun `[rankN]:` prefix. The verdict, phase and component must not change.
- damaging — truncation at any byte, dropped and duplicated lines, NUL bytes, interleaved ranks, byte
  flips, binary junk, stray carriage returns, mixed encodings, spliced logs, lost newlines. Only
  "never crash, never hang" holds: an input error (exit 2) is a fine answer.

- safety (one case in ten) — hostile text: OSC/CSI/DCS sequences (doubled ESCs that a one-pass
  filter would turn into working ones), C1 controls and bidi overrides spliced into log lines; and
  hostile configs: each sample's config re-encoded (CRLF, BOM, UTF-16, Latin-1/GBK comments) or
  respelt (`[a,b]`, `~`, `2.0e-5`, quotes), or broken in shape (anchors of any name, duplicate
  keys, deep nesting, lists and nulls where numbers belong, zeros, controls in values, NULs,
  truncation). Every report of a safety case is rendered in every format: a control character from
  the input in any output is a `leaked` failure; after --write, a line the plan did not change
  that is not byte for byte the same (or a changed encoding, BOM or line ending) is `config_changed`.

A crash is any exception other than reader.InputError; a hang is a case over --timeout seconds
(SIGALRM inside the worker; a worker silent for longer than 3x that is killed and replaced).
The summary is printed as text, and with --json as one JSON object on the last line.
Exit status: 0 when nothing crashed, hung or broke an invariant (and every original log was read),
1 otherwise.
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OOM_DOCTOR_SHARED", ROOT.parent / "shared"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ---- corpus ----------------------------------------------------------------------------------------
def corpus_paths():
    paths = sorted((ROOT / "log_samples").glob("*.log"))
    real = SHARED / "real_logs"
    if real.is_dir():
        paths += sorted(real.glob("*/log.txt"))
    return paths


def log_name(path):
    path = Path(path)
    return path.parent.name if path.name == "log.txt" else path.stem


def decode(raw):
    """The log's text when its encoding is certain (UTF-8, else what the reader sniffs, strictly)."""
    from advisor.read.reader import InputError, sniff_encoding
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode(sniff_encoding(raw))
    except (UnicodeDecodeError, InputError):
        return None


def load_corpus():
    """[(name, bytes, text or None)]; text is None when the encoding is uncertain (byte mutations only)."""
    return [(log_name(p), p.read_bytes(), decode(p.read_bytes())) for p in corpus_paths()]


# ---- invariance-preserving mutations ---------------------------------------------------------------
def hard_wrap(text, width):
    """What a terminal does: every line longer than `width` is cut into pieces of exactly `width`
    characters. Escape codes take no column (a coloured line wraps where the plain one would)."""
    out = []
    for line in text.split("\n"):
        if "\x1b" in line:
            out.extend(_wrap_coloured(line, width))
            continue
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out)


_ESC = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _wrap_coloured(line, width):
    pieces, cur, shown = [], [], 0
    for tok in re.findall(r"\x1b\[[0-9;?]*[ -/]*[@-~]|.", line, re.S):
        if not _ESC.fullmatch(tok):
            if shown == width:
                pieces.append("".join(cur))
                cur, shown = [], 0
            shown += 1
        cur.append(tok)
    pieces.append("".join(cur))
    return pieces


ENCODINGS = ("gbk", "gb18030", "utf-16", "utf-16-le", "utf-16-be", "utf-8-sig", "latin-1")


def encode(text, encoding):
    """(bytes, lossless). UTF-16 without a BOM is written by naming the byte order explicitly."""
    try:
        return text.encode(encoding), True
    except UnicodeEncodeError:
        return text.encode(encoding, errors="replace"), False


def crlf(text):
    return text.replace("\n", "\r\n")


ANSI_CODES = ("\x1b[0m", "\x1b[31m", "\x1b[1;31m", "\x1b[32m", "\x1b[33m", "\x1b[1m", "\x1b[2m", "\x1b[36m",
              "\x1b[38;5;208m", "\x1b[38;2;255;128;0m", "\x1b[K", "\x1b[2K", "\x1b[?25l", "\x1b[?25h", "\x1b[39;49m")


def inject_ansi(text, rng, density=None):
    """Colour whole lines, single words and arbitrary spans, as loggers and shells do."""
    density = rng.uniform(0.05, 0.6) if density is None else density
    out = []
    for line in text.split("\n"):
        r = rng.random()
        if line and r < density / 2:
            line = rng.choice(ANSI_CODES) + line + "\x1b[0m"
        elif line and r < density:
            a = rng.randrange(len(line) + 1)
            b = rng.randrange(a, len(line) + 1)
            line = line[:a] + rng.choice(ANSI_CODES) + line[a:b] + "\x1b[0m" + line[b:]
        out.append(line)
    return "\n".join(out)


def rank_prefix(text, rank=0, style="rank"):
    pre = f"[rank{rank}]: " if style == "rank" else f"[default{rank}]:"
    return "\n".join(pre + ln if ln else ln for ln in text.split("\n"))


# ---- damaging mutations -----------------------------------------------------------------------------
def _lines(raw):
    return raw.split(b"\n")


def truncate_bytes(raw, rng):
    return raw[:rng.randrange(len(raw) + 1)]


def cut_head(raw, rng):
    return raw[rng.randrange(len(raw) + 1):]


def truncate_lines(raw, rng):
    lines = _lines(raw)
    return b"\n".join(lines[:rng.randrange(len(lines) + 1)])


def drop_lines(raw, rng):
    lines = _lines(raw)
    p = rng.choice((0.01, 0.05, 0.2, 0.5))
    return b"\n".join(ln for ln in lines if rng.random() > p)


def dup_lines(raw, rng):
    lines, out = _lines(raw), []
    p = rng.choice((0.01, 0.05, 0.3))
    for ln in lines:
        out.append(ln)
        while rng.random() < p:
            out.append(ln)
    return b"\n".join(out)


def swap_blocks(raw, rng):
    lines = _lines(raw)
    if len(lines) < 4:
        return raw
    a, b = sorted(rng.sample(range(len(lines)), 2))
    c = rng.randrange(b, len(lines) + 1)
    return b"\n".join(lines[:a] + lines[b:c] + lines[a:b] + lines[c:])


def nul_bytes(raw, rng):
    data = bytearray(raw)
    mode = rng.random()
    if mode < 0.3:                                   # a block of NULs, as a crashed writer leaves them
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = b"\x00" * rng.choice((1, 16, 4096, 65536))
    elif mode < 0.6:                                 # newlines replaced by NUL
        data = bytearray(raw.replace(b"\n", b"\x00") if rng.random() < 0.5 else raw.replace(b"\n", b"\x00\n"))
    else:
        for _ in range(rng.randint(1, 50)):
            data.insert(rng.randrange(len(data) + 1), 0)
    return bytes(data)


def interleave_ranks(raw, rng):
    """Several ranks writing the same log at once, each line prefixed, their order mixed."""
    n = rng.randint(2, 8)
    style = rng.choice(("[rank{}]: ", "[rank{}]:", "[default{}]:", "({}) ", "node{}: "))
    streams = []
    for r in range(n):
        lines = _lines(raw)
        if rng.random() < 0.5:                       # ranks fail at slightly different points
            lines = lines[:len(lines) - rng.randrange(min(5, len(lines)) + 1)]
        if lines:
            streams.append([style.format(r).encode() + ln for ln in lines])
    out = []
    while streams:
        s = rng.choice(streams)
        out.append(s.pop(0))
        if not s:
            streams.remove(s)
    return b"\n".join(out)


def byte_flips(raw, rng):
    data = bytearray(raw)
    for _ in range(rng.randint(1, 30)):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def binary_junk(raw, rng):
    junk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 8, 200, 5000))))
    pos = rng.randrange(len(raw) + 1)
    return raw[:pos] + junk + raw[pos:]


def stray_cr(raw, rng):
    data = bytearray(raw)
    for _ in range(rng.randint(1, 40)):
        data.insert(rng.randrange(len(data) + 1), 13)
    return bytes(data)


def mixed_encodings(text, rng):
    out = []
    for ln in text.split("\n"):
        enc = rng.choice(("utf-8", "gbk", "latin-1", "utf-16-le", "cp1252"))
        out.append(ln.encode(enc, errors="replace"))
    return b"\n".join(out)


def lost_newlines(raw, rng):
    return raw.replace(b"\n", rng.choice((b"", b" ", b"\r", b"\t")))


def narrow_wrap(text, rng):
    return hard_wrap(text, rng.randint(1, 79)).encode("utf-8")


def unicode_junk(text, rng):
    chars = "\u200b\u202e\u0301\ufeff\ufffd\u2028\u2029\x85\x0b\x0c\U0001f525\u3000\ud800"
    out = list(text)
    for _ in range(rng.randint(1, 40)):
        out.insert(rng.randrange(len(out) + 1), rng.choice(chars))
    return "".join(out).encode("utf-8", errors="surrogatepass")


def odd_utf16(text, rng):
    data = text.encode(rng.choice(("utf-16", "utf-16-le", "utf-16-be")), errors="replace")
    return data[:rng.randrange(len(data) + 1)]


def random_bytes(raw, rng):
    return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 2, 3, 17, 1000, 20000))))


def tiny_text(raw, rng):
    return rng.choice((b"", b"\n", b"\r\n", b" ", b"\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\r" * 100,
                       b"\n" * 5000, b"Traceback (most recent call last):\n", b"CUDA out of memory",
                       b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"))


# ---- cases ------------------------------------------------------------------------------------------
INVARIANT = ("wrap", "encode", "crlf", "ansi", "rank_prefix", "wrap+encode", "wrap+crlf", "ansi+encode",
             "crlf+encode", "rank_prefix+wrap", "ansi+wrap")
DAMAGING = {
    "truncate_bytes": truncate_bytes, "cut_head": cut_head, "truncate_lines": truncate_lines,
    "drop_lines": drop_lines, "dup_lines": dup_lines, "swap_blocks": swap_blocks, "nul_bytes": nul_bytes,
    "interleave_ranks": interleave_ranks, "byte_flips": byte_flips, "binary_junk": binary_junk,
    "stray_cr": stray_cr, "lost_newlines": lost_newlines, "random_bytes": random_bytes, "tiny_text": tiny_text,
}
DAMAGING_TEXT = {"mixed_encodings": mixed_encodings, "narrow_wrap": narrow_wrap, "unicode_junk": unicode_junk,
                 "odd_utf16": odd_utf16}


def invariant_mutation(kind, text, rng):
    """(label, bytes, lossless) for one invariance-preserving mutation of a UTF-8 text."""
    label, lossless = kind, True
    parts = kind.split("+")
    if "rank_prefix" in parts:
        style = rng.choice(("rank", "default"))
        rank = rng.randrange(8)
        text = rank_prefix(text, rank, style)
        label = label.replace("rank_prefix", f"rank_prefix({style}{rank})")
    if "ansi" in parts:
        text = inject_ansi(text, rng)
    if "wrap" in parts:
        width = rng.randint(80, 250)
        text = hard_wrap(text, width)
        label = label.replace("wrap", f"wrap({width})")
    if "crlf" in parts:
        text = crlf(text)
    if "encode" in parts:
        enc = rng.choice(ENCODINGS)
        data, lossless = encode(text, enc)
        if enc == "latin-1" and not text.isascii():
            lossless = False
        label = label.replace("encode", f"encode({enc})")
    else:
        data = text.encode("utf-8")
    return label, data, lossless


def make_case(i, seed, corpus):
    """(log index, label, bytes, invariant) for case i, from (seed, i) alone."""
    if is_safety_case(i, seed):
        return make_safety_case(i, seed, corpus)
    rng = random.Random(f"{seed}:{i}")
    k = rng.randrange(len(corpus))
    name, raw, text = corpus[k]
    r = rng.random()
    if text is not None and r < 0.45:
        label, data, lossless = invariant_mutation(rng.choice(INVARIANT), text, rng)
        return k, label, data, lossless
    if text is not None and r < 0.55:
        kind = rng.choice(sorted(DAMAGING_TEXT))
        return k, kind, DAMAGING_TEXT[kind](text, rng), False
    if r < 0.58:                                    # two pastes glued together, cut anywhere
        other = corpus[rng.randrange(len(corpus))]
        return k, f"splice({other[0]})", truncate_lines(raw, rng) + b"\n" + cut_head(other[1], rng), False
    kind = rng.choice(sorted(DAMAGING))
    data = DAMAGING[kind](raw, rng)
    if rng.random() < 0.2:                          # damage on damage
        kind2 = rng.choice(sorted(DAMAGING))
        data = DAMAGING[kind2](data, rng)
        kind = f"{kind}+{kind2}"
    return k, kind, data, False


# ---- safety cases: hostile text and hostile configs ----------------------------------------------------
SAFETY_SHARE = 0.1          # one case in ten; the others are exactly the log cases they always were
HOSTILE = ("\x1b\x1b[0m]0;PWNED\x07", "\x1b]52;c;ZWNobyBwd25lZA==\x07", "\x1b]0;T\x1b\\", "\x1bP1;2|x\x1b\\",
           "\x1b[2J\x1b[H", "\x1b\x1b]]0;x\x07", "\x07", "\u009b31m", "\u009d0;C1\u009c", "\u0085", "\u202eevil\u202c",
           "\u2066iso\u2069", "\u200f", "\x1b", "\r\x1b[K", "\x7f", "\x1b[8m")
_LEAK = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def is_safety_case(i, seed):
    return random.Random(f"{seed}:{i}:safety").random() < SAFETY_SHARE


def hostile_text(text, rng):
    """Control sequences spliced into random lines (at the start, the end or anywhere)."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 20)):
        n = rng.randrange(len(lines))
        pos = rng.choice((0, len(lines[n]), rng.randrange(len(lines[n]) + 1)))
        lines[n] = lines[n][:pos] + rng.choice(HOSTILE) + lines[n][pos:]
    return "\n".join(lines).encode("utf-8")


_PAIRS = []


def config_pairs():
    """[(log index in the corpus, config path)] for the samples that ship a config (read once)."""
    if not _PAIRS:
        _PAIRS.append(_config_pairs())
    return _PAIRS[0]


def _config_pairs():
    from ruamel.yaml import YAML
    expect = YAML(typ="safe").load((ROOT / "log_samples" / "expectations.yaml").read_text(encoding="utf-8"))
    names = [log_name(p) for p in corpus_paths()]
    return [(names.index(slug), ROOT / "log_samples" / e["config"]) for slug, e in sorted(expect.items())
            if e.get("config") and slug in names]


def _respell(text, rng):
    """Same settings, other spellings: what the patch must leave byte for byte."""
    extra = rng.choice(("lora_target_modules: [q_proj,v_proj]\n", "hub_model_id: ~\n", "warmup_ratio: 2.0e-5\n",
                        "run_name: 'quoted # not a comment'\n", "tags: {a: 1,b: 2}\n", "# café naïve 中文\n",
                        "seed: 0x2A\n", "notes: |\n  ```\n  <img src=x>\n"))
    lines = text.splitlines(keepends=True)
    lines.insert(rng.randrange(len(lines) + 1), extra)
    return "".join(lines)


def _preserving(text, rng, is_json):
    """(label, bytes): an encoding, line ending or spelling that a patch must keep."""
    kind = rng.choice(("crlf", "bom", "utf16", "latin1", "gbk", "respell", "crlf+bom") if not is_json else
                      ("crlf", "bom", "utf16", "number"))
    if kind == "respell":
        text = _respell(text, rng)
    if kind == "number":
        text = re.sub(r'(\n\s*"[^"]+":\s*)(\d+)(,?)', lambda m: m.group(1) + m.group(2) + m.group(3), text)
        text = text.replace("{\n", '{\n  "warmup_ratio": 2.0e-5,\n  "weight_decay": 1E-2,\n', 1)
    if "crlf" in kind:
        text = text.replace("\n", "\r\n")
    if kind == "latin1":
        return kind, "# caf\xe9 na\xefve\n".encode("latin-1") + text.encode("latin-1", errors="replace")
    if kind == "gbk":
        return kind, "# 中文注释\n".encode("gbk") + text.encode("gbk", errors="replace")
    if kind == "utf16":
        return kind, text.encode("utf-16")
    return kind, (b"\xef\xbb\xbf" if "bom" in kind else b"") + text.encode("utf-8")


def _misshapen(text, rng, is_json):
    """(label, bytes): a config broken in shape or content; any answer but a crash or a hang is fine."""
    lines = text.splitlines(keepends=True) or ["\n"]
    n = rng.randrange(len(lines))
    kind = rng.choice(("anchor", "dup", "deep", "wrong_type", "zero", "controls", "nul", "truncate", "flip",
                       "top_list", "tag", "huge"))
    if kind == "anchor":
        name = rng.choice(("1", "\u00e9", "a-b", "0"))
        text = f"defaults: &{name}\n  lora_dropout: 0.05\n" + text + rng.choice((f"extra: *{name}\n", f"more: {{<<: *{name}}}\n"))
    elif kind == "dup":
        key = re.match(r'\s*"?([\w.-]+)"?\s*:', lines[n])
        if key:
            dup = f'  "{key.group(1)}": 1,\n' if is_json else f"{key.group(1)}: 1\n"
            lines.insert(n + 1, dup)
        text = "".join(lines)
    elif kind == "deep":
        depth = rng.choice((100, 1000, 20000))
        text = ('{"a":' * depth + "1" + "}" * depth) if is_json else ("a:\n" + "".join(" " * i + "- b:\n" for i in range(1, depth // 50)))
    elif kind in ("wrong_type", "zero"):
        value = rng.choice(("[1, 2]", "{x: 1}", "null", "-3", "1e400", "'8'", ".nan", "true")) if kind == "wrong_type" \
            else rng.choice(("0", "-1", "0.0"))
        lines[n] = re.sub(r"(:\s*)[^\s#,][^#,\n]*", lambda m: m.group(1) + value, lines[n], count=1)
        text = "".join(lines)
    elif kind == "controls":
        lines[n] = lines[n].rstrip("\n") + rng.choice(HOSTILE) + "\n"
        text = "".join(lines)
    elif kind == "top_list":
        text = rng.choice(("[]\n", "- a\n- b\n", "42\n", "null\n", '"x"\n', ""))
    elif kind == "tag":
        text = "!!python/object:os.system {}\n" + text if not is_json else text
    elif kind == "huge":
        text = text + "pad:\n" + "  - x\n" * rng.choice((10, 200000))
    data = text.encode("utf-8")
    if kind == "nul":
        pos = rng.randrange(len(data) + 1)
        data = data[:pos] + b"\x00" * rng.choice((1, 64, 4096)) + data[pos:]
    elif kind == "truncate":
        data = data[:rng.randrange(len(data) + 1)]
    elif kind == "flip":
        data = bytearray(data)
        for _ in range(rng.randint(1, 10)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    return kind, data


def make_safety_case(i, seed, corpus):
    """(log index, label, bytes, False): a hostile log, or a config (label `config:...@path`) whose
    bytes are the case's data; the log is then the sample the config belongs to."""
    rng = random.Random(f"{seed}:{i}:safety-case")
    pairs = config_pairs()
    texts = [k for k, (_, _, text) in enumerate(corpus) if text is not None]
    if rng.random() < 0.5 or not pairs:
        k = rng.choice(texts)
        return k, "hostile_text", hostile_text(corpus[k][2], rng), False
    k, path = pairs[rng.randrange(len(pairs))]
    text = path.read_text(encoding="utf-8")
    is_json = path.suffix == ".json"
    make = _preserving if rng.random() < 0.5 else _misshapen
    kind, data = make(text, rng, is_json)
    return k, f"config({'keep' if make is _preserving else 'shape'}:{kind}){path.suffix}", data, False


TMP_ROOT = None     # set by fuzz() before the workers fork; it removes the folder at the end, even
_TMP = []           # when a worker was killed (a forked worker never runs atexit handlers)


def _tmpdir():
    """A folder of this process's own for the config files of safety cases."""
    if not _TMP:
        import tempfile
        if TMP_ROOT:
            _TMP.append(Path(TMP_ROOT) / str(os.getpid()))
            _TMP[0].mkdir(exist_ok=True)
        else:                               # --case in the main process
            import atexit
            import shutil
            _TMP.append(Path(tempfile.mkdtemp(prefix="oomdoc-fuzz-")))
            atexit.register(shutil.rmtree, _TMP[0], True)
    return _TMP[0]


def _leaks(d):
    from advisor.render import render
    for fmt in ("text", "markdown", "json", "html"):
        out = render(d, fmt, "en")
        m = _LEAK.search(out)
        if m:
            return f"{fmt} output holds U+{ord(m.group(0)):04X}"
    return None


def safety_outcome(label, data, log):
    """(status, detail) of a safety case: ok, input_error, leaked or config_changed (a crash raises)."""
    from advisor.pipeline import diagnose_text
    from advisor.read.reader import InputError
    if "config(" not in label:
        try:
            d = diagnose_text(data)
        except InputError:
            return "input_error", ""
        leak = _leaks(d)
        return ("leaked", leak) if leak else ("ok", "")
    cfg = _tmpdir() / ("cfg" + label.rsplit(")", 1)[1])
    cfg.write_bytes(data)
    try:
        d = diagnose_text(log, config_path=str(cfg))
    except InputError:
        return "input_error", ""
    leak = _leaks(d)
    if leak:
        return "leaked", leak
    if "config(keep:" not in label:
        return "ok", ""
    return _patch_kept_the_rest(d, cfg, data)


def _patch_kept_the_rest(d, cfg, data):
    """--write to another file: the same encoding, BOM and line ends; every line the plan did not
    change is the same text. A refusal (exit 2) is fine."""
    from advisor.read.files import decode_config
    from advisor.plans.patch import applied_changes, write_patched
    from advisor.read.reader import InputError
    out = cfg.with_name("out" + cfg.suffix)
    if out.exists():
        out.unlink()
    try:
        write_patched(d, str(cfg), str(out))
    except InputError:
        return "input_error", ""
    if not out.exists():
        return "ok", ""                     # nothing to write
    (old, enc_old), (new, enc_new) = decode_config(data, cfg), decode_config(out.read_bytes(), out)
    if enc_old != enc_new:
        return "config_changed", f"encoding {enc_old} -> {enc_new}"
    # a changed key's own line: `key:` / `"key":` (a dotted key by its last part), `key=v`, `--key v`
    keys = [re.escape(k) + "|" + re.escape(k.rsplit(".", 1)[-1]) for k in applied_changes(d.plan)]
    touched = re.compile(rf'^\s*(?:--)?"?(?:{"|".join(keys)})"?\s*[:= ]') if keys else None
    new_lines = set(new.splitlines(keepends=True))

    def kept(ln):               # as it was, or (JSON's last member, a key appended after it) plus a comma
        body = ln.rstrip("\r\n")
        return ln in new_lines or body + "," + ln[len(body):] in new_lines
    lost = [ln for ln in old.splitlines(keepends=True) if not kept(ln) and not (touched and touched.match(ln))]
    return ("config_changed", f"lost {lost[0]!r}") if lost else ("ok", "")


# ---- running one case --------------------------------------------------------------------------------
FULL = False       # --full: the whole command's work (budget, plan, patch, every format and language)


def verdict_of(data):
    """(verdict, phase, component) or 'input_error'; any other exception propagates."""
    from advisor.pipeline import diagnose_text
    from advisor.read.reader import InputError
    try:
        d = diagnose_text(data, with_plan=FULL)
    except InputError:
        return "input_error"
    if FULL:
        from advisor.render import render
        for fmt in ("text", "markdown", "json", "html"):
            for lang in ("en", "zh"):
                render(d, fmt, lang)
    return d.verdict, d.phase, d.component


class _Hung(Exception):
    pass


def _alarm(signum, frame):
    raise _Hung()


def run_case(i, seed, corpus, baselines, timeout):
    """(status, label, detail, seconds, invariant);
    status: ok | input_error | crash | hung | changed | changed_damaged."""
    k, label, data, invariant = make_case(i, seed, corpus)
    label = f"{corpus[k][0]}:{label}"
    t0 = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        if is_safety_case(i, seed):
            status, detail = safety_outcome(label, data, corpus[k][1])
            return status, label, detail, time.perf_counter() - t0, False
        got = verdict_of(data)
    except _Hung:
        return "hung", label, f"over {timeout} s", time.perf_counter() - t0, invariant
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
        return "crash", label, f"{type(e).__name__}: {str(e)[:200]} at {where}", time.perf_counter() - t0, invariant
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    dt = time.perf_counter() - t0
    if got == "input_error":
        return "input_error", label, "", dt, invariant
    base = baselines[k]
    if got != base:
        return ("changed" if invariant else "changed_damaged"), label, f"{base} -> {got}", dt, invariant
    return "ok", label, "", dt, invariant


def baselines_of(corpus):
    """The unmutated logs' outcomes; an original that crashes is reported as such, not compared."""
    out = []
    for _, raw, _ in corpus:
        try:
            out.append(verdict_of(raw))
        except Exception as e:
            out.append(f"crash: {type(e).__name__}: {e}")
    return out


def _worker(conn, seed, timeout, mem_limit, corpus, baselines, full):
    global FULL
    FULL = full
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if mem_limit:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
    conn.send(("ready", None))
    while True:
        batch = conn.recv()
        if batch is None:
            return
        for i in batch:
            conn.send(("case", (i,) + run_case(i, seed, corpus, baselines, timeout)))


class Pool:
    """Workers fed batches of case numbers; a worker silent past the hard limit is killed and replaced."""

    def __init__(self, jobs, seed, timeout, mem_limit, corpus, baselines):
        self.args = (seed, timeout, mem_limit, corpus, baselines, FULL)
        self.hard = 3 * timeout + 10
        self.deaths = 0
        self.ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.workers = [self._spawn() for _ in range(jobs)]

    def _spawn(self):
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
        p.start()
        child.close()
        return {"proc": p, "conn": parent, "batch": [], "last": time.monotonic(), "ready": False}

    def run(self, case_numbers, on_result, deadline=None, batch_size=25):
        self.todo = list(reversed(case_numbers))
        while True:
            open_ = deadline is None or time.monotonic() < deadline
            for w in self.workers:
                if w["ready"] and not w["batch"] and self.todo and open_:
                    w["batch"] = [self.todo.pop() for _ in range(min(batch_size, len(self.todo)))]
                    w["conn"].send(w["batch"])
                    w["last"] = time.monotonic()
            if not any(w["batch"] for w in self.workers) and (not self.todo or not open_):
                return
            ready = wait([w["conn"] for w in self.workers], timeout=1.0)
            for w in list(self.workers):
                if w["conn"] in ready:
                    try:
                        kind, payload = w["conn"].recv()
                    except (EOFError, OSError):
                        self._replace(w, on_result, "crash", f"the worker died (exit code {w['proc'].exitcode})")
                        continue
                    w["last"] = time.monotonic()
                    if kind == "ready":
                        w["ready"] = True
                    else:                       # a batch is done when its last case is answered
                        self.deaths = 0
                        w["batch"].remove(payload[0])
                        on_result(payload)
                elif w["batch"] and time.monotonic() - w["last"] > self.hard:
                    self._replace(w, on_result, "hung", f"silent for over {self.hard:.0f} s, killed")

    def _replace(self, w, on_result, status, why):
        self.deaths += 1
        if self.deaths > 20:
            raise RuntimeError(f"fuzz: workers keep dying ({why}); see the messages above")
        batch = w["batch"]
        w["proc"].join(timeout=1)
        if batch:       # the first unanswered case is the one that hung or killed the worker
            on_result((batch[0], status, "?", why, self.hard if status == "hung" else 0.0, False))
        w["proc"].kill()
        w["proc"].join()
        self.workers[self.workers.index(w)] = self._spawn()
        self.todo.extend(reversed(batch[1:]))

    def close(self):
        for w in self.workers:
            try:
                w["conn"].send(None)
            except (BrokenPipeError, OSError):
                pass
        for w in self.workers:
            w["proc"].join(timeout=5)
            if w["proc"].is_alive():
                w["proc"].kill()


def fuzz(n=100_000, seconds=None, jobs=2, seed=0, timeout=5.0, mem_limit=4 << 30, progress=True, show=5):
    corpus = load_corpus()
    if not corpus:
        raise SystemExit("fuzz: no logs found in log_samples/ or ../shared/real_logs")
    counts = {s: 0 for s in ("ok", "input_error", "crash", "hung", "changed", "changed_damaged", "leaked",
                             "config_changed")}
    invariant_cases = 0
    examples = {"crash": [], "hung": [], "changed": [], "original": [], "leaked": [], "config_changed": []}
    by_mutation = {}
    slowest = (0.0, None)
    t0 = time.monotonic()
    done, safety_cases = [0], [0]

    def on_result(res):
        nonlocal invariant_cases, slowest
        i, status, label, detail, dt, invariant = res
        counts[status] += 1
        safety_cases[0] += is_safety_case(i, seed)
        done[0] += 1
        kind = re.sub(r"\([^)]*\)", "", label.split(":", 1)[-1])
        invariant_cases += invariant
        stat = by_mutation.setdefault(kind, [0, 0])
        stat[0] += 1
        stat[1] += status in ("crash", "hung", "changed", "leaked", "config_changed")
        if status in examples and len(examples[status]) < show:
            examples[status].append(f"case {i} {label}: {detail}")
        if dt > slowest[0]:
            slowest = (dt, f"case {i} {label}")
        if progress and done[0] % 5000 == 0:
            el = time.monotonic() - t0
            print(f"  {done[0]} cases, {el:.0f} s, {done[0] / el:.0f}/s", file=sys.stderr, flush=True)

    baselines = baselines_of(corpus)
    for (name, _, _), base in zip(corpus, baselines):
        if isinstance(base, str):                   # an original log refused or crashing
            examples["original"].append(f"{name}: {base}")
    global TMP_ROOT
    import shutil
    import tempfile
    TMP_ROOT = tempfile.mkdtemp(prefix="oomdoc-fuzz-")
    pool = Pool(jobs, seed, timeout, mem_limit, corpus, baselines)
    deadline = t0 + seconds if seconds else None
    try:
        pool.run(range(n), on_result, deadline)
    finally:
        pool.close()
        shutil.rmtree(TMP_ROOT, ignore_errors=True)
    elapsed = time.monotonic() - t0
    return {
        "total": done[0], "crashed": counts["crash"], "hung": counts["hung"], "changed": counts["changed"],
        "invariant_cases": invariant_cases, "input_errors": counts["input_error"],
        "changed_damaged": counts["changed_damaged"], "leaked": counts["leaked"],
        "config_changed": counts["config_changed"], "safety_cases": safety_cases[0], "seconds": round(elapsed, 1),
        "per_second": round(done[0] / elapsed, 1) if elapsed else None, "jobs": jobs, "seed": seed,
        "logs": len(corpus), "originals_failing": len(examples["original"]), "slowest_s": round(slowest[0], 3), "slowest_case": slowest[1],
        "examples": examples,
        "failing_mutations": {k: v[1] for k, v in sorted(by_mutation.items()) if v[1]},
    }


def replay(i, seed, timeout):
    corpus = load_corpus()
    k, label, data, invariant = make_case(i, seed, corpus)
    print(f"case {i}: log {corpus[k][0]}, mutation {label}, {len(data)} bytes, invariant={invariant}")
    base = verdict_of(corpus[k][1])
    print(f"original: {base}")
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        if is_safety_case(i, seed):
            status, detail = safety_outcome(label, data, corpus[k][1])
            print(f"safety case: {status} {detail}")
            return int(status in ("leaked", "config_changed"))
        got = verdict_of(data)
    except _Hung:
        print(f"hung: over {timeout} s")
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(f"mutated:  {got}")
    if os.environ.get("FUZZ_DUMP"):
        Path(os.environ["FUZZ_DUMP"]).write_bytes(data)
        print(f"mutated bytes written to {os.environ['FUZZ_DUMP']}")
    return int(invariant and got != base)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="number of mutated logs (default 100000)")
    ap.add_argument("--seconds", type=float, default=None, help="stop starting new cases after this long")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds one case may take (default 5)")
    ap.add_argument("--show", type=int, default=5, help="examples to print per failure kind")
    ap.add_argument("--case", type=int, default=None, help="replay one case and show its traceback")
    ap.add_argument("--json", action="store_true", help="also print the summary as one JSON line")
    ap.add_argument("--full", action="store_true", help="also plan and render every format (slower)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = ap.parse_args(argv)
    global FULL
    FULL = a.full
    if a.case is not None:
        return replay(a.case, a.seed, a.timeout)
    r = fuzz(a.n, a.seconds, a.jobs, a.seed, a.timeout, progress=not a.quiet, show=a.show)
    print(f"fuzz: {r['total']} mutated logs from {r['logs']} logs in {r['seconds']} s "
          f"({r['per_second']}/s, {r['jobs']} jobs, seed {r['seed']})")
    print(f"  crashed:                     {r['crashed']}")
    print(f"  hung (> {a.timeout:g} s):              {r['hung']}")
    print(f"  changed where it should not: {r['changed']}   (of {r['invariant_cases']} invariance-preserving)")
    print(f"  refused as input errors:     {r['input_errors']}   (exit 2, fine)")
    print(f"  changed by damage:           {r['changed_damaged']}   (allowed: truncation, drops, junk...)")
    print(f"  control characters leaked:   {r['leaked']}   (of {r['safety_cases']} hostile-text and config cases)")
    print(f"  config lines changed wrongly: {r['config_changed']}")
    print(f"  slowest case:                {r['slowest_s']} s ({r['slowest_case']})")
    if r["originals_failing"]:
        print(f"  original logs refused or crashing: {r['originals_failing']}")
    for kind in ("original", "crash", "hung", "changed", "leaked", "config_changed"):
        for ex in r["examples"][kind]:
            print(f"  {kind}: {ex}")
    if r["failing_mutations"]:
        print(f"  failing mutations: {r['failing_mutations']}")
    if a.json:
        print(json.dumps(r))
    return int(bool(r["crashed"] or r["hung"] or r["changed"] or r["originals_failing"] or r["leaked"]
                    or r["config_changed"]))


if __name__ == "__main__":
    sys.exit(main())
