"""Patch: the plan's changes applied to the user's own config, shown as a unified diff.

YAML is edited round-trip (ruamel): comments, key order, quoting and blank lines survive. A key
the file lacks goes right after its related key, taking over that key's trailing comment block so
a following `### section` header stays below it. JSON stays JSON with its indentation. Only the
steps up to the one that fits are applied (alternatives are shown, not applied); applying the
same plan to the patched file changes nothing.
"""

import difflib
import io
import json
import os
import re
import tempfile
from pathlib import Path

from .dialects import set_path
from .reader import InputError

# where a missing key belongs: after the first of these that the file has
RELATED = {
    "gradient_accumulation_steps": ["per_device_train_batch_size", "micro_batch_size"],
    "per_device_train_batch_size": ["gradient_accumulation_steps"],
    "per_device_eval_batch_size": ["eval_strategy", "evaluation_strategy", "val_size", "eval_steps",
                                   "per_device_train_batch_size"],
    "eval_accumulation_steps": ["per_device_eval_batch_size", "eval_steps", "eval_strategy", "val_size"],
    "eval_batch_size": ["micro_batch_size", "val_set_size"],
    "quantization_bit": ["model_name_or_path", "finetuning_type"],
    "finetuning_type": ["stage", "do_train"],
    "disable_gradient_checkpointing": ["finetuning_type", "lora_target", "flash_attn"],
    "gradient_checkpointing": ["gradient_accumulation_steps", "micro_batch_size", "per_device_train_batch_size"],
    "cutoff_len": ["template", "dataset"],
    "deepspeed": ["finetuning_type", "model_name_or_path", "base_model", "output_dir"],
    "bf16": ["fp16", "learning_rate", "num_train_epochs"],
    "fp16": ["bf16", "learning_rate", "num_train_epochs"],
    "pure_bf16": ["bf16"],
    "optim": ["learning_rate", "lr_scheduler_type"],
    "optimizer": ["learning_rate", "lr_scheduler"],
    "load_in_4bit": ["load_in_8bit", "base_model"],
    "adapter": ["load_in_4bit", "load_in_8bit"],
    "low_cpu_mem_usage": ["model_name_or_path"],
}


def applied_changes(plan):
    """The changes of the steps the user should apply (not the alternatives), merged in order."""
    merged = {}
    for step in plan or []:
        if step.get("alternative"):
            continue
        for key, (old, new) in (step.get("changes") or {}).items():
            merged[key] = [merged[key][0] if key in merged else old, new]
    return merged


def patch_for(diagnosis, config):
    """(unified diff or None, snippet or None) for a diagnosis whose plan is filled."""
    changes = applied_changes(diagnosis.plan)
    if not changes:
        return None, None
    if config is None or config.dialect == "unknown":
        return None, snippet(changes)
    if config.from_log is not None:           # the command the log echoes: see patched_command
        return None, snippet(changes)
    new_text = patched_text(config, changes)
    return unified_diff(config, new_text) or None, None


def patched_command(diagnosis, config):
    """The launch command the log echoes, with the plan's changes: what to run instead."""
    changes = applied_changes(diagnosis.plan)
    if not changes or config is None or config.from_log is None:
        return None
    return patched_text(config, changes).strip("\n") + "\n"


def snippet(changes):
    lines = [f"{key}: {_yaml_scalar(new)}" for key, (_, new) in changes.items()]
    return "\n".join(lines) + "\n"


def _yaml_scalar(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def patched_text(config, changes):
    if config.format == "cmdline":
        from .cmdline import patched
        return patched(config.command, changes)
    if config.format == "json":
        data = json.loads(config.text)     # a fresh copy: nested sections are edited in place
        for key, (_, new) in changes.items():
            set_path(data, key, new)
        indent = _json_indent(config.text)
        return json.dumps(data, indent=indent, ensure_ascii=False) + ("\n" if config.text.endswith("\n") else "")
    from ruamel.yaml import YAML
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(**_list_indent(config.text))
    data = yaml.load(config.text)          # a fresh copy: the loaded config stays as the user wrote it
    for key, (_, new) in changes.items():
        set_path(data, key, new, insert=_insert)      # nested (`zero_optimization.stage`) or dotted keys
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _list_indent(text):
    """Keep the file's list style: `key:` then `  - item` (offset 2) or `- item` (offset 0)."""
    lines = text.splitlines()
    for prev, line in zip(lines, lines[1:]):
        m = re.match(r"^(\s*)- ", line)
        if m and prev.rstrip().endswith(":"):
            parent = len(prev) - len(prev.lstrip())
            offset = max(0, len(m.group(1)) - parent)
            return {"mapping": 2, "sequence": offset + 2, "offset": offset}
    return {"mapping": 2, "sequence": 2, "offset": 0}


def _insert(data, key, value):
    anchor = next((k for k in RELATED.get(key, []) if k in data), None)
    if anchor is None:
        last = list(data.keys())[-1] if data else None
        data[key] = value
        if last is not None:
            _move_trailing_comment(data, last, key)
        return
    pos = list(data.keys()).index(anchor) + 1
    data.insert(pos, key, value)
    _move_trailing_comment(data, anchor, key)


def _move_trailing_comment(data, src, dst):
    """The blank lines and comments after `src` belong below the new key `dst`."""
    items = getattr(data, "ca", None)
    if items is None or src not in items.items:
        return
    entry = items.items[src]
    if len(entry) > 2 and entry[2] is not None:
        text = entry[2].value
        nl = text.find("\n")
        inline, rest = (text[:nl + 1], text[nl + 1:]) if nl >= 0 else (text, "")
        if rest:
            entry[2].value = inline
            from ruamel.yaml.tokens import CommentToken
            items.items[dst] = [None, None, CommentToken("\n" + rest, entry[2].start_mark, None), None]


def _json_indent(text):
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped and len(line) > len(stripped):
            return len(line) - len(stripped)
    return 2


def unified_diff(config, new_text):
    name = str(config.display_path)
    diff = difflib.unified_diff(config.text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                fromfile=name, tofile=name)
    out = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff)
    return out


def write_patched(diagnosis, config_path, output=None):
    """Apply the patch: to OUTPUT if given, else in place after writing a backup. Returns a message."""
    from .config import load_config
    config = load_config(config_path)
    changes = applied_changes(diagnosis.plan)
    if config.dialect == "unknown":
        raise InputError(f"{config_path}: not a LLaMA-Factory, HF/TRL, axolotl, DeepSpeed, accelerate, ms-swift, "
                         f"torchtune, verl or vLLM config; nothing written")
    if config.format == "yaml" and re.search(r"(?m)^\s*<<\s*:|(?:^|[\s:\[,-])[&*][A-Za-z_][\w-]*", config.text):
        raise InputError(f"{config_path}: uses YAML anchors/aliases or merge keys, which a rewrite could break; "
                         f"nothing written — apply the printed diff by hand")
    if not changes:
        return "oom-doctor: nothing to write (no config change in the plan)"
    new_text = patched_text(config, changes)
    if new_text == config.text:
        return f"oom-doctor: {config_path} already has these settings; nothing written"
    if output:
        _atomic_write(Path(output), new_text)
        return f"oom-doctor: wrote the patched config to {output}"
    target = Path(config_path)
    if not os.access(target, os.W_OK) or not os.access(target.parent, os.W_OK):
        raise InputError(f"{config_path}: not writable; nothing changed (use -o OUT to write elsewhere)")
    backup = _free_backup_name(target)
    _atomic_write(backup, target.read_bytes())
    _atomic_write(target, new_text)
    return f"oom-doctor: patched {config_path} (backup: {backup})"


def _free_backup_name(target):
    """FILE.bak, or FILE.bak.1, .2 … when an older backup exists: never overwrite one silently."""
    cand = target.with_name(target.name + ".bak")
    n = 1
    while cand.exists():
        cand = target.with_name(f"{target.name}.bak.{n}")
        n += 1
    return cand


def _atomic_write(path, content):
    """Write to a temporary file beside `path`, then rename: a crash mid-write loses nothing."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent or Path(".")))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"{path}: cannot write ({e.strerror or e}); the original is unchanged")
