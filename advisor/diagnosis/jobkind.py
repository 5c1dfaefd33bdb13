"""What kind of job failed (data/jobkinds.yaml): training, evaluation, prediction, serving,
offline generation, an RL rollout, saving or loading. The plan follows the kind: a vLLM server
gets its engine's moves and never a training batch.

Strongest first: the failing frames, the launch command, the log's own lines, the config; a
training job then takes its kind from the phase (a failure while loading or saving).
"""

import functools
import re

from ..evidence.anchors import compiled, gated
from ..read.dialects import MISSING, get_path

KINDS = ("training", "evaluation", "prediction", "serving", "offline_generation", "rl_rollout", "saving", "loading")
ENGINE_KINDS = ("serving", "offline_generation")      # an inference engine runs the whole job
_TRAINING_PHASES = ("first_step", "mid_training")


def no_training_estimate(diagnosis):
    """A job no training step ran in: an engine's failure, or a prediction-only run (weights, a KV
    cache and generated logits, no gradients or optimizer states). The training estimate is not its budget."""
    return engine_failed(diagnosis) or diagnosis.facts.get("job_kind") == "prediction"


def engine_run(diagnosis):
    """A server or offline generation that the engine's own frames, command, lines or config show
    (not a phase read as inference, which may be any script calling generate())."""
    return diagnosis.facts.get("job_kind") in ENGINE_KINDS and (diagnosis.basis or {}).get("job_kind") != "phase"


def engine_failed(diagnosis):
    """The failure is an inference engine's own: a server, offline generation, or an RL job's
    rollout engine as its failing frames show. The training estimate does not describe it."""
    job = diagnosis.facts.get("job_kind")
    return engine_run(diagnosis) or job == "rl_rollout" and (diagnosis.basis or {}).get("job_kind") == "frames"


def _table():
    from ..core.snapshot import snapshot
    return snapshot()["jobkinds"]


def _from_frames(frames):
    """The first entry (the table's order is its precedence: an RL rollout runs vLLM's frames too)
    that any frame of the failing traceback matches."""
    hits = [i for i in (_first_entry(f.path.replace("\\", "/"), f.func) for f in frames or ()) if i is not None]
    return _table()["frames"][min(hits)]["kind"] if hits else None


@functools.lru_cache(maxsize=4096)
def _first_entry(path, func):
    """The index of the first frame entry one frame matches: the same frames recur across reports."""
    for i, e in enumerate(_table()["frames"]):
        if compiled(e["path"]).search(path) and compiled(e["func"]).fullmatch(func):
            return i
    return None


def _from_text(entries, text):
    for e in entries:
        if text and gated(e["pattern"]).search(text):      # a window's whole text: literals first
            return e
    return None


def _from_config(config):
    if config is None:
        return None
    data = config.data if isinstance(config.data, dict) else {}
    for e in _table()["config"]:
        held = all(_truthy(get_path(data, k)) == bool(v) for k, v in e["set"].items())
        barred = any(_truthy(get_path(data, k)) == bool(v) for k, v in (e.get("unless") or {}).items())
        if held and not barred:
            return e
    kind = _table()["dialects"].get(config.dialect)
    return {"kind": kind, "rl": kind == "rl_rollout"} if kind else None


def _truthy(v):
    """A key that is set to something: true, a number other than 0, a path, a name."""
    if v is None or v is MISSING or isinstance(v, bool):
        return v is True
    return str(v).strip().lower() not in ("false", "0", "no", "none", "null", "")


def decide(frames, lines, command, config, phase):
    """(kind, basis): the job's kind and in a few words what decided it."""
    seen = _from_frames(frames)
    if seen in ("rl_rollout", "serving"):
        return seen, "frames"
    job = _from_text(_table()["commands"], command or "") or _from_text(
        _table()["commands"], config.text if config is not None and config.command is not None else "")
    basis = "launch command"
    if job is None:
        job, basis = _from_config(config), "config"
    if job is None:
        text = "\n".join(lines or ())
        job, basis = _from_text(_table()["lines"], text), "log lines"
    kind = job["kind"] if job else None
    if seen == "offline_generation":       # the engine's frames: a server when the command or lines say so
        return ("serving", basis) if kind == "serving" else (seen, "frames")
    if kind in ENGINE_KINDS and basis == "log lines" and phase in _TRAINING_PHASES and frames:
        kind = None         # an engine's lines beside a training step's frames: a trainer's own generator
    if kind in ENGINE_KINDS:
        return kind, basis
    if job and job.get("rl"):
        # the actor's update is training; anything else in an RL job runs beside its rollout engine
        return ("training", "phase") if phase in _TRAINING_PHASES and frames else ("rl_rollout", basis)
    if seen == "prediction" or kind == "prediction":
        return ("prediction", "frames" if seen else basis) if phase not in ("load", "checkpoint_save") else \
            (_table()["phases"][phase], "phase")
    if kind == "saving":
        return kind, basis
    return _table()["phases"].get(phase, "training"), "phase"


# what an engine prints of its own settings: vLLM's `args: Namespace(max_num_seqs=256, ...)` and
# `Initializing a V1 LLM engine ... with config: ... enforce_eager=False`, its warm-up error's
# "with 256 dummy requests" (vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run, 0.8.5-0.11)
_SETTING = re.compile(r"\b(max_num_seqs|gpu_memory_utilization|max_model_len|tensor_parallel_size|enforce_eager"
                      r"|kv_cache_dtype)=([\w.]+)")
_DUMMY = re.compile(r"warming up sampler with (\d+) dummy requests")


def engine_settings(lines):
    """{setting: value} from the engine's own lines (the last print wins); {} when it printed none."""
    out = {}
    for text in lines:
        for name, value in _SETTING.findall(text):
            out[name] = _value(value)
        m = _DUMMY.search(text)
        if m and "max_num_seqs" not in out:
            out["max_num_seqs"] = int(m.group(1))
    return out


def _value(v):
    if v in ("True", "False"):
        return v == "True"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v
