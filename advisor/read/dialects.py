"""Config dialects as data (advisor/data/dialects.yaml): recognise a config, find a knob's key in
it, read and write nested or dotted keys.

A key is dotted (`zero_optimization.stage`). In a file it may be spelled literally at the top level
(`actor_rollout_ref.model.path: x`, the way Hydra overrides are written) or nested as mappings;
both are read, and a write goes where the value already is, else in the file's own style.
"""

import functools

MISSING = object()
UNKNOWN = "unknown"


@functools.cache                 # the snapshot is read once per process: so is its dialect table
def table():
    from ..core.snapshot import snapshot
    return snapshot()["dialects"]


def flat_keys(data, pre=""):
    """Every key of a nested mapping, dotted; a mapping's own key is listed too."""
    for k, v in data.items():
        yield pre + str(k)
        if isinstance(v, dict):
            yield from flat_keys(v, pre + str(k) + ".")


def detect(data, min_score=3):
    """The dialect whose marker keys the config holds most of, or 'unknown'.

    A marker is worth 2, a whole namespace (`actor_rollout_ref.`) 3, a weak key 1; one marker alone
    is not enough (`base_model` opens axolotl files and alpaca-lora scripts' flags alike)."""
    # `max-model-len` (vLLM's YAML takes its flags' spelling) is the key max_model_len
    keys = {k.replace("-", "_") for k in flat_keys(data)} if isinstance(data, dict) else set()
    for section in _sections():                 # settings nested under a section count as the dialect's own
        keys |= {k[len(section) + 1:] for k in keys if k.startswith(section + ".")}
    best, best_score = UNKNOWN, 0
    for name, spec in table().items():
        det = spec.get("detect") or {}
        score = sum(3 if m.endswith(".") else 2 for m in det.get("markers", ()) if _has(keys, m)) + \
            sum(1 for m in det.get("weak", ()) if _has(keys, m)) + \
            (2 if section_of(name, data) else 0)          # its own section (`training_args:`) is a marker
        if score > best_score:
            best, best_score = name, score
    return best if best_score >= min_score else UNKNOWN


@functools.cache
def _sections():
    return tuple(s for spec in table().values() for s in spec.get("sections", ()))


def section_of(dialect, data):
    """The key prefix of the mapping a file nests a dialect's settings in (GLM's finetune_demo puts the
    trainer's arguments under `training_args:`), or '' when they sit at the top level."""
    for s in (table().get(dialect) or {}).get("sections", ()):
        if isinstance(data, dict) and isinstance(data.get(s), dict):
            return s + "."
    return ""


def settings_of(dialect, data):
    """`data` with a nested section's settings lifted to the top level (the top level wins), for reading."""
    prefix = section_of(dialect, data)
    return {**data[prefix[:-1]], **data} if prefix else data


def _has(keys, marker):
    if marker.endswith("."):
        return any(k.startswith(marker) for k in keys)
    return marker in keys


@functools.cache
def knob(dialect, name):
    """The knob's entry ({key, default, on, ...}) or None when the dialect has no such knob."""
    entry = (table().get(dialect) or {}).get("knobs", {}).get(name)
    return entry if entry and (entry.get("key") or entry.get("aliases")) else None


def key_for(dialect, name, data):
    """The key to patch for a knob: the spelling the file already has, else the dialect's own.

    None when the dialect has no key for it, or the file leaves it to another program ("auto":
    DeepSpeed's values the HF Trainer fills in; patching them there would make HF stop with a
    mismatch)."""
    entry = knob(dialect, name)
    if entry is None:
        return None
    spellings = [k for k in [entry.get("key")] + list(entry.get("aliases") or []) if k]
    dashed = [k.replace("_", "-") for k in spellings if "_" in k]
    prefix = section_of(dialect, data)
    for k in spellings + dashed + [prefix + k for k in spellings if prefix]:
        value = get_path(data, k)
        if value is not MISSING:
            return None if isinstance(value, str) and value.strip().lower() == "auto" and name != "bf16" else k
    return prefix + entry["key"] if entry.get("key") else None


def default_of(dialect, name):
    entry = knob(dialect, name) or {}
    return entry.get("default", MISSING)


def unset(dialect, name):
    """How the old value of a key the file lacks is shown: the framework's real default, marked."""
    d = default_of(dialect, name)
    return "unset" if d is MISSING or d is None else f"unset (default {_show(d)})"


def _show(v):
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def file_value(dialect, name, value):
    """The value a file holds for a knob set to `value` (True = on): `on`, inverted, or as given."""
    entry = knob(dialect, name) or {}
    if value is True and "on" in entry:
        return entry["on"]
    if isinstance(value, bool) and entry.get("invert"):
        return not value
    return value


# ---- nested and dotted keys ----------------------------------------------------------------
def get_path(data, key):
    """A dotted key's value, found as `a.b: {c: 1}` as well as `a: {b: {c: 1}}`; MISSING if absent."""
    if not isinstance(data, dict):
        return MISSING
    if key in data:
        return data[key]
    parts = key.split(".")
    for i in range(1, len(parts)):
        head = ".".join(parts[:i])
        if isinstance(data.get(head), dict):
            found = get_path(data[head], ".".join(parts[i:]))
            if found is not MISSING:
                return found
    return MISSING


def set_path(data, key, value, insert=None):
    """Set a dotted key where the file has it; a new one nested under the deepest mapping the file
    already has, or spelled dotted at the top when the file writes its keys dotted.
    `insert(mapping, key, value)` places a key a mapping lacks (the patcher keeps order and comments)."""
    insert = insert or (lambda m, k, v: m.__setitem__(k, v))
    if key in data or "." not in key:
        if key in data:
            data[key] = value
        else:
            insert(data, key, value)
        return
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):      # the longest prefix that is a mapping here
        head = ".".join(parts[:i])
        if isinstance(data.get(head), dict):
            return set_path(data[head], ".".join(parts[i:]), value, insert)
    if any("." in str(k) for k in data):        # Hydra-style flat overrides: keep them flat
        return insert(data, key, value)
    insert(data, parts[0], type(data)())        # a new section, in the file's mapping type
    set_path(data[parts[0]], ".".join(parts[1:]), value, insert)
