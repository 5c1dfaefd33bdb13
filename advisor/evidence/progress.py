"""Progress and phase markers: how far a run got (training bars, loss lines, logged dicts) and which
phase it was in (loading, setup, training, evaluation, saving), from the phrases in phrases.py."""

from collections import deque

from .phrases import (BAR, BAR_CUT, BAR_LIGHT, BAR_NOTEBOOK, DICT, EVAL_START, KERAS_BAR, LOAD_LINE, LOSS_LINE,
                      PREP_UNIT, PREP_WORDS, SAVE_LINE, SETUP_LINE, TENSOR_NAME, TRAIN_START, plain_bar, to_int)
from .timeline import Context, Marker

MAX_MARKERS = 400


class Progress:
    """Where the run stands as its lines go by: the training bar's step of how many, losses logged,
    whether an evaluation is running and how far, and the phase markers in log order."""

    def __init__(self, timeline):
        self.t = timeline
        self.markers = deque(maxlen=MAX_MARKERS)
        self.step = None
        self.total = None
        self.losses = 0
        self.in_eval = False
        self.last_phase_marker = None
        self.train_total = None
        self.eval_progress = (None, None)
        self.failing = False            # the final failure's first signal has been seen (parser.py)
        self.since_failure = 0          # progress since then: enough of it means the run got past it

    def context(self):
        """The state of the run now, kept when the final failure begins."""
        return Context(last_marker=self.last_phase_marker.model_copy() if self.last_phase_marker else None,
                       step=self.step, total_steps=self.total or self.train_total, losses_logged=self.losses,
                       in_eval=self.in_eval, eval_step=self.eval_progress[0], eval_total=self.eval_progress[1])

    def on_progress(self, line, text):
        if "%" in text and "|" in text or "/" in text and "%" in text:
            m = BAR.search(text) or BAR_LIGHT.search(text) or BAR_CUT.match(text) or plain_bar(text)
            if m:
                self._bar(line, m)
        elif "Epoch" in text and "[" in text:
            m = BAR_NOTEBOOK.search(text)
            if m:
                self._bar(line, m)
        if "oss" in text and "{'" not in text:
            m = LOSS_LINE.search(text)
            if m:
                self._loss_line(line, m)
            elif "] - " in text:
                m = KERAS_BAR.search(text)
                if m:
                    self._keras_bar(line, m)
        if "{'" in text:
            m = DICT.search(text)
            if m:
                key = m.group(1)
                if key == "loss":
                    self.losses += 1
                    self._advance(line)
                elif key in ("eval_loss", "eval_runtime"):
                    self.in_eval = False
                    self._mark("eval_done", line)
                elif key == "train_runtime":
                    self._mark("train_done", line)

    def _bar(self, line, m):
        desc = (m.group("desc") or "").strip()
        n, total = to_int(m.group("n") or "0"), to_int(m.group("total") or "x")
        if not m.group("n") and m.group("pct") != "0":
            n, total = int(m.group("pct")), 100       # no counts: p % of the steps are done
        low = desc.lower()
        if "load" in low and ("shard" in low or "weight" in low or "checkpoint" in low) \
                or "." in desc and TENSOR_NAME.search(desc):
            self._mark("load", line)
            return
        if any(w in low for w in ("valid", "test", "eval", "predict", "generat")):
            self._enter_eval(line)
            self.eval_progress = (n, total)
            return
        if desc and any(w in low for w in PREP_WORDS) or PREP_UNIT.search(line.text):
            # data preparation: before the first step it is where the run stands (loading, in the
            # course's terms), after it an evaluation's or a save's own data
            if self.step is None and not self.losses and self.train_total is None:
                self._mark("prep", line)
            return
        if self.in_eval and (self.train_total is None or total != self.train_total):
            self.eval_progress = (n, total)           # the eval bar has no description either
            return
        if self.train_total is None or not desc:
            self.train_total = self.train_total or total
        prev = self.step
        self.step, self.total = n, total
        if self.failing and self.t.context.step is None:
            # tqdm redraws its bar as the exception unwinds: the first bar after the failure
            # still tells how far training had got when it failed
            self.t.context.step, self.t.context.total_steps = n, total
        if prev is None or (n is not None and n > prev):
            if n:
                self._advance(line)

    def _keras_bar(self, line, m):
        """Keras's bar counts this epoch's batches, each a step done with its loss."""
        n = to_int(m.group("n"))
        if self.step is None or n > self.step or n == 1:
            self.step = n
        self.losses += 1
        self._advance(line)

    def _loss_line(self, line, m):
        """A loop's loss line: with a step counter, the steps done; "Epoch 2/3 … loss" counts epochs, and
        only a second epoch says more than that a loss was logged."""
        if m.group("n") is not None or m.group("unit") not in ("Epoch", "epoch"):
            done = to_int(m.group("n") or m.group("of"))
        elif m.group("epoch") is not None:          # "Epoch: [e][i/N]": batch i of epoch e
            done = to_int(m.group("of")) if to_int(m.group("epoch")) <= 1 else max(2, to_int(m.group("of")))
        else:
            done = None if to_int(m.group("of")) <= 1 else 2
        if done is None:
            self.losses += 1
        else:
            self.step = done
        context = self.t.context
        if self.failing and context.step is None and not context.losses_logged:
            # stdout's buffered progress lands after stderr's traceback: it still says how far the run got
            context.step, context.losses_logged = done, int(done is None)
        self._advance(line)

    def _advance(self, line):
        if self.failing:
            self.since_failure += 1
        self.in_eval = False
        m = self.last_phase_marker
        if m is None or m.kind != "step":
            self._mark("step", line)
        else:
            m.line, m.step, m.text = line.no, self.step, line.text[:300]

    def _enter_eval(self, line):
        if not self.in_eval:
            self.in_eval = True
            self.eval_progress = (None, None)
            self._mark("eval_start", line)

    def _mark(self, kind, line):
        m = Marker(kind=kind, line=line.no, text=line.text[:300], step=self.step)
        if self.markers and self.markers[-1].kind == kind and kind in ("load", "prep"):
            self.markers[-1] = m
        else:
            self.markers.append(m)
        self.last_phase_marker = m

    def on_marker(self, line, text):
        if "*****" in text:
            if "Running training" in text:
                self.in_eval = False
                self._mark("train_start", line)
            elif "Running Evaluation" in text or "Running Prediction" in text:
                self.in_eval = False
                self._enter_eval(line)
            elif "train metrics" in text:
                self._mark("train_done", line)
            return
        if "aving" in text or "saved" in text or "Failed to clone" in text:
            if SAVE_LINE.search(text):
                self._mark("save", line)
                return
        if "oad" in text or "nstantiating" in text or "uantizing" in text or "zero.init" in text or "-of-0" in text:
            if LOAD_LINE.search(text) and "%|" not in text and "saved" not in text and "aving" not in text:
                self._mark("load", line)     # (a shard's name in a save line is the save's)
                return
        if "trainable params" in text or "model checkpoint weights were used" in text or "after model load" in text \
                or "Gradient checkpointing enabled" in text or "Fine-tuning method" in text:
            self._mark("load_done", line)
            return
        if ("DeepSpeed" in text or "ZeRO" in text or "optimizer states" in text or "__init__]" in text
                or "model parallel" in text or "environment is initialized" in text) \
                and SETUP_LINE.search(text):     # the engine being built
            self._mark("setup", line)
            return
        if "Starting trainer" in text or "Unsloth - 2x faster" in text \
                or ("raining" in text or "use_cache" in text) and TRAIN_START.search(text):
            self._mark("train_start", line)
            return
        if "Training completed" in text:
            self._mark("train_done", line)
        elif "Saving prediction results" in text or "Batch generation can be very slow" in text:
            self._mark("predict", line)
        elif ("eval" in text or "alidation" in text or "testing" in text) and EVAL_START.search(text):
            self._enter_eval(line)
