"""Patch: the plan's changes applied to the user's own config, shown as a unified diff.

YAML is edited round-trip (ruamel): comments, key order, quoting and blank lines survive. A key
the file lacks goes right after its related key, taking over that key's trailing comment block so
a following `### section` header stays below it. JSON stays JSON with its indentation. Only the
steps up to the one that fits are applied (alternatives are shown, not applied); applying the
same plan to the patched file changes nothing.
"""

import difflib
import glob
import io
import json
import os
import re
from pathlib import Path

from ..read.dialects import MISSING, get_path, set_path
from ..read.reader import InputError

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


def choose_steps(diagnosis, numbers, config_path=None):
    """Keep only the plan's steps the user chose (1-based, as the report numbers them), each applied
    even if it was offered as an alternative, and patch for those alone. A number the plan does not
    have is an input error."""
    plan = diagnosis.plan or []
    wrong = [n for n in numbers if not 1 <= n <= len(plan)]
    if wrong:
        raise InputError(f"--steps {','.join(map(str, wrong))}: the plan has steps 1 to {len(plan)}"
                         if plan else "--steps: this diagnosis has no plan")
    # a step's saving and fit were worked out on top of the steps before it: alone they no longer hold
    diagnosis.plan = [{**plan[n - 1], "alternative": False, "fits_after": None} for n in sorted(set(numbers))]
    from ..read.config import load_config
    config = load_config(config_path) if config_path else None
    diagnosis.patch, diagnosis.snippet = patch_for(diagnosis, config)
    return diagnosis


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
    """The config's text with `changes` applied. Only the changed lines are edited (untouched lines
    stay byte for byte: `[a,b]`, `~`, `2.0e-5`, CRLF); the round-trip dump is the reference for
    what the file must mean, and the answer whenever a line edit cannot express the change. A command
    line is patched in its own text."""
    if config.format == "cmdline":
        from ..read.cmdline import patched
        text = patched(config.command, changes)
        return re.sub(r"(?<!\r)\n", "\r\n", text) if "\r\n" in config.text else text
    reference = _dumped_text(config, changes)
    edited = _edited_text(config, changes)
    if edited is not None and _same_meaning(edited, reference, config.format):
        return edited
    return reference


def _dumped_text(config, changes):
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


# ---- line edits ---------------------------------------------------------------------------------
def _edited_text(config, changes):
    """Edit the changed keys in place: JSON by their values' bytes (json_edit), YAML line by line;
    None when a change needs more than that (a YAML block value or nested insert)."""
    todo = {key: new for key, (_, new) in changes.items() if not _already(config, key, new)}
    if config.format == "json":
        from .json_edit import edited
        return edited(config.text, todo)
    lines = config.text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for key, new in todo.items():
        i = _key_line(lines, key)
        if i is not None:
            line = _yaml_line(lines[i], key, new)
            if line is None:
                return None
            lines[i] = line
        elif not _insert_line(lines, key, new, config, newline):
            return None
    return "".join(lines)


def _already(config, key, new):
    """The file already says `new` for `key` (a bool only as a bool): its text stays as written."""
    old = get_path(config.data, key)
    return old is not MISSING and old == new and isinstance(old, bool) == isinstance(new, bool)


def _key_line(lines, key):
    """Index of the YAML line that sets `key`: a top-level key, or a dotted path
    `fsdp_config.fsdp_activation_checkpointing` followed down its indented blocks."""
    parts = [key] if "." not in key or _yaml_key_at(lines, key, "", 0, len(lines)) is not None else key.split(".")
    lo, hi, indent, found = 0, len(lines), "", None
    for part in parts:
        found = _yaml_key_at(lines, part, indent, lo, hi)
        if found is None:
            return None
        lo, hi = found + 1, _block_end(lines, found, indent)
        indent = _child_indent(lines, lo, hi)
    return found


def _yaml_key_at(lines, key, indent, lo, hi):
    k = re.escape(key)
    rx = re.compile(rf"""^{re.escape(indent)}(?:{k}|"{k}"|'{k}')[ \t]*:(?:[ \t]|\r?\n|$)""")
    hits = [i for i in range(lo, hi) if rx.match(lines[i])]
    return hits[0] if len(hits) == 1 else None


def _indent_of(line):
    return line[:len(line) - len(line.lstrip(" "))]


def _block_end(lines, start, indent):
    """The line after the block of the key at `start` (lines indented deeper, blanks, comments)."""
    for i in range(start + 1, len(lines)):
        text = lines[i].strip()
        if text and not text.startswith("#") and len(_indent_of(lines[i])) <= len(indent):
            return i
    return len(lines)


def _child_indent(lines, lo, hi):
    return next((_indent_of(lines[i]) for i in range(lo, hi)
                 if lines[i].strip() and not lines[i].lstrip().startswith("#")), None) or " " * 999


_YAML_LINE = re.compile(r"""^(?P<head>[^:#]*?:[ \t]*)(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\[\]{}|>&*!%@`][^#\r\n]*?)"""
                        r"(?P<gap>[ \t]*)(?P<comment>#[^\r\n]*)?(?P<end>\r?\n)?$")


def _yaml_line(line, key, new):
    m = _YAML_LINE.match(line)
    text = _yaml_token(new, m.group("value") if m else "")
    if m is None or text is None:
        return None
    return m.group("head") + text + _gap(m, text) + (m.group("comment") or "") + (m.group("end") or "")


def _gap(m, text):
    """Keep a trailing comment at its column where the new value leaves room (as ruamel does)."""
    if not m.group("comment"):
        return ""
    return " " * max(1, len(m.group("gap")) - (len(text) - len(m.group("value"))))


def _yaml_token(value, old):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if not isinstance(value, str):
        return None
    if old[:1] == "'":
        return "'" + value.replace("'", "''") + "'"
    if old[:1] == '"' or not re.fullmatch(r"[A-Za-z0-9_./][\w./+-]*", value):
        return json.dumps(value, ensure_ascii=False)
    return value


def _insert_line(lines, key, value, config, newline):
    """A missing YAML key goes after its related key's value (its block, not the comments and blank
    lines after it, which belong to what follows)."""
    token = _yaml_token(value, "")
    if token is None:
        return False
    anchor = next((k for k in RELATED.get(key, []) if k in config.data), None)
    if anchor is not None:
        start = _key_line(lines, anchor)
        if start is None:
            return False
    else:
        start = max((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), default=None)
        if start is None:
            return False
    end = start
    for j in range(start + 1, len(lines)):
        ln = lines[j]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        if ln[:1] in " \t-":
            end = j
            continue
        break
    if not lines[end].endswith("\n"):
        lines[end] += newline
    lines.insert(end + 1, f"{key}: {token}{newline}")
    return True


def _same_meaning(edited, reference, fmt):
    """Both texts load to the same settings, in the same order: the line edit is the dump, minus
    the reformatting."""
    try:
        if fmt == "json":
            a, b = json.loads(edited), json.loads(reference)
        else:
            from ruamel.yaml import YAML
            a, b = YAML(typ="safe", pure=True).load(edited), YAML(typ="safe", pure=True).load(reference)
    except Exception:                       # the edit broke the file: use the dump
        return False
    return isinstance(a, dict) and a == b and list(a) == list(b)


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


def write_patched(diagnosis, config_path, output=None, log_path=None):
    """Apply the patch: to OUTPUT if given, else in place after writing a backup. Returns a message."""
    from ..read.config import load_config
    from ..read.files import encode_config, write_output
    config = load_config(config_path)
    if not output:
        _refuse_second_patch(config_path, config.raw, log_path)
    changes = applied_changes(diagnosis.plan)
    if config.dialect == "unknown":
        raise InputError(f"{config_path}: not a LLaMA-Factory, HF/TRL, axolotl, DeepSpeed, accelerate, ms-swift, "
                         f"torchtune, verl or vLLM config; nothing written")
    if config.format == "yaml" and uses_anchors(config.text):
        raise InputError(f"{config_path}: uses YAML anchors/aliases or merge keys, which a rewrite could break; "
                         f"nothing written — apply the printed diff by hand")
    if not changes:
        return "oom-doctor: nothing to write (no config change in the plan)"
    new_text = patched_text(config, changes)
    if new_text == config.text:
        return f"oom-doctor: {config_path} already has these settings; nothing written"
    data = encode_config(new_text, config.encoding, config_path)    # its own encoding, BOM and line ends
    if output:
        write_output(output, data)
        return f"oom-doctor: wrote the patched config to {output}"
    return _patch_in_place(config_path, data, config.raw)


def _refuse_second_patch(config_path, raw, log_path):
    """A log shows the run of the config as it was then. When --write already patched the config
    after this log was written (its newest backup is younger than the log and differs from the
    file), a second plan from the same log would stack changes on evidence that no longer applies:
    refused until the patched config has run and left a new log."""
    if not log_path or log_path == "-":
        return
    target = Path(os.path.realpath(config_path))
    backups = [b for b in target.parent.glob(glob.escape(target.name) + ".bak*")
               if re.fullmatch(r"\.bak(\.\d+)?", b.name[len(target.name):]) and b.is_file()]
    if not backups:
        return
    newest = max(backups, key=lambda b: b.stat().st_mtime)
    try:
        if newest.stat().st_mtime < os.stat(log_path).st_mtime or newest.read_bytes() == raw:
            return
    except OSError:
        return
    raise InputError(f"{config_path}: already patched after this log was written (backup: {newest.name}); "
                     f"run the training again and diagnose its new log; nothing written")


def uses_anchors(text):
    """Anchors, aliases and merge keys as the YAML parser sees them (any name: `&1`, `&é`, and a
    `<<` inside a flow mapping), not as a pattern guesses them."""
    from ruamel.yaml import YAML
    from ruamel.yaml.events import AliasEvent, NodeEvent, ScalarEvent
    try:
        for ev in YAML(typ="rt").parse(text):
            if isinstance(ev, AliasEvent) or (isinstance(ev, NodeEvent) and getattr(ev, "anchor", None)):
                return True
            if isinstance(ev, ScalarEvent) and (ev.tag == "tag:yaml.org,2002:merge"
                                                or (ev.value == "<<" and ev.style is None)):
                return True
    except Exception:           # it loaded a moment ago; a parser that disagrees means: do not touch
        return True
    return False


def _patch_in_place(config_path, data, original):
    """Back up, then write. A symlink is followed (its target is patched, the link stays). The new
    file keeps the original's mode, owner and group; a file with other hard links, or one whose
    owner could not be kept on a new file, is rewritten in place so every name sees the patch."""
    from ..read.files import atomic_write, write_in_place
    target = os.path.realpath(config_path)
    st = os.stat(target)
    if not os.access(target, os.W_OK) or not os.access(os.path.dirname(target), os.W_OK):
        raise InputError(f"{config_path}: not writable; nothing changed (use -o OUT to write elsewhere)")
    backup = _free_backup_name(Path(target))
    atomic_write(str(backup), original, like=st)
    if st.st_nlink > 1 or not _can_keep_owner(st):
        write_in_place(target, data, original)
    else:
        atomic_write(target, data, like=st)
    via = f" (a link to {target})" if os.path.islink(config_path) else ""
    shown_backup = backup if via else Path(config_path).with_name(backup.name)
    return f"oom-doctor: patched {config_path}{via} (backup: {shown_backup})"


def _can_keep_owner(st):
    """A new file is ours; only root can give it to another user, others only to a group of theirs."""
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and st.st_gid in set(os.getgroups()) | {os.getegid()}


def _free_backup_name(target):
    """FILE.bak, or FILE.bak.1, .2 … when an older backup exists: never overwrite one silently."""
    cand = target.with_name(target.name + ".bak")
    n = 1
    while os.path.lexists(cand):
        cand = target.with_name(f"{target.name}.bak.{n}")
        n += 1
    return cand
