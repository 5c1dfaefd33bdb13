"""The user's config: read it (YAML, JSON or a launch command line), tell its dialect, turn it into Facts.

The dialects and their keys are data (advisor/data/dialects.yaml, read by advisor/dialects.py).
Framework defaults fill keys the file leaves out (LLaMA-Factory turns gradient checkpointing on
unless `disable_gradient_checkpointing: true`; HF's eval batch is 8) and are marked as defaults,
so a disagreement with the log is only reported for values the user actually wrote.
"""

import json
import re
from pathlib import Path

from . import dialects as D
from .reader import InputError
from ..core.facts import PRECISION_OF_DTYPE, Facts

# knob -> Facts field it fills; the keys themselves are per dialect in advisor/data/dialects.yaml
KNOB_FACTS = {"batch": "batch", "grad_accum": "grad_accum", "seq_len": "seq_len", "grad_ckpt": "grad_ckpt",
              "eval_batch": "eval_batch", "optim": "optim", "eval_accumulation": "eval_accumulation_steps"}


class Config:
    """A parsed config file: its data, dialect, facts, and which facts came from defaults."""

    def __init__(self, path, text, data, fmt, command=None):
        self.path, self.text, self.data, self.format = Path(path), text, data, fmt
        self.command = command                 # a launch command line (format "cmdline"): where to patch
        self.from_log = None                   # the log line the command was read from, when it was
        self.display_path = str(path)          # as the user typed it: the diff names it so `patch -p0` finds it
        self.dialect = (command.dialect if command is not None else None) or detect_dialect(data)
        self.facts, self.defaulted = facts_of(D.settings_of(self.dialect, data), self.dialect, self.path.parent)
        if command is not None and self.facts.num_gpus is None:
            self.facts.num_gpus = _int(command.launcher.get("nproc_per_node") or command.launcher.get("num_processes")
                                       or command.launcher.get("num_gpus"))

    def key(self, knob):
        """The key this file sets `knob` with, or None when its dialect has none."""
        return D.key_for(self.dialect, knob, self.data) if self.dialect != D.UNKNOWN else None

    def has(self, key):
        """Whether the user's settings hold `key` (a command line's own, or the YAML it names)."""
        return D.get_path(self.data, key) is not D.MISSING

    def value(self, key):
        v = D.get_path(self.data, key)
        return None if v is D.MISSING else v

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
    return D.detect(data)


def load_config(path):
    from .files import decode_config, read_config_bytes
    p = Path(path)
    raw = read_config_bytes(path)           # a regular file of sane size, or one clear line
    text, encoding = decode_config(raw, path)
    stripped = text.lstrip()
    if p.suffix.lower() in _COMMAND_SUFFIXES or _looks_like_command(stripped):
        config = _command_config(p, text, quiet=p.suffix.lower() == ".txt")
        if config is not None:                 # a .txt without a launch command is read as YAML/JSON
            config.raw, config.encoding = raw, encoding
            return config
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


_COMMAND_SUFFIXES = (".sh", ".bash", ".txt", ".cmd")


def _looks_like_command(text):
    from .cmdline import LAUNCHER
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    return bool(LAUNCHER.match(first)) and ":" not in first.split()[0]


def _command_config(p, text, quiet=False):
    """A launch command line as a config: its settings, over those of the YAML it names."""
    from .cmdline import find_command
    cmd = find_command(text)
    if cmd is None and quiet:
        return None
    if cmd is None:
        raise InputError(f"{p}: no launch command with settings found (expected e.g. `llamafactory-cli train x.yaml`, "
                         f"`torchrun train.py --key value`, `swift sft --key value`, `vllm serve MODEL --key value`)")
    data = {}
    if cmd.yaml_path:
        for cand in (p.parent / cmd.yaml_path, Path(cmd.yaml_path)):
            try:
                base = _load_yaml(cand.read_text(encoding="utf-8"), cand)
            except (OSError, InputError):
                continue
            if isinstance(base, dict):
                data.update(base)
                break
    data.update(cmd.data)
    return Config(p, text, data, "cmdline", command=cmd)


def config_from_log(timeline):
    """The launch command the log echoes, as a config, when its program or its settings name a
    dialect beyond doubt (a bare `python train.py --model x` could be anything: words then)."""
    from .cmdline import find_command
    if not timeline.command:
        return None
    cmd = find_command(timeline.command)
    if cmd is None:
        return None
    dialect = cmd.dialect or D.detect(cmd.data, min_score=6)
    if dialect not in (cmd.dialect, "llamafactory", "verl", "easyr1"):
        return None                          # a script's own flags: its dialect is a guess
    cmd.dialect = dialect
    config = Config(Path(timeline.source), timeline.command, dict(cmd.data), "cmdline", command=cmd)
    config.from_log = timeline.command_line
    for name in config.defaulted:            # what the command does not say stays unknown: the log may tell
        setattr(config.facts, name, None)
    config.defaulted = set()
    return config


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
    if isinstance(v, dict):              # DeepSpeed's {"enabled": …} sections
        return _bool(v.get("enabled"))
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


def deepspeed_json(value, base=None):
    """The DeepSpeed config a `deepspeed:` setting names: the dict itself, or the JSON file at that
    path (as given, or beside the config), read only if it is a regular file of sane size (the
    setting may name a FIFO or /dev/zero); None when there is none to read."""
    if isinstance(value, dict):
        return value
    from .files import read_config_bytes
    for cand in (Path(str(value)), (base or Path(".")) / str(value)):
        try:
            conf = json.loads(read_config_bytes(str(cand)))
        except (InputError, ValueError, RecursionError):
            continue
        return conf if isinstance(conf, dict) else None
    return None


def deepspeed_stage(value, base=None):
    """'examples/deepspeed/ds_z3_offload_config.json' -> 'zero3_offload'; reads the JSON when it exists."""
    if value in (None, "", False):
        return None
    conf = deepspeed_json(value, base)
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
        if dialect == "llamafactory" and g("task") is not None:
            # `llamafactory-cli eval` (a benchmark: task, n_shot, lang): its batch_size is the evaluation's
            f.batch, f.eval_batch = None, _int(g("batch_size")) or 4
        if dialect == "llamafactory":
            if g("disable_gradient_checkpointing") is not None:
                f.grad_ckpt = not _bool(g("disable_gradient_checkpointing"))
        elif g("gradient_checkpointing") is not None:
            f.grad_ckpt = _bool(g("gradient_checkpointing"))
        ft = g("finetuning_type")
        f.method = str(ft).lower() if ft else None
        peft = g("peft_config")               # a PEFT config beside the trainer's (GLM-4's finetune_demo)
        if f.method is None and isinstance(peft, dict) and str(peft.get("peft_type", "")).upper() == "LORA":
            f.method = "lora"
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
    elif (g("bf16") is not None or g("fp16") is not None) and dialect != "llamafactory":
        f.precision = "fp32"             # LF with both off still loads in the model's dtype: see _defaults
    if f.quantization_bit and f.method in (None, "lora"):
        f.method = "qlora" if f.quantization_bit == 4 else f.method or "lora"
    ds = g("deepspeed")
    f.deepspeed = deepspeed_stage(ds, base) if ds else ("zero" + str(g("zero_stage")) if g("zero_stage") is not None else None)
    n = _int(g("nproc_per_node") or g("num_processes") or g("num_gpus"))
    f.num_gpus = n
    _knob_facts(f, data, dialect)
    if dialect == "deepspeed":
        f.deepspeed = deepspeed_stage(data)
    if dialect == "torchtune" and f.method is None:     # the model builder names the method
        comp = str(D.get_path(data, "model._component_") or "")
        f.method = "qlora" if "qlora" in comp else "lora" if "lora" in comp else "full" if comp else None
    for name, key in ((D.table().get(dialect) or {}).get("facts_keys") or {}).items():
        value = D.get_path(data, key)
        if value is not D.MISSING and value is not None:
            setattr(f, name, _int(value) if name == "num_gpus" else value)
    f.model = str(f.model) if isinstance(f.model, (str, int, float)) else None   # torchtune's model: {_component_: …}
    return f, _defaults(f, dialect, data)


def _knob_facts(f, data, dialect):
    """The knobs, read through the dialect's own keys (nested, dotted, aliased): they win."""
    if dialect == D.UNKNOWN:
        return
    for knob, name in KNOB_FACTS.items():
        key = D.key_for(dialect, knob, data)
        v = D.get_path(data, key) if key else D.MISSING
        if v is D.MISSING or v is None:
            continue
        if name == "grad_ckpt":          # axolotl's "offload" and "offload_disk" are on too
            v = str(v).strip().lower() not in ("false", "0", "no", "none", "off")
            v = (not v) if (D.knob(dialect, knob) or {}).get("invert") else v
        elif name == "optim":
            v = str(v)
        else:
            v = _int(v)
        if v is not None:
            setattr(f, name, v)
    method = D.get_path(data, D.key_for(dialect, "lora", data) or "") if f.method is None else None
    if isinstance(method, str) and method.lower() in ("full", "lora", "qlora", "freeze", "oft"):
        f.method = method.lower()
    bits = D.get_path(data, D.key_for(dialect, "quantize", data) or "") if f.quantization_bit is None else None
    if bits is True or _int(bits) in (4, 8):
        f.quantization_bit = 4 if bits is True else _int(bits)
    if f.precision is None:
        for prec in ("bf16", "fp16"):
            key = D.key_for(dialect, prec, data)
            v = D.get_path(data, key) if key else D.MISSING
            if v is not D.MISSING and str(v).lower() in (str(D.file_value(dialect, prec, True)).lower(), prec):
                f.precision = prec
                break
    if f.precision is None and "on" in (D.knob(dialect, "bf16") or {}):
        # a dtype key (vLLM's dtype, swift's torch_dtype) in any of its spellings
        key = D.key_for(dialect, "bf16", data)
        f.precision = PRECISION_OF_DTYPE.get(str(D.get_path(data, key) if key else "").lower())


def _defaults(f, dialect, data):
    """Fill what the file leaves out with the framework's defaults; the names filled."""
    spec = D.table().get(dialect) or {}
    defaulted = set()
    # a knob the file leaves to another program ("auto") has no default here: that program decides
    values = {name: D.default_of(dialect, knob) for knob, name in KNOB_FACTS.items()
              if D.knob(dialect, knob) is None or D.key_for(dialect, knob, data) is not None}
    if values.get("grad_ckpt") not in (D.MISSING, None) and (D.knob(dialect, "grad_ckpt") or {}).get("invert"):
        values["grad_ckpt"] = not values["grad_ckpt"]
    values.update(spec.get("facts") or {})
    if dialect == "llamafactory" and f.method == "full":
        # no bf16/fp16 key: LF upcasts every trainable parameter to fp32 and runs no autocast (LF
        # model/adapter.py init_adapter @ ff6d4d1); LoRA keeps the frozen weights in the model's
        # own dtype (model/patcher.py infer_optim_dtype), which the runspec guesses from the card
        values["precision"] = "fp32"
    for name, value in values.items():
        if value is D.MISSING or value is None or not hasattr(f, name) or getattr(f, name) is not None:
            continue
        if name in ("batch", "grad_accum", "seq_len", "eval_batch", "eval_accumulation_steps"):
            value = _int(value)
        if name == "grad_ckpt":
            value = bool(value)
        setattr(f, name, value)
        defaulted.add(name)
    return defaulted


def _join(v):
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)
