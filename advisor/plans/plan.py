"""Plan: from a diagnosis to an ordered list of concrete changes, each checked against the budget.

The decisive rule names the first moves (its `actions`, DESIGN §6); this module turns each into
keys of the user's own config dialect, drops moves already in effect (LLaMA-Factory checkpoints by
default; bf16 already set; batch already 1), picks fp16 over bf16 on cards without native bf16,
and walks the ladder until the estimated peak fits with the course's 20 % margin. Then at most
two alternatives. The learning rate is never a move: it does not change memory.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..memory.budget import MARGIN, RESERVE_GIB, total_gib
from ..read import dialects as D
from .planwords import display_text, why_text
from ..core.record import Record
from .runspec import zero_of
from .compat import brings, excluded, held
from ..diagnosis.jobkind import ENGINE_KINDS, engine_failed, engine_run

SAFE, UNSAFE, DISPLAY = "safe", "unsafe", "display"
PHASE_LADDER = {"load": "OOM101", "first_step": "OOM201", "mid_training": "OOM204", "evaluation": "OOM404",
                "checkpoint_save": "OOM410", "inference": "OOM201", "unknown": "OOM200"}
COMPONENT_LADDER = {"optimizer_states": "OOM301", "gradients": "OOM310", "eval_outputs": "OOM401",
                    "weights": "OOM101"}


@dataclass
class Step(Record):
    action: str
    changes: Dict[str, list] = field(default_factory=dict)
    display: str = ""
    why: str = ""
    saves_gib: Optional[float] = None
    fits_after: Optional[bool] = None
    applicability: str = SAFE
    alternative: bool = False


def several_gpus(diagnosis):
    """Several GPUs: stated, or implied by a device index above 0, by distinct devices across the
    messages, by [rankN]: prefixes (the distributed excepthook), by a DeepSpeed config, or by DDP's
    own frames in the evidence."""
    f, mem = diagnosis.facts, diagnosis.memory or {}
    return bool((f.get("num_gpus") or 1) > 1 or (mem.get("device_index") or 0) >= 1
                or len(mem.get("devices_seen") or ()) > 1
                or diagnosis.ranks or str(f.get("deepspeed") or "").startswith("zero")
                or any("nn/parallel/distributed.py" in e.text for e in diagnosis.evidence))


class Context:
    """What the builders read: the run as estimated, the user's file, the card, the allocator."""

    def __init__(self, diagnosis, spec, config, lang):
        self.d, self.spec, self.config, self.lang = diagnosis, spec, config, lang
        f = diagnosis.facts
        self.facts = f
        # a file of no known dialect gets words, not keys; with no file, the log's framework names
        # the keys of the snippet, and a log that names no framework (a plain loop, a research
        # script) gets words too: never a Trainer key the run may not have
        # an engine's moves need the engine's own evidence: a phase read as inference may be any
        # script calling generate(), which has no max_num_seqs to lower
        self.job = f.get("job_kind") or "training"
        # a generation or prediction with no engine's own evidence: its keys are the script's, its
        # moves never a training knob (generation_only)
        self.generation = self.job in ENGINE_KINDS and not engine_run(diagnosis)
        if self.generation:
            self.job = "training"
        self.engine = f.get("engine") or {}       # the engine's settings as its log printed them
        self.dialect = config.dialect if config is not None else \
            "vllm" if self.job in ENGINE_KINDS else \
            {"llamafactory": "llamafactory", "axolotl": "axolotl", "trl": "trl", "ms-swift": "ms_swift",
             "verl": "verl"}.get(f.get("framework"), "hf" if f.get("framework") else UNKNOWN_DIALECT)
        self.multi_gpu = several_gpus(diagnosis)
        # an RL job whose failing frames are its rollout engine's: the engine's batch, not the actor's
        self.rollout_failed = self.job == "rl_rollout" and engine_failed(diagnosis)
        self.engine_job = self.job in ENGINE_KINDS or self.rollout_failed     # moves in the engine's own words
        self.data = config.data if config is not None else {}
        self.gap = 0.0       # GiB the allocator saw beyond the estimate: added to every what-if

    def key(self, knob):
        """The knob's key in the user's dialect (the file's own spelling), or None: then words."""
        if self.dialect == D.UNKNOWN:
            return None
        return self.config.key(knob) if self.config is not None else D.key_for(self.dialect, knob, {})

    def old(self, knob, fallback=None):
        """The knob's current value: the file's; else the framework's default, marked `unset (default X)`;
        with no file, what the log showed (`fallback`). Never a guess presented as the file's."""
        key = self.key(knob)
        if self.config is not None and key and self.config.has(key):
            return self.config.value(key)
        if (self.config is None or self.config.from_log is not None) and fallback is not None:
            return fallback                   # no file to quote: what the log showed ran
        return D.unset(self.dialect, knob)

    def change(self, knob, new, fallback=None):
        """{key: [old, new]} setting `knob` to `new` (True = on) in the dialect's own spelling, plus the
        keys that go with it; {} when the dialect has no key for it, or the file lacks the key and
        the framework's default already is `new` (writing it would change nothing)."""
        key = self.key(knob)
        if not key:
            return {}
        value = D.file_value(self.dialect, knob, new)
        from_log = self.config is None or self.config.from_log is not None
        in_file = (self.config is not None and self.config.has(key)) or (from_log and fallback is not None)
        default = D.default_of(self.dialect, knob)
        if not in_file and default == value and type(default) is type(value):
            return {}
        out = {key: [self.old(knob, fallback), value]}
        for extra, v in ((D.knob(self.dialect, knob) or {}).get("with") or {}).items():
            has = self.config is not None and self.config.has(extra)
            out[extra] = [self.config.value(extra) if has else "unset", v]
        return out

    def on_value(self, knob, fallback):
        return (D.knob(self.dialect, knob) or {}).get("on", fallback)


# ---- one builder per action: (changes, spec update, applicability) or None when it cannot help ----
def _reduce_batch(c, s):
    if c.job in ENGINE_KINDS or c.job == "rl_rollout" and c.rollout_failed and D.knob(c.dialect, "max_num_seqs"):
        return _engine_batch(c, s)
    if not c.facts.get("batch"):
        return {}, {}, DISPLAY                    # batch never stated: say what to do, not which number
    b = s.batch if s else c.facts["batch"]
    if b <= 1:
        return None
    g = c.facts.get("grad_accum") or 1
    nb = max(1, b // 2)
    if s is not None:
        while nb > 1 and not _fits(c, s.model_copy(update={"batch": nb})):
            nb //= 2
    ng = g * b // nb
    ch = c.change("batch", nb, fallback=b)
    if ch:                                        # accumulation keeps the effective batch of that change
        ch.update(c.change("grad_accum", ng, fallback=g))
    return ch, {"batch": nb}, SAFE


def _engine_batch(c, s):
    """An engine's batch is how many sequences it runs at once (vLLM warms its sampler up with
    that many dummy requests): halved, results unchanged, throughput lower."""
    key = c.key("max_num_seqs")
    seqs = c.config.value(key) if c.config is not None and key and c.config.has(key) else c.engine.get("max_num_seqs")
    fallback = seqs
    if not isinstance(seqs, int) or isinstance(seqs, bool):
        seqs, fallback = D.default_of(c.dialect, "max_num_seqs"), None      # the engine ran with its default
        if not isinstance(seqs, int):
            return {}, {}, DISPLAY
    if seqs <= 1:
        return None
    return c.change("max_num_seqs", max(1, seqs // 2), fallback=fallback), {}, SAFE


# how far the engine's share of the card comes down: a server's warm-up needs a little more room
# outside its share; a rollout engine shares the card with the actor, which needs much more
SHARE_STEP = {"serving": 0.05, "offline_generation": 0.05, "rl_rollout": 0.1}


def _engine_memory_share(c, s):
    key = c.key("gpu_memory_utilization")
    if not key:
        return {}, {}, DISPLAY
    now = c.config.value(key) if c.config is not None and c.config.has(key) else c.engine.get("gpu_memory_utilization")
    fallback = now
    if not isinstance(now, (int, float)) or isinstance(now, bool):
        if c.config is None:                      # no file and the log never said: lower it, by hand
            return {}, {}, DISPLAY
        now, fallback = D.default_of(c.dialect, "gpu_memory_utilization"), None
    if not isinstance(now, (int, float)) or now <= 0.2:
        return ({}, {}, DISPLAY) if now is D.MISSING else None
    new = round(max(0.2, now - SHARE_STEP.get(c.job, 0.05)), 2)
    return c.change("gpu_memory_utilization", new, fallback=fallback), {}, SAFE


def _enforce_eager(c, s):
    on = c.config.value(c.key("enforce_eager")) if c.config is not None and c.key("enforce_eager") and \
        c.config.has(c.key("enforce_eager")) else c.engine.get("enforce_eager")
    if on is True:
        return None
    return c.change("enforce_eager", True, fallback=on), {}, SAFE


def _kv_cache_fp8(c, s):
    if str(c.engine.get("kv_cache_dtype") or "").startswith("fp8"):
        return None
    return c.change("kv_cache_dtype", True, fallback=c.engine.get("kv_cache_dtype")), {}, UNSAFE


def _tensor_parallel(c, s):
    tp = c.engine.get("tensor_parallel_size")
    key = c.key("tensor_parallel")
    if c.config is not None and key and c.config.has(key):
        tp = c.config.value(key)
    if not isinstance(tp, int) or not c.multi_gpu:
        return {}, {}, DISPLAY
    return c.change("tensor_parallel", tp * 2, fallback=tp), {}, SAFE


def _generation_len(c, s):
    key = c.key("generation_len")
    if not key or c.config is None or not c.config.has(key):
        return {}, {}, DISPLAY
    n = c.config.value(key)
    if not isinstance(n, int) or n <= 64:
        return None
    return c.change("generation_len", n // 2), {}, UNSAFE


def _grad_checkpointing(c, s):
    on = s.grad_ckpt if s else c.facts.get("grad_ckpt")
    if on:
        return None
    return c.change("grad_ckpt", True, fallback=c.facts.get("grad_ckpt")), {"grad_ckpt": True}, SAFE


def _reduce_seq_len(c, s):
    if c.job in ENGINE_KINDS:                     # the engine's longest request: longer ones are refused
        seq = c.engine.get("max_model_len") or c.facts.get("seq_len")
        if not isinstance(seq, int) or seq <= 2048:
            return None if isinstance(seq, int) else ({}, {}, DISPLAY)
        return c.change("max_model_len", seq // 2, fallback=seq), {}, UNSAFE
    seq = s.seq if s else c.facts.get("seq_len")
    if not seq:
        return {}, {}, DISPLAY                    # length never stated: say what to do, not which number
    if seq <= 256:
        return None
    new = max(256, seq // 2)
    if s is not None:
        while new > 512 and not _fits(c, s.model_copy(update={"seq": new})):
            new //= 2
    return c.change("seq_len", new, fallback=seq), {"seq": new}, UNSAFE


def _precision(c, s):
    prec = s.precision if s else c.facts.get("precision")
    native = s.bf16_native if s else _card_has_bf16(c)
    if c.job in ENGINE_KINDS and prec != "fp32":
        return None                               # an engine loads in the model's own 16-bit dtype unless told
    if prec == "fp32" or prec is None:
        new = "bf16" if native is not False else "fp16"
        # serving in 16 bits is what an engine does unless told otherwise (vLLM's dtype auto)
        return c.change(new, True), {"precision": new}, SAFE if c.job in ENGINE_KINDS else UNSAFE
    if prec == "bf16" and c.dialect == "llamafactory" and s is not None and s.method == "full" and native:
        return c.change("pure_bf16", True), {"precision": "pure_bf16"}, UNSAFE
    return None


def _card_has_bf16(c):
    from .runspec import card_of
    card = card_of(c.d)
    return card.bf16 if card is not None else None


def _quantize(c, s):
    method = s.method if s else c.facts.get("method")
    bits = s.quant_bits if s else c.facts.get("quantization_bit")
    if bits == 4 or method == "qlora":
        return None
    ch = c.change("quantize", True)
    if ch and c.dialect == "axolotl" and c.data.get("load_in_8bit"):
        ch["load_in_8bit"] = [True, False]
    elif ch and "with" not in (D.knob(c.dialect, "quantize") or {}) and method in ("full", "freeze"):
        ch.update(c.change("lora", True, fallback=method))   # quantised weights train through an adapter
    return ch, {"method": "qlora", "quant_bits": 4}, UNSAFE


def _use_lora(c, s):
    method = s.method if s else c.facts.get("method")
    if method not in ("full", "freeze"):
        return None
    return c.change("lora", True, fallback=method), {"method": "lora"}, UNSAFE


def _optimizer_8bit(c, s):
    method = s.method if s else c.facts.get("method")
    optim = str((s.optim if s else c.facts.get("optim")) or "")
    if method not in (None, "full", "freeze") or "8bit" in optim:
        return None
    new = c.on_value("optim", "paged_adamw_8bit")
    return c.change("optim", True, fallback=optim or None), {"optim": new}, UNSAFE


def _ds_change(c, stage, offload=False):
    """ZeRO `stage` (with CPU offload) in the dialect's terms: a trainer's `deepspeed` file (its
    shipped example name), a DeepSpeed JSON's own keys, or an RL trainer's offload switches."""
    path = (D.table().get(c.dialect) or {}).get("ds_path")
    if path and c.key("deepspeed"):
        return c.change("deepspeed", path.format(n=stage, o="_offload" if offload else ""),
                        fallback=c.facts.get("deepspeed"))
    ch = c.change("zero_stage", stage)
    if offload:
        ch.update(c.change("offload_optimizer", True))
        if stage == 3 or not c.key("zero_stage"):
            ch.update(c.change("offload_param", True))
    return ch


def _zero_in_effect(c, s):
    """(stage, offload): the estimate's, else what the log or config showed."""
    return (s.zero, s.offload) if s is not None else zero_of(c.facts.get("deepspeed"))


def _under_fsdp(c, s):
    """FSDP shards the run already; DeepSpeed cannot be added beside it (the HF Trainer refuses both)."""
    from .compat import fsdp_run
    return bool(s.fsdp) if s is not None else fsdp_run(c)


def _zero_sharding(c, s):
    if _under_fsdp(c, s):
        return None
    zero, _ = _zero_in_effect(c, s)
    states = c.d.component in ("optimizer_states", "gradients")
    if not c.multi_gpu or zero >= 3 or states and zero >= 2:
        return None                               # already sharded as far as it helps: offload next
    stage = 2 if states else 3
    return _ds_change(c, stage), {"zero": stage, "gpus": max(2, s.gpus if s else 2)}, SAFE


def _cpu_offload(c, s):
    if c.d.phase == "checkpoint_save":
        return {}, {}, DISPLAY
    if _under_fsdp(c, s):                           # FSDP's own CPU offload: parameters, gradients, states
        if s is not None and s.offload:
            return None
        return (c.change("offload_param", True), {"offload": True}, SAFE) if c.key("offload_param") \
            else ({}, {"offload": True}, DISPLAY)
    zero, offload = _zero_in_effect(c, s)
    if offload:
        return None
    stage = max(2, zero)
    return _ds_change(c, stage, offload=True), {"zero": stage, "offload": True}, SAFE


def _eval_batch(c, s):
    eb = c.facts.get("eval_batch") or 8
    if eb <= 1:
        return None
    # during training, no larger than the training batch; a prediction-only run has none
    new = max(1, eb // 2 if c.job == "prediction" else min(eb // 2, c.facts.get("batch") or eb // 2))
    return c.change("eval_batch", new, fallback=eb), {}, SAFE


def _eval_accumulation(c, s):
    if c.facts.get("eval_accumulation_steps") or c.dialect == "axolotl":
        return None
    return c.change("eval_accumulation", True), {}, SAFE


def _expandable_segments(c, s):
    if c.facts.get("expandable_segments"):
        return None
    return {}, {}, DISPLAY


def _more_host_ram(c, s):
    ch = {}
    for key, low in (("preprocessing_num_workers", 4), ("dataloader_num_workers", 2)):
        v = c.data.get(key)
        if isinstance(v, int) and v > low:
            ch[key] = [v, low]
    if c.data.get("low_cpu_mem_usage") is False:
        ch["low_cpu_mem_usage"] = [False, True]
    return ch, {}, SAFE if ch else DISPLAY


def _display_only(c, s):
    return {}, {}, DISPLAY


BUILDERS = {"reduce_batch": _reduce_batch, "grad_checkpointing": _grad_checkpointing, "reduce_seq_len": _reduce_seq_len,
            "precision": _precision, "quantize": _quantize, "use_lora": _use_lora, "optimizer_8bit": _optimizer_8bit,
            "zero_sharding": _zero_sharding, "cpu_offload": _cpu_offload, "eval_batch": _eval_batch,
            "eval_accumulation": _eval_accumulation, "expandable_segments": _expandable_segments,
            "more_host_ram": _more_host_ram, "free_other_process": _display_only, "smaller_model": _display_only,
            "fix_non_memory_bug": _display_only, "engine_memory_share": _engine_memory_share,
            "enforce_eager": _enforce_eager, "kv_cache_fp8": _kv_cache_fp8, "tensor_parallel": _tensor_parallel,
            "generation_len": _generation_len}


# ---- the ladder ---------------------------------------------------------------------------
def _usable(c):
    cap = (c.spec.capacity_gib if c.spec else None) or (c.d.memory or {}).get("total_gib")
    return cap - RESERVE_GIB if cap else None


def _fits(c, spec):
    usable = _usable(c)
    return usable is not None and _need(c, spec) <= (1 - MARGIN) * usable


def _need(c, spec):
    """Estimated peak of `spec`, anchored on what the allocator saw for the run as it failed."""
    return total_gib(spec) + c.gap


def observed_need(memory):
    """GiB the failing process held plus the request that failed, when the allocator said so."""
    held = memory.get("process_in_use_gib")
    if held is None and memory.get("allocated_by_pytorch_gib") is not None:
        held = memory["allocated_by_pytorch_gib"] + (memory.get("reserved_unallocated_gib") or 0)
    tried = memory.get("tried_gib")
    return held + tried if held is not None and tried is not None else None


_BATCH_MOVES = ("reduce_batch", "grad_accum", "grad_checkpointing", "reduce_seq_len", "eval_batch", "eval_accumulation")


# the moves of a job that is not a training step: an engine's own settings, a prediction's eval
# batch and generation length; no training batch, accumulation or optimizer move for them
JOB_LADDERS = {
    "serving": ("reduce_batch", "engine_memory_share", "enforce_eager", "reduce_seq_len", "kv_cache_fp8"),
    "offline_generation": ("reduce_batch", "engine_memory_share", "enforce_eager", "reduce_seq_len", "kv_cache_fp8"),
    "rl_rollout": ("engine_memory_share", "reduce_batch", "cpu_offload", "enforce_eager"),
}
ENGINE_LOAD_LADDER = ("precision", "tensor_parallel", "quantize", "smaller_model")      # weights that do not fit one card
ENGINE_LOAD_LADDER_ONE_CARD = ("precision", "quantize", "tensor_parallel", "smaller_model")
_OUTSIDE_ESTIMATE = tuple(JOB_LADDERS) + ("prediction",)   # jobs whose moves the training estimate cannot judge
UNKNOWN_DIALECT = "unknown"       # no dialect's keys: each move said in words (planwords.SHORT)
TRAINING_ONLY = ("grad_accum", "grad_checkpointing", "optimizer_8bit", "use_lora", "zero_sharding", "eval_accumulation")
_NOT_IN_PREDICTION = ("reduce_batch", "grad_accum", "grad_checkpointing", "optimizer_8bit", "use_lora", "cpu_offload")


def candidates(diagnosis, rule, multi_gpu):
    job = diagnosis.facts.get("job_kind")
    if job in ENGINE_KINDS and not engine_run(diagnosis):
        job = "training"                        # inference read from the phase alone: the usual ladders
    if job in ENGINE_KINDS and diagnosis.component == "weights":
        # one card seen: splitting needs cards the run may not have, so a smaller checkpoint comes first
        return list(ENGINE_LOAD_LADDER if multi_gpu else ENGINE_LOAD_LADDER_ONE_CARD)
    if job in JOB_LADDERS and diagnosis.component not in ("other_process", "fragmentation", "host_memory"):
        return list(JOB_LADDERS[job])
    if job in JOB_LADDERS and diagnosis.component in ("other_process", "fragmentation"):
        # what is outside the engine first (another process, the allocator's cache), then its own moves
        outside = [a for a in _candidates(diagnosis, rule, multi_gpu) if a in _CONCLUSIVE]
        return outside + [a for a in JOB_LADDERS[job] if a not in outside]
    if job == "prediction":
        # accumulated outputs: move them off the card first; a generation: smaller batches, fewer tokens
        moves = ("eval_accumulation", "eval_batch", "generation_len") if diagnosis.component == "eval_outputs" \
            else ("eval_batch", "generation_len")
        own = [a for a in _candidates(diagnosis, rule, multi_gpu) if a not in _NOT_IN_PREDICTION + moves]
        return [a for a in moves] + own
    return _candidates(diagnosis, rule, multi_gpu)


def _candidates(diagnosis, rule, multi_gpu):
    from ..diagnosis.rules import rules_by_id
    actions = list(rule.actions)
    conclusive = any(a in _CONCLUSIVE for a in actions)
    if rule.component == "auto" or (rule.component == "unknown" and rule.verdict == "device_oom" and not conclusive):
        # the rule names no component of its own: the ladder of what the evidence named, else of the phase
        ladder = COMPONENT_LADDER.get(diagnosis.component) or PHASE_LADDER.get(diagnosis.phase, "OOM200")
        actions = list(rules_by_id()[ladder].actions) + [a for a in actions if a not in ("reduce_batch",)]
    if diagnosis.component in ("optimizer_states", "gradients") and not multi_gpu:
        actions = [a for a in actions if a != "zero_sharding"]
    if multi_gpu and diagnosis.component in ("optimizer_states", "gradients") and "cpu_offload" in actions:
        # several GPUs: shard, then offload (both keep the result) before an 8-bit optimizer (changes it)
        actions.remove("cpu_offload")
        actions.insert(actions.index("zero_sharding") + 1 if "zero_sharding" in actions else 0, "cpu_offload")
    if diagnosis.phase == "load" and multi_gpu and "zero_sharding" in actions:
        actions.remove("zero_sharding")
        actions.insert(0, "zero_sharding")
    if diagnosis.phase == "mid_training" and diagnosis.component == "activations" and "reduce_seq_len" in actions:
        actions.remove("reduce_seq_len")          # steps already fit: the batch that failed held a long sample
        actions.insert(0, "reduce_seq_len")
    if diagnosis.component == "fragmentation" or diagnosis.component == "other_process":
        # then need less: a smaller footprint of what was being allocated when it failed
        actions += list(rules_by_id()[PHASE_LADDER["load"]].actions) if diagnosis.phase == "load" \
            else ["reduce_batch", "grad_checkpointing", "reduce_seq_len"]
    if multi_gpu and diagnosis.facts.get("method") == "full" and "zero_sharding" not in actions \
            and diagnosis.phase != "checkpoint_save":
        # a full fine-tune on several GPUs: sharding keeps the result, so it comes before any move
        # that changes it (a shorter cutoff, 16-bit, quantisation, LoRA, an 8-bit optimizer)
        at = next((i for i, a in enumerate(actions) if a in _CHANGES_RESULTS), len(actions))
        actions.insert(at, "zero_sharding")
    if diagnosis.phase == "load":               # no batch exists yet: its size cannot matter
        actions = [a for a in actions if a not in _BATCH_MOVES]
    seen, out = set(), []
    for a in actions:
        if a not in seen and a in BUILDERS:
            seen.add(a)
            out.append(a)
    return out


_CHANGES_RESULTS = ("reduce_seq_len", "precision", "quantize", "use_lora", "optimizer_8bit", "smaller_model")
_FALLBACK = ("reduce_seq_len", "grad_checkpointing", "zero_sharding", "cpu_offload", "quantize", "smaller_model")

# moves outside the config that are the whole answer when they apply: the plan continues only
# with alternatives after them
_CONCLUSIVE = ("free_other_process", "fix_non_memory_bug", "expandable_segments", "more_host_ram")


# Moves that need bitsandbytes, which has no kernels for these accelerators (its installation guide,
# v0.50: NVIDIA, AMD, Intel XPU, Apple Silicon and Intel Gaudi; Ascend is not among them)
_BITSANDBYTES = ("quantize", "optimizer_8bit")
_NO_BITSANDBYTES = {"npu": ("Ascend NPU", "昇腾 NPU")}


def _not_on_this_platform(action, accelerator):
    """The exclusion entry of a move the run's accelerator cannot do, or None."""
    if action in _BITSANDBYTES and accelerator in _NO_BITSANDBYTES:
        en, zh = _NO_BITSANDBYTES[accelerator]
        return {"move": action, "with": f"bitsandbytes 不支持{zh}",
                "reason": f"bitsandbytes (4-bit and 8-bit) does not run on an {en}",
                "source": "bitsandbytes docs/source/installation.mdx v0.50"}
    return None


def make_plan(diagnosis, rule, spec=None, config=None, lang="en", left_out=None) -> List[dict]:
    """The ordered steps; `left_out` (a list), when given, receives the exclusion entries of the
    moves left out because the run or an earlier step excludes them."""
    if diagnosis.verdict in ("no_failure", "incomplete"):
        return []
    c = Context(diagnosis, spec, config, lang)
    if spec is not None:
        seen = observed_need(diagnosis.memory or {})
        c.gap = max(0.0, seen - total_gib(spec)) if seen else 0.0
    steps, current, fitted = [], spec, False
    own = candidates(diagnosis, rule, c.multi_gpu)
    rest = []
    if diagnosis.verdict == "device_oom":
        # no dead ends: when none of the rule's moves can apply (batch already 1, checkpointing
        # already on), the ladder goes on with what shrinks the other terms, and ends on a bigger
        # card; at load time no batch exists, so no batch move
        rest = [a for a in _FALLBACK if a not in own and not (a in _BATCH_MOVES and diagnosis.phase == "load")]
        if c.job in ENGINE_KINDS or c.job == "rl_rollout":
            rest = ["smaller_model"]                # a training move is no fallback for an engine
        elif c.job == "prediction":
            rest = [a for a in rest if a not in _NOT_IN_PREDICTION]
    if c.generation:
        own, rest = [a for a in own if a not in TRAINING_ONLY], [a for a in rest if a not in TRAINING_ONLY]
    holding = held(c)
    for action in own + rest:
        if action in rest and (any(not s.alternative for s in steps) or fitted):
            break                           # the fallback is for a true dead end only
        platform = _not_on_this_platform(action, diagnosis.accelerator)
        if platform is not None:
            if left_out is not None:
                left_out.append(platform)
            continue
        step, update = _step(c, action, current)
        if step is None:
            continue
        barred = excluded(action, update, holding, c.dialect)
        if barred is not None:              # never stacked on what the run or an earlier step holds
            if left_out is not None:
                left_out.append(barred)
            continue
        outside = c.job in _OUTSIDE_ESTIMATE
        if fitted or outside and step.applicability == UNSAFE:
            # no estimate can show a move that changes results is needed: it is offered, not applied
            step.alternative = True
            steps.append(step)
            if sum(s.alternative for s in steps) >= 2 and not all(s.alternative for s in steps):
                break                       # with no main step yet, the ladder goes on to find one
            continue
        steps.append(step)
        holding |= brings(action, update)
        if current is not None and update:
            current = current.model_copy(update=update)
        # an engine's or a prediction's moves are outside the training estimate: two, then alternatives
        main = sum(not s.alternative for s in steps)
        fitted = bool(step.fits_after or (outside and main >= 2) or (spec is None and len(steps) >= 3)
                      or (step.applicability == DISPLAY and action in _CONCLUSIVE))
    steps = [s for s in steps if not s.alternative] + [s for s in steps if s.alternative]
    return [s.model_dump() for s in steps]


def _step(c, action, current):
    """(Step, spec update) for one move from the current state, or (None, None) when it cannot help."""
    built = BUILDERS[action](c, current)
    if built is None:
        return None, None
    changes, update, applicability = built
    changes = {k: v for k, v in changes.items() if k and v[0] != v[1]}
    step = Step(action=action, changes=changes, applicability=applicability if changes else DISPLAY,
                why=why_text(action, c, changes), display="" if changes else display_text(action, c))
    if current is not None and update:
        after = current.model_copy(update=update)
        step.saves_gib = round(max(0.0, total_gib(current) - total_gib(after)), 2)
        if step.saves_gib < 0.05:
            return None, None                     # saves ~0 GiB: not a fix
        step.fits_after = _fits(c, after) if _usable(c) is not None else None   # no card known: no claim
    elif action == "expandable_segments":
        step.saves_gib = (c.d.memory or {}).get("reserved_unallocated_gib")
    return step, update
