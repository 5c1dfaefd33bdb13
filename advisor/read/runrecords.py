"""A run folder's per-step records: LLaMA-Factory's trainer_log.jsonl and HF's trainer_state.json.

trainer_log.jsonl is written by LLaMA-Factory `src/llamafactory/train/callbacks.py` LogCallback.on_log,
one JSON object a logging step: current_steps, total_steps, loss, eval_loss, predict_loss, reward,
accuracy, lr, epoch, percentage, elapsed_time, remaining_time, throughput, total_tokens, and
vram_allocated / vram_reserved (GiB, the peak so far) when RECORD_VRAM is set. trainer_state.json is
transformers `trainer_callback.py` TrainerState.save_to_json: global_step, max_steps and log_history,
a list of the dicts Trainer.log() saw ({loss, grad_norm, learning_rate, epoch, step}, {eval_loss, …},
{train_runtime, …} at the end). Both are read bounded: a long run's records are megabytes.
"""

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

RECORDS_MAX = 32 << 20      # a trainer_state.json of a long run is megabytes; more is not one
SERIES_MAX = 50
ENTRIES_MAX = 5000          # records kept to stand in for a missing log (a jsonl of 100 000 steps is not held)


@dataclass
class Records:
    """Per-step records (trainer_log.jsonl or a trainer_state.json's log_history)."""
    path: str
    kind: str                               # trainer_log | log_history
    step: Optional[int] = None
    total: Optional[int] = None
    losses: int = 0
    finished: bool = False
    last_loss: Optional[float] = None
    memory: list = field(default_factory=list)      # [{step, allocated_gib, reserved_gib}], the last ones
    entries: deque = field(default_factory=lambda: deque(maxlen=ENTRIES_MAX))   # the last ones: a log is made of them


def _read_bounded(path, limit=RECORDS_MAX):
    from .files import open_regular
    fh, size = open_regular(path)
    with fh:
        if size > limit:
            fh.seek(size - limit)             # a long run's jsonl: its last records tell how far it got
        return fh.read(limit)


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def trainer_log(path):
    """LLaMA-Factory's trainer_log.jsonl (LogCallback.on_log; see the module's docstring)."""
    rec = Records(path=path, kind="trainer_log")
    for raw in _read_bounded(path).splitlines():
        try:
            e = json.loads(raw)
        except ValueError:
            continue                          # a line cut by the crash or by the bounded read
        if not isinstance(e, dict) or _num(e.get("current_steps")) is None:
            continue
        step, total = int(e["current_steps"]), _num(e.get("total_steps"))
        if _num(e.get("loss")) is not None:
            rec.losses += 1
            rec.last_loss = e["loss"]
        rec.step, rec.total = max(step, rec.step or 0), int(total) if total else rec.total
        if _num(e.get("vram_allocated")) is not None or _num(e.get("vram_reserved")) is not None:
            rec.memory.append({"step": step, "allocated_gib": _num(e.get("vram_allocated")),
                               "reserved_gib": _num(e.get("vram_reserved"))})
        rec.entries.append(e)
    rec.memory = rec.memory[-SERIES_MAX:]
    rec.finished = bool(rec.total and rec.step is not None and rec.step >= rec.total)
    return rec if rec.step is not None else None


def trainer_state(path):
    """HF's trainer_state.json: global_step, max_steps and log_history."""
    try:
        data = json.loads(_read_bounded(path))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("log_history"), list):
        return None
    rec = Records(path=path, kind="log_history", step=_num(data.get("global_step")),
                  total=_num(data.get("max_steps")) or None)
    for e in data["log_history"]:
        if not isinstance(e, dict):
            continue
        if _num(e.get("loss")) is not None:
            rec.losses += 1
            rec.last_loss = e["loss"]
        if "train_runtime" in e:
            rec.finished = True
        if _num(e.get("step")) is not None:
            rec.step = max(rec.step or 0, int(e["step"]))
        rec.entries.append(e)
    return rec


def records_text(rec):
    """The records as the lines HF's Trainer prints for them (`{'loss': …}`), which the parser reads."""
    out = []
    for e in rec.entries:
        if _num(e.get("loss")) is not None:
            out.append(repr({"loss": e["loss"], "epoch": e.get("epoch"), "step": e.get("step", e.get("current_steps"))}))
        elif _num(e.get("eval_loss")) is not None:
            out.append(repr({"eval_loss": e["eval_loss"], "epoch": e.get("epoch")}))
        elif "train_runtime" in e:
            out.append(repr({"train_runtime": e["train_runtime"]}))
    return "\n".join(out or [f"{rec.kind}: step {rec.step}"]) + "\n"


def apply_records(run, timeline):
    """The records' step count is progress: a log whose bar was not captured still shows how far the
    run got (the phase decision reads context.step and losses_logged)."""
    rec = run.records
    if rec is None or rec.step is None:
        return timeline
    ctx = timeline.context
    if ctx.step is None or rec.step > ctx.step:
        ctx.step = rec.step
        ctx.total_steps = ctx.total_steps or rec.total
    ctx.losses_logged = max(ctx.losses_logged, rec.losses)
    f = timeline.facts
    if f.step is None or rec.step > f.step:
        f.step = rec.step
    f.total_steps = f.total_steps or rec.total
    return timeline


def unfinished_note(run, lang="en"):
    """A run whose records stop short while no log in its folder shows a failure: where the
    traceback went (LLaMA Board's running_log.txt holds the logger's lines only), and the last
    memory reading the records hold."""
    rec = run.records
    if rec is None or rec.finished or rec.step is None:
        return None
    of = f" of {rec.total}" if rec.total else ""
    last = rec.memory[-1] if rec.memory else None
    mem = (f" The last memory record (step {last['step']}): {last['allocated_gib']} GiB allocated, "
           f"{last['reserved_gib']} GiB reserved." if last else "")
    mem_zh = (f"最后一条显存记录（第 {last['step']} 步）：已分配 {last['allocated_gib']} GiB，"
              f"已预留 {last['reserved_gib']} GiB。" if last else "")
    if lang == "zh":
        return (f"记录停在第 {rec.step}{'/' + str(rec.total) if rec.total else ''} 步，训练没有结束（或仍在运行），但目录里没有日志显示原因："
                f"LLaMA Board 把报错写到运行 `llamafactory-cli webui` 的终端，而不是 running_log.txt。"
                f"请把终端输出保存为此目录下的 .log 文件后再诊断一次。" + mem_zh)
    return (f"The records stop at step {rec.step}{of} and the run did not finish (or is still running), but no log "
            f"in the folder shows why: LLaMA Board writes a failing run's traceback to the terminal that runs "
            f"`llamafactory-cli webui`, not to running_log.txt. Save that output into this folder as a .log file "
            f"and diagnose the folder again." + mem)
