"""A run's output folder as the input: which log, which config and which per-step records it holds.

The names are the frameworks' own:
- LLaMA-Factory `src/llamafactory/extras/constants.py`: RUNNING_LOG = "running_log.txt" (LLaMA Board's
  logger lines, `extras/logging.py` LoggerHandler: `[INFO|2025-03-14 10:21:07] file.py:N >> message`;
  a traceback goes to the terminal, not there), TRAINER_LOG = "trainer_log.jsonl" (`train/callbacks.py`
  LogCallback.on_log: current_steps, total_steps, loss, eval_loss, lr, epoch, percentage, and
  vram_allocated/vram_reserved in GiB when RECORD_VRAM is set), TRAINING_ARGS = "training_args.yaml"
  (`webui/common.py` save_cmd: the arguments LLaMA Board launched `llamafactory-cli train` with; older
  releases called it trainer_config.yaml), LLAMABOARD_CONFIG = "llamaboard_config.yaml" (the web
  form's fields, not a training config).
- transformers `trainer.py` TRAINER_STATE_NAME = "trainer_state.json", written into every
  `checkpoint-N/` (PREFIX_CHECKPOINT_DIR) and by save_state(); `trainer_callback.py` TrainerState:
  global_step, max_steps, log_history [{loss, learning_rate, epoch, step}, {eval_loss, step}, …].

Nothing in the folder is followed or opened unless `lstat` calls it a regular file: a symlink, a FIFO
or a device inside a run folder is never opened (a FIFO would block the read).
"""

import os
import re
import stat
from dataclasses import dataclass, field
from typing import List, Optional

from .files import open_regular
from .reader import InputError
from .runrecords import Records, trainer_log, trainer_state

RUNNING_LOG = "running_log.txt"
TRAINER_LOG = "trainer_log.jsonl"
TRAINER_STATE = "trainer_state.json"
TRAINING_ARGS = ("training_args.yaml", "trainer_config.yaml")
NOT_CONFIGS = {"llamaboard_config.yaml", "config.json", "adapter_config.json", "generation_config.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "dataset_info.json",
               TRAINER_STATE, "all_results.json", "train_results.json", "eval_results.json",
               "model.safetensors.index.json", "added_tokens.json", "preprocessor_config.json"}
LOG_SUFFIXES = (".log", ".out", ".err")
CONFIG_SUFFIXES = (".yaml", ".yml", ".sh", ".bash", ".json")
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")
MAX_WEAK_LOGS = 3           # a folder of many logs beside one config is a support inbox, not a run
MAX_DIRS = 2000             # folders looked into when searching for runs below DIR
DEPTH = 6                   # LLaMA-Factory/saves/<model>/<method>/<run> is four levels down; two to spare
TAIL = 256 << 10            # a log's last bytes, searched for a failure
FAILURE = (b"out of memory", b"Traceback (most recent", b"Killed", b"OutOfMemory", b"MemoryError", b"exitcode",
           b"ALLOC_FAILED", b"EL0004", b"SIGKILL", b"Signal 9")
LOOKED_FOR = (f"{RUNNING_LOG}, *.log, *.out, *.err, nohup.out, {TRAINER_LOG} or {TRAINER_STATE} "
              f"(in the folder or a checkpoint-N/)")
WHAT_A_RUN_HOLDS = (f"{RUNNING_LOG}, training_args.yaml, {TRAINER_LOG}, {TRAINER_STATE}, checkpoint-N/, "
                    f"or a *.log/*.out/*.err/nohup.out beside a config")


@dataclass
class Run:
    folder: str
    log: Optional[str] = None
    log_why: str = ""
    config: Optional[str] = None
    records: Optional[Records] = None
    checkpoints: List[int] = field(default_factory=list)
    mtime: float = 0.0
    skipped: List[str] = field(default_factory=list)  # entries not opened (links, FIFOs…)
    others: List[str] = field(default_factory=list)   # the folder's other runs, newest first

    def to_json(self):
        r = self.records
        return {"folder": self.folder, "log": self.log, "log_why": self.log_why, "config": self.config,
                "records": r.path if r else None, "records_kind": r.kind if r else None,
                "step": r.step if r else None, "total_steps": r.total if r else None,
                "losses": r.losses if r else 0, "finished": r.finished if r else None,
                "memory_series": r.memory if r else [], "checkpoints": self.checkpoints,
                "skipped": self.skipped, "other_runs": self.others, "line": self.line("en")}

    def line(self, lang="en"):
        """Which files the diagnosis used, in one line."""
        name = lambda p: os.path.relpath(p, self.folder) if p else None  # noqa: E731
        r = self.records
        if lang == "zh":
            parts = [f"日志 {name(self.log)}" if self.log else f"无日志（由 {name(r.path)} 的记录生成进度）",
                     f"配置 {name(self.config)}" if self.config else "未找到配置"]
            if r and r.step is not None:
                parts.append(f"步数记录 {name(r.path)}（第 {r.step}" + (f"/{r.total}" if r.total else "") + " 步）")
            more = f"；另有 {len(self.others)} 次运行（--all 逐个诊断）" if self.others else ""
            return f"运行目录 {self.folder}：" + "，".join(parts) + more
        parts = [f"log {name(self.log)}" + (f" ({self.log_why})" if self.log_why else "") if self.log
                 else f"no log (progress from {name(r.path)})",
                 f"config {name(self.config)}" if self.config else "no config found"]
        if r and r.step is not None:
            parts.append(f"steps {name(r.path)} (step {r.step}" + (f" of {r.total}" if r.total else "") + ")")
        more = f"; {len(self.others)} other run(s) here, --all diagnoses each" if self.others else ""
        return f"Run folder {self.folder}: " + ", ".join(parts) + more


# ---- what a folder holds --------------------------------------------------------------------------
def _entries(folder):
    """{name: (kind, mtime, size)} of a folder's visible entries, by lstat: file, dir or other."""
    out = {}
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name.startswith("."):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"
                out[e.name] = (kind, st.st_mtime, st.st_size)
    except OSError:
        pass
    return out


def _log_like(name):
    return name == RUNNING_LOG or name == "nohup.out" or name.lower().endswith(LOG_SUFFIXES)


def _config_like(name):
    low = name.lower()
    return low.endswith(CONFIG_SUFFIXES) and low not in NOT_CONFIGS and ".bak" not in low


def is_run(folder, entries=None):
    """A run folder, by what it holds (see WHAT_A_RUN_HOLDS)."""
    entries = _entries(folder) if entries is None else entries
    names = set(entries)
    if names & {RUNNING_LOG, TRAINER_LOG, TRAINER_STATE, *TRAINING_ARGS}:
        return True
    if any(_CHECKPOINT.match(n) and k == "dir" for n, (k, _, _) in entries.items()):
        return True
    logs = [n for n, (k, _, _) in entries.items() if _log_like(n) and k != "dir"]
    return 0 < len(logs) <= MAX_WEAK_LOGS and any(_config_like(n) for n in names)


def find_runs(root):
    """Run folders at or below `root` (not through symlinks), newest first."""
    runs, queue, seen = [], [(root, 0)], 0
    while queue and seen < MAX_DIRS:
        folder, depth = queue.pop(0)
        seen += 1
        entries = _entries(folder)
        if is_run(folder, entries):
            runs.append((_newest(folder, entries), folder))
            continue
        if depth < DEPTH:
            queue += [(os.path.join(folder, n), depth + 1) for n in sorted(entries) if entries[n][0] == "dir"]
    # whole seconds, then the name: a fresh checkout writes every file within the same second or two,
    # and LLaMA Board names its runs train_YYYY-MM-DD-HH-MM-SS
    return [f for _, f in sorted(runs, key=lambda r: (int(r[0]), r[1]), reverse=True)]


def _newest(folder, entries):
    """When a run last wrote: its newest entry, or a checkpoint's."""
    times = [m for _, m, _ in entries.values()]
    return max(times) if times else os.lstat(folder).st_mtime


def _tail_has_failure(path, size):
    try:
        fh, _ = open_regular(path)
    except InputError:
        return False
    with fh:
        fh.seek(max(0, size - TAIL))
        tail = fh.read(TAIL)
    return any(s in tail for s in FAILURE)


def _records(folder, entries):
    """The newest per-step records: trainer_log.jsonl, else the trainer_state.json that got furthest."""
    if entries.get(TRAINER_LOG, ("",))[0] == "file":
        rec = trainer_log(os.path.join(folder, TRAINER_LOG))
        if rec is not None:
            return rec
    states = [os.path.join(folder, TRAINER_STATE)] if entries.get(TRAINER_STATE, ("",))[0] == "file" else []
    for n, (k, _, _) in entries.items():
        p = os.path.join(folder, n, TRAINER_STATE)
        if k == "dir" and _CHECKPOINT.match(n) and _is_regular(p):
            states.append(p)
    found = [r for r in (trainer_state(p) for p in states) if r is not None]
    return max(found, key=lambda r: (r.step or 0, r.finished)) if found else None


def _is_regular(path):
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


# ---- one run ---------------------------------------------------------------------------------------
def pick(folder):
    """The log, config and records a run folder holds (a Run; .log None when it has none)."""
    entries = _entries(folder)
    run = Run(folder=folder, mtime=_newest(folder, entries))
    run.skipped = sorted(n for n, (k, _, _) in entries.items() if k == "other")
    run.checkpoints = sorted(int(m.group(1)) for n, (k, _, _) in entries.items()
                             if k == "dir" and (m := _CHECKPOINT.match(n)))
    logs = [(n, m, s) for n, (k, m, s) in entries.items() if k == "file" and s > 0 and _log_like(n)]
    # LLaMA Board's own log first, then the newest; but a log whose end shows a failure beats one
    # that just stops (running_log.txt never holds the traceback: it went to the terminal)
    logs.sort(key=lambda x: (x[0] != RUNNING_LOG, -x[1], x[0]))
    failing = [x for x in logs if _tail_has_failure(os.path.join(folder, x[0]), x[2])]
    if logs:
        chosen = failing[0] if failing else logs[0]
        run.log = os.path.join(folder, chosen[0])
        run.log_why = ("LLaMA Board's log" if chosen[0] == RUNNING_LOG else
                       "the only log" if len(logs) == 1 else
                       "the log that shows the failure" if failing and chosen is not logs[0] else "the newest log")
    run.config = _config(folder, entries)
    run.records = _records(folder, entries)
    return run


def _config(folder, entries):
    """training_args.yaml (what LLaMA Board launched), else the newest file of a known dialect."""
    from .config import load_config
    files = [(n, m) for n, (k, m, _) in entries.items() if k == "file" and _config_like(n)]
    order = sorted(files, key=lambda x: (x[0] not in TRAINING_ARGS, not x[0].endswith((".yaml", ".yml")),
                                         x[0].endswith(".json"), -x[1], x[0]))
    for name, _ in order:
        path = os.path.join(folder, name)
        try:
            if load_config(path).dialect != "unknown":
                return path
        except InputError:
            continue                          # not a config, or one it cannot read: the next one
    return None


def open_log(run):
    """(display name, binary stream) of the run's log, or of a log made of its records."""
    if run.log:
        from .reader import Snapshot
        fh, size = open_regular(run.log)
        return run.log, Snapshot(fh, size)
    if run.records is None:
        raise InputError(f"{run.folder}: a run folder with no log: looked for {LOOKED_FOR}")
    import io
    from .runrecords import records_text
    return f"{run.records.path} ({run.records.kind})", io.BytesIO(records_text(run.records).encode("utf-8"))
