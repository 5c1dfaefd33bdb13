"""Catalogues as data (advisor/data/*.yaml): model shapes and accelerators, found by the names
people actually write — `Qwen2.5-7B-Instruct`, `/data/models/qwen2_5_7b_instruct`, `4090`, `A100-80G`."""

import functools
import json
import re
from pathlib import Path

from ..read.reader import InputError
from ..core.shapes import Gpu, ModelShape, count_params  # noqa: F401  (re-exported)
from ..core.snapshot import snapshot
from ..core.units import parse_count

DATA = Path(__file__).resolve().parents[1] / "data"
_SUFFIXES = ("instruct", "chat", "hf", "base", "it", "gptq", "awq", "int4", "int8", "bnb", "4bit", "8bit", "fp16",
             "bf16", "sft", "dpo", "rlhf", "v0-1", "v0-2", "v0-3", "v1", "v2", "2507", "merged", "gguf", "nf4", "lora")


def _data(name):
    return snapshot()[name]


def _norm(name):
    """'/data/models/Qwen2.5-7B-Instruct' -> 'qwen2-5-7b-instruct'."""
    name = str(name).strip().rstrip("/").split("/")[-1].lower()
    return re.sub(r"[-_.\s]+", "-", name).strip("-")


def _strip_suffixes(norm):
    parts = norm.split("-")
    while len(parts) > 1 and (parts[-1] in _SUFFIXES or re.fullmatch(r"\d+k", parts[-1])):
        parts.pop()
    return "-".join(parts)


@functools.lru_cache(maxsize=None)
def models():
    return tuple(ModelShape(**m) for m in _data("models"))


@functools.lru_cache(maxsize=None)
def gpus():
    return tuple(Gpu(**g) for g in _data("gpus"))


def _size_token(norm):
    m = re.search(r"(?:^|-)(\d+(?:-\d+)?)b(?:-|$)", norm)
    return m.group(1) if m else None


@functools.lru_cache(maxsize=None)
def _model_index():
    """Normalised name or alias -> model, built once (it was ~1 ms of every diagnosis with a model)."""
    index = {}
    for m in models():
        for alias in [m.name] + m.aliases:
            index.setdefault(_strip_suffixes(_norm(alias)), m)
    return index


@functools.lru_cache(maxsize=1024)     # a folder of reports names the same few models again and again
def find_model(name):
    """(ModelShape, note) for a model name or path; (None, reason) when nothing fits."""
    if not name:
        return None, "no model name"
    query = _strip_suffixes(_norm(name))
    index = _model_index()
    if query in index:
        return index[query], None
    size = _size_token(query)
    keys = [k for k in index if size is None or _size_token(k) == size]
    if not keys:
        return None, f"no catalogued model of size {size}B looks like {name!r}"
    from rapidfuzz import fuzz, process
    best = process.extract(query, keys, scorer=fuzz.ratio, limit=2)
    if not best or best[0][1] < 75:
        return None, f"no catalogued model looks like {name!r}"
    picked = index[best[0][0]]
    note = None
    if len(best) > 1 and best[0][1] - best[1][1] < 4 and index[best[1][0]].name != picked.name:
        note = f"'{name}' is ambiguous; picked {picked.name} over {index[best[1][0]].name}"
    elif _strip_suffixes(_norm(picked.name)) != query:
        note = f"'{name}' read as {picked.name}"
    return picked, note


def generic_shape(params_b):
    """A Llama/Qwen-like shape for a bare parameter count: the catalogued dense model nearest in size."""
    dense = [m for m in models() if not m.experts and m.family.startswith(("llama", "qwen2"))]
    near = min(dense, key=lambda m: abs(m.params_b - params_b))
    scale = params_b / near.params_b
    return near.model_copy(update={"name": f"generic {params_b:g}B (shaped like {near.name})",
                                   "params_b": params_b, "hidden": int(near.hidden * scale ** 0.5) // 64 * 64,
                                   "intermediate": int(near.intermediate * scale ** 0.5) // 64 * 64})


def parse_params(text):
    n = parse_count(text)
    if n is None or n <= 0:
        raise InputError(f"--params {text!r}: expected a count such as 7B, 1.5B or 350M")
    return n / 1e9 if n >= 1e5 else n          # "7" means 7B


def shape_from_config_json(path):
    from ..read.files import read_config_bytes
    raw = read_config_bytes(path)           # a regular file of sane size (a FIFO would block)
    try:
        conf = json.loads(raw.decode("utf-8-sig"))
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path}: not a readable config.json ({type(e).__name__}: {e})".splitlines()[0])
    if not isinstance(conf, dict):
        raise InputError(f"{path}: a model's config.json is an object of settings, not a {type(conf).__name__}")
    if isinstance(conf.get("text_config"), dict):
        conf = {**conf, **conf["text_config"]}
    g = lambda *keys: next((conf[k] for k in keys if conf.get(k) is not None), None)  # noqa: E731
    try:
        shape = dict(name=conf.get("_name_or_path") or Path(path).parent.name or "custom",
                     layers=int(g("num_hidden_layers", "num_layers", "n_layer")),
                     hidden=int(g("hidden_size", "n_embd", "d_model")),
                     heads=int(g("num_attention_heads", "n_head")),
                     vocab=int(g("vocab_size", "padded_vocab_size")),
                     tied_embeddings=bool(conf.get("tie_word_embeddings", False)),
                     head_dim=g("head_dim", "kv_channels"),
                     experts=g("num_local_experts", "num_experts", "n_routed_experts"),
                     experts_per_token=g("num_experts_per_tok"),
                     moe_intermediate=g("moe_intermediate_size"))
        shape["intermediate"] = int(g("intermediate_size", "ffn_hidden_size", "n_inner") or 4 * shape["hidden"])
        shape["kv_heads"] = int(g("num_key_value_heads", "multi_query_group_num") or shape["heads"])
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{path}: config.json lacks num_hidden_layers / hidden_size / num_attention_heads")
    for k in ("head_dim", "experts", "experts_per_token", "moe_intermediate"):
        v = shape.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise InputError(f"{path}: config.json gives {k} as {v!r}; expected a positive whole number")
    # the budget divides by these: a zero or negative one is a broken file, said as such
    bad = [k for k in ("layers", "hidden", "heads", "vocab", "intermediate", "kv_heads") if shape[k] <= 0]
    if bad:
        raise InputError(f"{path}: config.json gives {', '.join(bad)} as zero or less; not a model's shape")
    partial = ModelShape(params_b=1.0, **shape)
    return partial.model_copy(update={"params_b": count_params(partial) / 1e9})


def find_gpu(text):
    """(Gpu, note) from a name ('4090', 'NVIDIA A100-SXM4-80GB') or a size ('24GiB', '24GB')."""
    if not text:
        return None, None
    raw = str(text).strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(gib|gb|g)?", raw)
    if m and (m.group(2) or float(m.group(1)) < 200):      # "4090" is a card, "24" a size
        size = float(m.group(1))
        if m.group(2) == "gib":
            return Gpu(name=f"{size:g} GiB card", capacity_gib=size), None
        same = [g for g in gpus() if g.marketed_gb == size]
        cap = min((g.capacity_gib for g in same), default=size * 1e9 / 2**30 * 0.985)
        return Gpu(name=f"{size:g} GB card", capacity_gib=cap, bf16=None), None
    key = re.sub(r"\b(nvidia|geforce|tesla|amd|instinct|huawei|intel|radeon)\b", " ", raw)
    key = re.sub(r"[\s_-]+", "", key)
    best = None
    for g in gpus():
        for alias in [g.name.lower()] + [a.lower() for a in g.aliases]:
            a = re.sub(r"\b(nvidia|geforce|tesla|amd|instinct|huawei|intel|radeon)\b", " ", alias)
            a = re.sub(r"[\s_-]+", "", a)
            if a == key:
                return g, None
            if len(a) >= 3 and a in key and (best is None or len(a) > best[0]):
                best = (len(a), g)
    if best:
        return best[1], f"'{text}' read as {best[1].name}"
    return None, f"unknown GPU {text!r}"


def gpu_from_capacity(total_gib):
    """The card class an allocator-reported capacity belongs to, when only one class is that close."""
    close = [g for g in gpus() if abs(g.capacity_gib - total_gib) <= 0.35]
    if close and len({g.bf16 for g in close}) == 1:
        return close[0].model_copy(update={"name": close[0].name if len(close) == 1 else
                                           " / ".join(g.name for g in close[:3]), "capacity_gib": total_gib})
    return Gpu(name=f"{total_gib:.2f} GiB card", capacity_gib=total_gib, bf16=None)
