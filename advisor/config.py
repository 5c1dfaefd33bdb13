"""The user's training config: read it (YAML or JSON), tell its dialect, turn it into Facts.

Dialects: LLaMA-Factory YAML, HF TrainingArguments (YAML or JSON), axolotl YAML. Framework
defaults fill keys the file leaves out (LLaMA-Factory turns gradient checkpointing on unless
`disable_gradient_checkpointing: true`; HF's eval batch is 8) and are marked as defaults, so a
disagreement with the log is only reported for values the user actually wrote.
"""

import json
import re
from pathlib import Path

from .reader import InputError
from .timeline import Facts

LF_KEYS = {"finetuning_type", "stage", "template", "cutoff_len", "lora_target", "quantization_bit", "dataset_dir",
           "disable_gradient_checkpointing", "pure_bf16", "flash_attn", "use_unsloth", "val_size", "packing"}
AXOLOTL_KEYS = {"base_model", "micro_batch_size", "sequence_len", "adapter", "load_in_4bit", "datasets", "lora_r",
                "sample_packing", "val_set_size", "lora_target_linear", "eval_batch_size"}
HF_KEYS = {"per_device_train_batch_size", "output_dir", "gradient_accumulation_steps", "learning_rate",
           "num_train_epochs", "gradient_checkpointing", "per_device_eval_batch_size", "logging_steps"}

# knob -> key per dialect (DESIGN §7); the patcher writes these, the reader reads them.
KEYS = {
    "batch": {"llamafactory": "per_device_train_batch_size", "hf": "per_device_train_batch_size", "axolotl": "micro_batch_size"},
    "grad_accum": {"llamafactory": "gradient_accumulation_steps", "hf": "gradient_accumulation_steps",
                   "axolotl": "gradient_accumulation_steps"},
    "seq_len": {"llamafactory": "cutoff_len", "hf": "max_seq_length", "axolotl": "sequence_len"},
    "eval_batch": {"llamafactory": "per_device_eval_batch_size", "hf": "per_device_eval_batch_size",
                   "axolotl": "eval_batch_size"},
    "optim": {"llamafactory": "optim", "hf": "optim", "axolotl": "optimizer"},
    "deepspeed": {"llamafactory": "deepspeed", "hf": "deepspeed", "axolotl": "deepspeed"},
    "eval_accumulation_steps": {"llamafactory": "eval_accumulation_steps", "hf": "eval_accumulation_steps"},
}
DEFAULTS = {
    "llamafactory": {"batch": 8, "grad_accum": 1, "seq_len": 2048, "eval_batch": 8, "grad_ckpt": True,
                     "method": "lora", "lora_rank": 8, "lora_target": "all", "flash_attn": True, "precision": "fp32"},
    "hf": {"batch": 8, "grad_accum": 1, "eval_batch": 8, "grad_ckpt": False, "method": "full", "precision": "fp32",
           "flash_attn": True},
    "axolotl": {"batch": 1, "grad_accum": 1, "seq_len": 512, "grad_ckpt": False, "method": "full",
                "precision": "bf16", "flash_attn": False},
}


class Config:
    """A parsed config file: its data, dialect, facts, and which facts came from defaults."""

    def __init__(self, path, text, data, fmt):
        self.path, self.text, self.data, self.format = Path(path), text, data, fmt
        self.display_path = str(path)          # as the user typed it: the diff names it so `patch -p0` finds it
        self.dialect = detect_dialect(data)
        self.facts, self.defaulted = facts_of(data, self.dialect, self.path.parent)

    def conflicts_with(self, log_facts):
        """Facts the log and the config both state, with different values."""
        out = []
        for name in ("batch", "grad_accum", "seq_len", "method", "quantization_bit", "num_gpus", "deepspeed"):
            mine, theirs = getattr(self.facts, name), getattr(log_facts, name)
            if mine is None or theirs is None or name in self.defaulted or mine == theirs:
                continue
            out.append({"fact": name, "log": theirs, "config": mine})
        return out


def detect_dialect(data):
    keys = set(data)
    scores = {"llamafactory": len(keys & LF_KEYS) * 2 + ("model_name_or_path" in keys),
              "axolotl": len(keys & AXOLOTL_KEYS) * 2, "hf": len(keys & HF_KEYS)}
    best = max(scores, key=scores.get)
    return best if scores[best] >= 2 else "unknown"


def load_config(path):
    from .files import decode_config, read_config_bytes
    p = Path(path)
    raw = read_config_bytes(path)           # a regular file of sane size, or one clear line
    text, encoding = decode_config(raw, path)
    stripped = text.lstrip()
    if p.suffix.lower() == ".json" or stripped.startswith("{"):
        data = _load_json(text, path)
        fmt = "json"
    else:
        data = _load_yaml(text, path)
        fmt = "yaml"
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of settings at the top level, found {type(data).__name__}")
    try:
        config = Config(p, text, data, fmt)
    except (AttributeError, TypeError, ValueError, OverflowError) as e:     # a setting of an unexpected shape
        raise InputError(f"{path}: a setting has an unexpected shape ({type(e).__name__}: {e})".splitlines()[0])
    config.raw, config.encoding = raw, encoding     # the patcher writes back the same bytes and codec
    return config


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs):
    """JSON allows a key twice and keeps the last; a config that says two things is refused instead
    (as duplicate YAML keys are): the patch would silently drop one."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _load_json(text, path):
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as e:
        raise InputError(f"{path}: the key {e.args[0]!r} appears twice in the JSON; keep one")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}")
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply to be a training config")


def _load_yaml(text, path):
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    yaml = YAML()                       # round-trip: the patcher edits this same object
    yaml.allow_duplicate_keys = False
    try:
        return yaml.load(text)
    except YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{path}: invalid YAML{where}: {problem}")
    except RecursionError:
        raise InputError(f"{path}: YAML nested too deeply to be a training config")
    except Exception as e:  # ruamel raises other types for duplicate keys and odd constructs
        raise InputError(f"{path}: invalid YAML: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def _bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        return v.strip().lower() in ("true", "yes", "1", "auto")
    return bool(v) if v is not None else None


def _int(v):
    try:
        return int(float(v))
    except (TypeError, ValueError, OverflowError):     # OverflowError: 1e400 is infinity
        return None


def deepspeed_stage(value, base=None):
    """'examples/deepspeed/ds_z3_offload_config.json' -> 'zero3_offload'; reads the JSON when it exists."""
    if value in (None, "", False):
        return None
    if isinstance(value, dict):
        conf = value
    else:
        conf = None
        from .files import read_config_bytes
        for cand in (Path(str(value)), (base or Path(".")) / str(value)):
            try:        # a regular file of sane size: the config may name a FIFO or /dev/zero
                conf = json.loads(read_config_bytes(str(cand)))
                break
            except (InputError, ValueError, RecursionError):
                continue
    if isinstance(conf, dict):
        zero = conf.get("zero_optimization") or {}
        stage = zero.get("stage", 0)
        offload = any(str((zero.get(k) or {}).get("device", "none")) in ("cpu", "nvme")
                      for k in ("offload_optimizer", "offload_param"))
        return f"zero{stage}" + ("_offload" if offload else "")
    m = re.search(r"z(?:ero)?_?(\d)", str(value).lower())
    if not m:
        return "unknown"
    return f"zero{m.group(1)}" + ("_offload" if "offload" in str(value).lower() else "")


def facts_of(data, dialect, base=None):
    """Facts from a config, and the set of fact names that came from framework defaults."""
    g = data.get
    f = Facts(framework={"hf": "transformers"}.get(dialect, dialect) if dialect != "unknown" else None)
    if dialect == "axolotl":
        f.model = g("base_model")
        f.batch = _int(g("micro_batch_size"))
        f.seq_len = _int(g("sequence_len"))
        f.eval_batch = _int(g("eval_batch_size"))
        gc = g("gradient_checkpointing")
        f.grad_ckpt = None if gc is None else gc not in (False, "false", "False")
        adapter = str(g("adapter") or "").lower()
        f.method = "qlora" if adapter == "qlora" else ("lora" if adapter == "lora" else None)
        f.quantization_bit = 4 if _bool(g("load_in_4bit")) else (8 if _bool(g("load_in_8bit")) else None)
        f.lora_rank = _int(g("lora_r"))
        f.lora_target = "all" if _bool(g("lora_target_linear")) else _join(g("lora_target_modules"))
        f.optim = g("optimizer")
        attn = str(g("attn_implementation") or "")
        if g("flash_attention") or g("sdp_attention") or "flash" in attn or attn == "sdpa":
            f.flash_attn = True
        f.packing = _bool(g("sample_packing"))
    else:
        f.model = g("model_name_or_path") or g("model") or g("pretrain") or g("base_model")
        f.batch = _int(g("per_device_train_batch_size") or g("micro_batch_size") or g("micro_train_batch_size")
                       or g("batch_size"))
        f.seq_len = _int(g("cutoff_len") or g("max_seq_length") or g("max_length") or g("max_seq_len")
                         or g("model_max_length"))
        f.eval_batch = _int(g("per_device_eval_batch_size"))
        if dialect == "llamafactory":
            if g("disable_gradient_checkpointing") is not None:
                f.grad_ckpt = not _bool(g("disable_gradient_checkpointing"))
        elif g("gradient_checkpointing") is not None:
            f.grad_ckpt = _bool(g("gradient_checkpointing"))
        ft = g("finetuning_type")
        f.method = str(ft).lower() if ft else None
        f.quantization_bit = _int(g("quantization_bit"))
        f.lora_rank = _int(g("lora_rank"))
        f.lora_target = _join(g("lora_target"))
        f.optim = g("optim")
        fa = g("flash_attn")
        if fa is not None:
            f.flash_attn = str(fa).lower() not in ("disabled", "off", "false", "eager")
        f.packing = _bool(g("packing")) if g("packing") is not None else None
        f.eval_accumulation_steps = _int(g("eval_accumulation_steps"))
        f.predict_with_generate = _bool(g("predict_with_generate")) if g("predict_with_generate") is not None else None
    f.grad_accum = _int(g("gradient_accumulation_steps") or g("gradient_accumulation"))
    if _bool(g("pure_bf16")):
        f.precision = "pure_bf16"
    elif _bool(g("bf16")) or str(g("mixed_precision") or "").lower() == "bf16":
        f.precision = "bf16"
    elif _bool(g("fp16")) or str(g("mixed_precision") or "").lower() == "fp16":
        f.precision = "fp16"
    elif g("bf16") is not None or g("fp16") is not None:
        f.precision = "fp32"
    if f.quantization_bit and f.method in (None, "lora"):
        f.method = "qlora" if f.quantization_bit == 4 else f.method or "lora"
    ds = g("deepspeed")
    f.deepspeed = deepspeed_stage(ds, base) if ds else ("zero" + str(g("zero_stage")) if g("zero_stage") is not None else None)
    n = _int(g("nproc_per_node") or g("num_processes") or g("num_gpus"))
    f.num_gpus = n
    if f.model is not None:
        f.model = str(f.model)
    defaulted = set()
    for name, value in DEFAULTS.get(dialect, {}).items():
        if getattr(f, name) is None:
            setattr(f, name, value)
            defaulted.add(name)
    return f, defaulted


def _join(v):
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)
