"""A config patched after its log was written: the planner sees it instead of compounding.

The log shows the run as it was; the file holds what the last `--write` made of it. When the two
disagree (config.conflicts_with) and the plan made from the log's own values writes exactly what
the file already holds, the patch is applied and the log is from before it: the report says so,
shows that plan, and patches nothing (halving the batch again would answer evidence the patched
config never produced).
"""

import copy

from ..read import dialects as D

# the facts a conflict can name, and the knob that sets each
_KNOB_OF = {"batch": "batch", "grad_accum": "grad_accum", "seq_len": "seq_len"}


def as_logged(config, conflicts):
    """A copy of the config with the conflicting settings back at the values the log shows, or
    None when no conflict is about a setting the plan moves."""
    back = {}
    for c in conflicts:
        knob = _KNOB_OF.get(c["fact"])
        key = config.key(knob) if knob else None
        if key and config.has(key):
            back[key] = c["log"]
    if not back:
        return None
    logged = copy.deepcopy(config)
    for key, value in back.items():
        D.set_path(logged.data, key, value)
    return logged


def already_applied(plan, config):
    """The applied steps' changes, when every one of them already stands in `config`; else None."""
    changes = {k: v for s in plan if not s.get("alternative") for k, v in s["changes"].items()}
    if not changes or any(config.value(k) != new for k, (_, new) in changes.items()):
        return None
    return changes


def note(changes, lang):
    shown = ", ".join(f"{k}: {old} → {new}" for k, (old, new) in changes.items())
    if lang == "zh":
        return (f"配置文件里已经是这份计划要改成的值（{shown}）：这个日志来自修改之前的运行。请用当前配置重新训练，"
                f"再诊断新的日志；这次不再叠加修改。")
    return (f"The config already holds this plan's changes ({shown}): it was patched after this log was written, "
            f"so the log shows the run before the patch. Run the training with the config as it is now and "
            f"diagnose the new log; nothing is changed twice.")
