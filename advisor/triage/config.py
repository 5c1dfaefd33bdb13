"""The config that sits beside a log in a folder of reports: used as that member's `--config`.

Support desks keep what a reporter sent in one folder: `run12.log` with `run12.yaml`, or a
folder per report holding the log and one config. The one beside it is taken when it is
unambiguous: the same stem first, else the only YAML in the folder, else the only JSON named like a
config (a folder's one JSON is as often a label, a trainer state or a metrics dump).
"""

import functools
import os
import re

_YAML = (".yaml", ".yml")
_JSON = (".json",)
_CONFIG_NAME = re.compile(r"config|args|arguments|deepspeed|ds_|zero|fsdp|accelerate|recipe", re.I)


@functools.lru_cache(maxsize=4096)
def _configs_in(folder, mtime_ns):
    """(yaml files, json files) of one folder, listed once per process however many logs it holds
    (the folder's mtime is in the key: a file added since is seen)."""
    try:
        names = sorted(os.listdir(folder or "."))
    except OSError:
        return (), ()
    pick = lambda exts: [os.path.join(folder, n) for n in names if os.path.splitext(n)[1].lower() in exts]
    return tuple(pick(_YAML)), tuple(p for p in pick(_JSON) if _CONFIG_NAME.search(os.path.basename(p)))


def config_beside(log_path):
    """The path of the config that belongs to `log_path`, or None."""
    stem = os.path.splitext(log_path)[0]
    for ext in _YAML + _JSON:
        if ext != os.path.splitext(log_path)[1].lower() and os.path.isfile(stem + ext):
            return stem + ext
    folder = os.path.dirname(log_path)
    try:
        yamls, jsons = _configs_in(folder, os.stat(folder or ".").st_mtime_ns)
    except OSError:
        return None
    for found in (yamls, jsons):
        if len(found) == 1 and os.path.isfile(found[0]):
            return found[0]
        if found:
            return None         # several: which one is this log's is a guess
    return None
