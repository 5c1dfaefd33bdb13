"""Plan: from a diagnosis to an ordered list of concrete changes, each checked against the budget.

The decisive rule names the first moves (its `actions`, DESIGN §6); this module turns each into
keys of the user's own config dialect, drops moves already in effect (LLaMA-Factory checkpoints by
default; bf16 already set; batch already 1), picks fp16 over bf16 on cards without native bf16,
and walks the ladder until the estimated peak fits with the course's 20 % margin. Then at most
two alternatives. The learning rate is never a move: it does not change memory.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .budget import MARGIN, RESERVE_GIB, estimate
from .config import KEYS
from .planwords import display_text, why_text
from .record import Record
from .runspec import zero_of

SAFE, UNSAFE, DISPLAY = "safe", "unsafe", "display"
PHASE_LADDER = {"load": "OOM101", "first_step": "OOM201", "mid_training": "OOM204", "evaluation": "OOM404",
                "checkpoint_save": "OOM410", "inference": "OOM201", "unknown": "OOM200"}
COMPONENT_LADDER = {"optimizer_states": "OOM301", "gradients": "OOM310", "eval_outputs": "OOM401"}
DS_PATHS = {"llamafactory": "examples/deepspeed/ds_z{n}{o}_config.json", "hf": "ds_z{n}{o}_config.json",
            "axolotl": "deepspeed_configs/zero{n}{o}.json"}


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


class Context:
    """What the builders read: the run as estimated, the user's file, the card, the allocator."""

    def __init__(self, diagnosis, spec, config, lang):
        self.d, self.spec, self.config, self.lang = diagnosis, spec, config, lang
        f = diagnosis.facts
        self.facts = f
        self.dialect = config.dialect if config is not None and config.dialect != "unknown" else \
            {"llamafactory": "llamafactory", "axolotl": "axolotl"}.get(f.get("framework"), "hf")
        mem = diagnosis.memory or {}
        # several GPUs: stated, or implied by a device index above 0, by [rankN]: prefixes (the
        # distributed excepthook), by a DeepSpeed config, or by DDP's own frames in the evidence
        self.multi_gpu = bool((f.get("num_gpus") or 1) > 1 or (mem.get("device_index") or 0) >= 1
                              or diagnosis.ranks or str(f.get("deepspeed") or "").startswith("zero")
                              or any("nn/parallel/distributed.py" in e.text for e in diagnosis.evidence))
        self.data = config.data if config is not None else {}
        self.gap = 0.0       # GiB the allocator saw beyond the estimate: added to every what-if

    def key(self, knob):
        return KEYS[knob].get(self.dialect)

    def old(self, key, fallback=None):
        return self.data.get(key, fallback) if key else fallback


# ---- one builder per action: (changes, spec update, applicability) or None when it cannot help ----
def _reduce_batch(c, s):
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
    return {c.key("batch"): [c.old(c.key("batch"), b), nb], c.key("grad_accum"): [c.old(c.key("grad_accum"), g), ng]}, \
        {"batch": nb}, SAFE


def _grad_checkpointing(c, s):
    on = s.grad_ckpt if s else c.facts.get("grad_ckpt")
    if on:
        return None
    if c.dialect == "llamafactory":
        return {"disable_gradient_checkpointing": [c.old("disable_gradient_checkpointing", True), False]}, \
            {"grad_ckpt": True}, SAFE
    key = "activation_checkpointing" if "activation_checkpointing" in c.data else "gradient_checkpointing"
    return {key: [c.old(key, False), True]}, {"grad_ckpt": True}, SAFE


def _reduce_seq_len(c, s):
    seq = s.seq if s else c.facts.get("seq_len")
    if not seq:
        return {}, {}, DISPLAY                    # length never stated: say what to do, not which number
    if seq <= 256:
        return None
    new = max(256, seq // 2)
    if s is not None:
        while new > 512 and not _fits(c, s.model_copy(update={"seq": new})):
            new //= 2
    return {c.key("seq_len"): [c.old(c.key("seq_len"), seq), new]}, {"seq": new}, UNSAFE


def _precision(c, s):
    prec = s.precision if s else c.facts.get("precision")
    native = s.bf16_native if s else None
    if prec == "fp32" or prec is None:
        new = "bf16" if native is not False else "fp16"
        return {new: [c.old(new, False), True]}, {"precision": new}, UNSAFE
    if prec == "bf16" and c.dialect == "llamafactory" and s is not None and s.method == "full" and native:
        return {"pure_bf16": [c.old("pure_bf16", False), True]}, {"precision": "pure_bf16"}, UNSAFE
    return None


def _quantize(c, s):
    method = s.method if s else c.facts.get("method")
    bits = s.quant_bits if s else c.facts.get("quantization_bit")
    if bits == 4 or method == "qlora":
        return None
    if c.dialect == "axolotl":
        ch = {"load_in_4bit": [c.old("load_in_4bit", False), True], "adapter": [c.old("adapter"), "qlora"]}
        if c.data.get("load_in_8bit"):
            ch["load_in_8bit"] = [True, False]
    elif c.dialect == "llamafactory":
        ch = {"quantization_bit": [c.old("quantization_bit"), 4]}
        if method in ("full", "freeze"):
            ch["finetuning_type"] = [c.old("finetuning_type", method), "lora"]
    else:
        ch = {}
    return ch, {"method": "qlora", "quant_bits": 4}, UNSAFE


def _use_lora(c, s):
    method = s.method if s else c.facts.get("method")
    if method not in ("full", "freeze"):
        return None
    if c.dialect == "llamafactory":
        ch = {"finetuning_type": [c.old("finetuning_type", method), "lora"]}
    elif c.dialect == "axolotl":
        ch = {"adapter": [c.old("adapter"), "lora"]}
    else:
        ch = {}
    return ch, {"method": "lora"}, UNSAFE


def _optimizer_8bit(c, s):
    method = s.method if s else c.facts.get("method")
    optim = str((s.optim if s else c.facts.get("optim")) or "")
    if method not in (None, "full", "freeze") or "8bit" in optim:
        return None
    new = "adamw_bnb_8bit" if c.dialect == "axolotl" else "paged_adamw_8bit"
    return {c.key("optim"): [c.old(c.key("optim"), optim or None), new]}, {"optim": new}, UNSAFE


def _ds_path(c, stage, offload=False):
    return DS_PATHS.get(c.dialect, DS_PATHS["hf"]).format(n=stage, o="_offload" if offload else "")


def _ds_change(c, path):
    """The deepspeed key's change, from what the config (else the log) had."""
    return {"deepspeed": [c.old("deepspeed", c.facts.get("deepspeed")), path]}


def _zero_in_effect(c, s):
    """(stage, offload): the estimate's, else what the log or config showed."""
    return (s.zero, s.offload) if s is not None else zero_of(c.facts.get("deepspeed"))


def _zero_sharding(c, s):
    zero, _ = _zero_in_effect(c, s)
    states = c.d.component in ("optimizer_states", "gradients")
    if not c.multi_gpu or zero >= 3 or states and zero >= 2:
        return None                               # already sharded as far as it helps: offload next
    stage = 2 if states else 3
    return _ds_change(c, _ds_path(c, stage)), {"zero": stage, "gpus": max(2, s.gpus if s else 2)}, SAFE


def _cpu_offload(c, s):
    if c.d.phase == "checkpoint_save":
        return {}, {}, DISPLAY
    zero, offload = _zero_in_effect(c, s)
    if offload:
        return None
    stage = max(2, zero)
    return _ds_change(c, _ds_path(c, stage, offload=True)), {"zero": stage, "offload": True}, SAFE


def _eval_batch(c, s):
    eb = c.facts.get("eval_batch") or 8
    if eb <= 1:
        return None
    new = max(1, min(eb // 2, c.facts.get("batch") or eb // 2))
    return {c.key("eval_batch"): [c.old(c.key("eval_batch"), eb), new]}, {}, SAFE


def _eval_accumulation(c, s):
    if c.facts.get("eval_accumulation_steps") or c.dialect == "axolotl":
        return None
    return {"eval_accumulation_steps": [c.old("eval_accumulation_steps"), 4]}, {}, SAFE


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
            "fix_non_memory_bug": _display_only}


# ---- the ladder ---------------------------------------------------------------------------
def _usable(c):
    cap = (c.spec.capacity_gib if c.spec else None) or (c.d.memory or {}).get("total_gib")
    return cap - RESERVE_GIB if cap else None


def _fits(c, spec):
    usable = _usable(c)
    return usable is not None and _need(c, spec) <= (1 - MARGIN) * usable


def _need(c, spec):
    """Estimated peak of `spec`, anchored on what the allocator saw for the run as it failed."""
    return estimate(spec).total_gib + c.gap


def observed_need(memory):
    """GiB the failing process held plus the request that failed, when the allocator said so."""
    held = memory.get("process_in_use_gib")
    if held is None and memory.get("allocated_by_pytorch_gib") is not None:
        held = memory["allocated_by_pytorch_gib"] + (memory.get("reserved_unallocated_gib") or 0)
    tried = memory.get("tried_gib")
    return held + tried if held is not None and tried is not None else None


_BATCH_MOVES = ("reduce_batch", "grad_accum", "grad_checkpointing", "reduce_seq_len", "eval_batch", "eval_accumulation")


def candidates(diagnosis, rule, multi_gpu):
    from .rules import rules_by_id
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
    if diagnosis.phase == "load":               # no batch exists yet: its size cannot matter
        actions = [a for a in actions if a not in _BATCH_MOVES]
    seen, out = set(), []
    for a in actions:
        if a not in seen and a in BUILDERS:
            seen.add(a)
            out.append(a)
    return out


# moves outside the config that are the whole answer when they apply: the plan continues only
# with alternatives after them
_CONCLUSIVE = ("free_other_process", "fix_non_memory_bug", "expandable_segments", "more_host_ram")


def make_plan(diagnosis, rule, spec=None, config=None, lang="en") -> List[dict]:
    if diagnosis.verdict in ("no_failure", "incomplete"):
        return []
    c = Context(diagnosis, spec, config, lang)
    if spec is not None:
        seen = observed_need(diagnosis.memory or {})
        c.gap = max(0.0, seen - estimate(spec).total_gib) if seen else 0.0
    steps, current, fitted = [], spec, False
    for action in candidates(diagnosis, rule, c.multi_gpu):
        step, update = _step(c, action, current)
        if step is None:
            continue
        if fitted:
            step.alternative = True
            steps.append(step)
            if sum(s.alternative for s in steps) >= 2:
                break
            continue
        steps.append(step)
        if current is not None and update:
            current = current.model_copy(update=update)
        fitted = bool(step.fits_after or (spec is None and len(steps) >= 3)
                      or (step.applicability == DISPLAY and action in _CONCLUSIVE))
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
        step.saves_gib = round(max(0.0, estimate(current).total_gib - estimate(after).total_gib), 2)
        if step.saves_gib < 0.05:
            return None, None                     # saves ~0 GiB: not a fix
        step.fits_after = _fits(c, after)
    elif action == "expandable_segments":
        step.saves_gib = (c.d.memory or {}).get("reserved_unallocated_gib")
    return step, update
