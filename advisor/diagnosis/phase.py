"""When did it fail: the phase, from the most trusted evidence the log holds, with what decided it.

The ladder, most trusted first:
  1. the failing traceback's frames, innermost first (data/frames.yaml): `prediction_step` under
     `_inner_training_loop` is an evaluation, a module `to()` under `accelerator.prepare` is setup;
     `generate` only counts when no outer frame says evaluation or training;
  2. what a cut trace still quotes: the call on the innermost frame's source line, or a source
     line whose `File` header was lost (`value.to(device)`, autograd's `run_backward`);
  3. the last phase marker or progress before the failure (loading bars, data-preparation bars,
     the trainer banner, steps, evaluation and save banners);
  4. the allocator: a process whose PyTorch held next to nothing had not even placed its weights;
     the model: weights that alone, at 16 bits, exceed the whole card were never all placed;
  5. the job: an entry script named for inference or evaluation (`run_inference.py`).
When nothing decides, the phase is `unknown`. A frame that only says "a training step" leaves
first step or mid-training to the progress.
"""

import re

from ..evidence.frames import read_call, read_frame

_FORWARD = re.compile(r"(?<!\w)modeling_\w+\.py$|/peft/|torch/autograd/|torch/utils/checkpoint\.py$")
_FETCHING = re.compile(r"torch/utils/data/")       # a DataLoader handing out batches: some loop consumes them
_CALL = re.compile(r"(\w+)\(")                     # the first call on a source line
QUOTE_LINES = 8         # lines above the error that a cut paste may have left of its trace


def _marker_basis(marker):
    return f"marker line {marker.line}: {marker.text.strip()[:80]}"


_CLOCK = re.compile(r"(?<!\d)(?:(\d{4})[-/])?(\d\d)[-/](\d\d)[ T](\d\d):(\d\d):(\d\d)")
LONG_AFTER_START_S = 600    # no first step takes ten minutes: a failure that long after the start is mid-training


def _seconds(text):
    """Seconds since an arbitrary epoch from a line's `[YYYY-]MM-DD HH:MM:SS` stamp, or None."""
    m = _CLOCK.search(text or "")
    if not m:
        return None
    _, month, day, h, mi, sec = (int(g) if g else 0 for g in m.groups())
    return ((month * 31 + day) * 24 + h) * 3600 + mi * 60 + sec


def training_phase(context, failed_at=""):
    """(first_step | mid_training | unknown, basis) from the progress the run had made."""
    if context.step is not None:
        first = context.step <= 1 and context.losses_logged == 0
        return ("first_step" if first else "mid_training"), f"progress: step {context.step}"
    if context.losses_logged:
        return "mid_training", f"progress: {context.losses_logged} losses logged"
    marker = context.last_marker
    if marker is not None and marker.kind == "train_start":
        start, end = _seconds(marker.text), _seconds(failed_at)
        if start is not None and end is not None and end - start >= LONG_AFTER_START_S:
            return "mid_training", f"timestamps: {(end - start) // 60} min after training began"
        return "first_step", _marker_basis(marker)
    return "unknown", ""


def phase_from_markers(context, failed_at=""):
    marker = context.last_marker
    if context.in_eval:
        return "evaluation", _marker_basis(marker) if marker is not None else "an evaluation bar"
    if marker is None:                      # no phase line, but a training bar or loss said how far
        return training_phase(context)
    if marker.kind in ("train_start", "step", "eval_done"):
        return training_phase(context, failed_at)
    if marker.kind in ("load", "load_done", "setup", "prep") and marker.step is None and context.step is not None:
        # no training step before the loading, one drawn after it (tqdm shows its bar as the
        # exception unwinds): the loop had begun
        return training_phase(context, failed_at)
    phase = {"load": "load", "load_done": "load", "setup": "load", "prep": "load", "eval_start": "evaluation",
             "save": "checkpoint_save", "predict": "evaluation", "inference": "inference",
             # what follows the last step, unless an evaluation begins
             "train_done": "checkpoint_save"}.get(marker.kind, "unknown")
    return phase, _marker_basis(marker)


def _from_reading(reading, context, basis):
    """A frame's or call's phase, with training steps told apart by the progress."""
    phase = reading.phase
    if phase == "train":
        step, why = training_phase(context)
        return step, basis + (f"; {why}" if why else "")
    if phase == "first_step" and context.step is not None and context.step > 1:
        return "mid_training", basis + f"; progress: step {context.step}"
    return phase, basis


def from_frames(frames):
    """The innermost frame that names a phase, as a Reading (a weak one only when none is strong)."""
    weak = None
    for frame in reversed(frames):
        r = read_frame(frame)
        if r is None or r.phase in (None, "skip"):
            continue
        if not r.weak:
            return r
        weak = weak or r
    return weak


def quoted_call(frames, quoted):
    """What the innermost frame's source line calls (a trace cut there still says what ran:
    `model = load_model(...)`), else a quoted source line above the error."""
    if frames:
        inner = frames[-1]
        r = read_call(inner.source)
        if r is not None:
            return r
        m = _CALL.search(inner.source)
        r = read_frame(inner.model_copy(update={"func": m.group(1), "source": ""})) if m else None
        if r is not None and r.phase not in (None, "skip"):
            return r
    for text in reversed(quoted or []):
        r = read_call(text)
        if r is not None:
            return r
    return None


# words in an entry script's name that say what the whole job does (`bloom-ds-zero-inference.py`)
_JOB_WORDS = {"inference": "inference", "infer": "inference", "generate": "inference", "generation": "inference",
              "serve": "inference", "server": "inference", "chat": "inference", "webui": "inference",
              "demo": "inference", "eval": "evaluation", "evaluate": "evaluation", "evaluation": "evaluation",
              "predict": "evaluation"}


def job_of_script(script):
    """The phase a whole job is in, from its entry script's name, or None."""
    if not script:
        return None
    words = re.split(r"[-_.\d]+", script.rsplit("/", 1)[-1].lower())
    if any(w in ("train", "finetune", "sft", "dpo", "ppo", "grpo", "pretrain", "training") for w in words):
        return None                         # a training job: its progress decides
    return next((_JOB_WORDS[w] for w in words if w in _JOB_WORDS), None)


def infer_phase(frames, context, memory=None, quoted=(), script=None, failed_at="", facts=None):
    """(phase, basis): `basis` says in a few words what decided it ('' when nothing did).
    `failed_at` is the failing line (its timestamp, if any, against the markers'); `facts`, what
    the log and the config say the run was."""
    phase, basis = _phase_of(frames, context, quoted, failed_at)
    held = (memory or {}).get("allocated_by_pytorch_gib")
    if phase == "unknown" and held is not None and held < 0.05:
        return "load", f"allocator: PyTorch held {held:.2f} GiB, not even the weights"
    beyond = weights_beyond_card(facts, memory) if phase == "unknown" and facts is not None else None
    if beyond:
        bits = 32 if facts.precision == "fp32" else 16
        return "load", f"model: its weights alone ({beyond[0]:.1f} GiB at {bits} bits) exceed the {beyond[1]:.1f} GiB card"
    if phase == "unknown":
        outer = next((f.path for f in frames if f.func == "<module>"), None)
        for name in (outer, script):
            job = job_of_script(name)
            if job:
                return job, f"entry script {name.rsplit('/', 1)[-1]}"
        doing = activity_of(failed_at)
        if doing:
            return doing
    return phase, basis


# a model name that says its weights are stored in fewer than 16 bits
_LOW_BIT_NAME = re.compile(r"awq|gptq|int[48]|[48]-?bit|bnb|nf4|gguf|fp8|exl2|quant", re.I)


def weights_beyond_card(facts, memory):
    """(weights GiB, card GiB) when the model's weights alone, at 16 bits a parameter (32 in fp32),
    exceed the whole card of a run that holds them on one card (no quantisation, sharding or second
    GPU stated or seen: a failing GPU 1 has a GPU 0 beside it); else None. Every phase after loading
    needs them all in place, so such a run failed while loading."""
    memory = memory or {}
    total = memory.get("total_gib")
    if not total or not facts.model and not facts.params_b or facts.quantization_bit \
            or (facts.num_gpus or 1) > 1 or (memory.get("device_index") or 0) > 0 \
            or len(memory.get("devices_seen") or ()) > 1 or str(facts.deepspeed or "").startswith("zero3") \
            or _LOW_BIT_NAME.search(facts.model or ""):
        return None
    from ..memory.catalog import find_model
    shape = find_model(facts.model)[0] if facts.model else None
    params_b = shape.params_b if shape is not None else facts.params_b
    weights = params_b * 1e9 * (4 if facts.precision == "fp32" else 2) / 2 ** 30 if params_b else 0
    return (weights, total) if weights > 1.05 * total else None


# A program that catches the error often logs what it was doing before the message it caught:
# "Error while evaluating X: CUDA out of memory", "failed during saving: ...". Only the words
# before the out-of-memory phrase count (the message's own text never says what ran).
_ACTIVITY = re.compile(r"\b(?:error|failed|failure|exception|crash(?:ed)?)\b[^:\n]{0,40}?\b(?:while|during|when|in)\s+"
                       r"(?:the\s+)?(evaluat|validat|predict|sav|load|generat|infer|decod)\w*", re.I)
_OOM_PHRASE = re.compile(r"out of (?:device )?memory|OutOfMemoryError", re.I)
_ACTIVITY_PHASE = {"evaluat": "evaluation", "validat": "evaluation", "predict": "evaluation",
                   "sav": "checkpoint_save", "load": "load", "generat": "inference", "infer": "inference",
                   "decod": "inference"}


def activity_of(line):
    """(phase, basis) from what the failing line says ran before the error it reports, or None."""
    if not line:
        return None
    cut = _OOM_PHRASE.search(line)
    m = _ACTIVITY.search(line[:cut.start()] if cut else "")
    if not m:
        return None
    word = m.group(1).lower()
    return _ACTIVITY_PHASE[word], f"the failing line says it was {m.group(0).split()[-1].lower()}"


def _phase_of(frames, context, quoted, failed_at):
    r = from_frames(frames)
    if r is not None and r.phase and r.weak:
        # a function's name is a guess; the statement that failed inside the innermost frame (what it
        # calls: `pipe.to(device)`, `self._init_workers()`) is the more specific one
        call = quoted_call(frames[-1:], ())
        if call is not None and call.phase not in (None, "skip") and not call.weak:
            return _from_reading(call, context, f"quoted call {call.what}")
    if r is not None and r.phase:
        return _from_reading(r, context, f"frame {r.what}")
    call = quoted_call(frames, quoted)
    if call is not None and call.phase:
        return _from_reading(call, context, f"quoted call {call.what}")
    by_markers, basis = phase_from_markers(context, failed_at)
    if by_markers in ("load", "unknown"):
        # a forward or backward pass is running, or batches are being fetched, so loading is over
        for rx, running in ((_FORWARD, "forward/backward frames"), (_FETCHING, "DataLoader frames")):
            if any(rx.search(f.path) for f in frames):
                step, why = training_phase(context)
                if step == "unknown" and by_markers == "load":
                    return "first_step", f"{running} after loading"
                return step, why
    return by_markers, basis
