"""What fits a card: a search over the run's knobs, cheapest in results first.

Moves that leave the result unchanged come first (gradient checkpointing, a smaller per-device batch
with more accumulation, sharding across the GPUs there are, mixed precision, an 8-bit optimizer,
offload), then those that change it (a shorter cutoff, LoRA instead of a full fine-tune, a 4-bit
base). Each is taken only when it lowers the estimate, and the search stops as soon as the run fits
with the 20 % margin. Alternatives are the single moves that fit on their own.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from ..memory.budget import RESERVE_GIB, estimate, fit_verdict, optimizer_kind

MIN_SEQ = 512             # a cutoff is not shortened below this: most instructions and answers fit
COMMON_CARDS = ((24.0, "24 GiB (RTX 3090/4090, A10)"), (40.0, "40 GiB (A100-40G)"), (48.0, "48 GiB (A6000, L40S)"),
                (80.0, "80 GiB (A100-80G, H100)"))


@dataclass
class Move:
    name: str               # an action of the vocabulary
    update: dict            # the Spec fields it sets
    total_gib: float        # the estimate once this and every move before it are made
    same_result: bool


@dataclass
class Fit:
    capacity_gib: float
    total_gib: float        # as planned
    fits: bool              # after the moves
    moves: List[Move] = field(default_factory=list)
    alternatives: List[Move] = field(default_factory=list)     # one move that fits alone

    def to_json_dict(self):
        def move(m):
            return {"action": m.name, "changes": m.update, "total_gib": round(m.total_gib, 2),
                    "same_result": m.same_result}
        return {"capacity_gib": self.capacity_gib, "planned_gib": round(self.total_gib, 2), "fits": self.fits,
                "moves": [move(m) for m in self.moves], "alternatives": [move(m) for m in self.alternatives]}


def _ladder(spec):
    """(action, update, same result) for the moves this run still has, in the order they cost."""
    out = []
    if not spec.grad_ckpt:
        out.append(("grad_checkpointing", {"grad_ckpt": True}, True))
    if spec.batch > 1:
        out.append(("reduce_batch", {"batch": 1, "grad_accum": spec.grad_accum * spec.batch}, True))
    if spec.gpus > 1 and not spec.fsdp and spec.zero < 3:
        out.append(("zero_sharding", {"zero": 3 if spec.method == "full" or spec.zero == 2 else 2}, True))
    if spec.precision == "fp32":
        out.append(("precision", {"precision": "fp16" if spec.bf16_native is False else "bf16"}, True))
    if spec.method in ("full", "freeze") and optimizer_kind(spec.optim) == "adamw":
        out.append(("optimizer_8bit", {"optim": "paged_adamw_8bit"}, True))
    if spec.gpus > 1 and not spec.offload and not spec.fsdp:
        out.append(("cpu_offload", {"offload": True, "zero": max(spec.zero, 2)}, True))
    if spec.seq > MIN_SEQ:
        out.append(("reduce_seq_len", {"seq": max(MIN_SEQ, spec.seq // 2)}, False))
    if spec.method in ("full", "freeze"):
        out.append(("use_lora", {"method": "lora"}, False))
    if spec.method != "qlora" and spec.quant_bits != 4:
        out.append(("quantize", {"method": "qlora", "quant_bits": 4}, False))
    return out


def _fits(spec):
    b = estimate(spec)
    usable = spec.capacity_gib - RESERVE_GIB
    return b.total_gib, fit_verdict(b.total_gib, usable) == "fits"


def what_fits(spec) -> Optional[Fit]:
    """The cheapest moves after which `spec` fits its card."""
    cap = spec.capacity_gib
    if not cap:
        return None
    current = spec
    before, ok = _fits(current)
    fit = Fit(capacity_gib=cap, total_gib=before, fits=ok)
    for name in [m[0] for m in _ladder(current)] if not ok else ():
        # each move as the run stands after the ones before (offload keeps the sharding raised)
        update, same = next(((u, s) for n, u, s in _ladder(current) if n == name), (None, None))
        if update is None:
            continue
        trial = current.model_copy(update=update)
        total, ok = _fits(trial)
        if total > before - max(0.5, 0.05 * before):
            continue                     # this run gains (almost) nothing from it
        if name == "reduce_seq_len":     # halve again while it helps and the run still does not fit
            while not ok and trial.seq // 2 >= MIN_SEQ:
                shorter = trial.model_copy(update={"seq": trial.seq // 2})
                total, ok = _fits(shorter)
                trial, update = shorter, {"seq": shorter.seq}
        current, before = trial, total
        fit.moves.append(Move(name, update, total, same))
        if ok:
            break
    fit.fits = ok
    if ok:
        fit.moves = _pruned(spec, fit.moves)
    if len(fit.moves) > 1:
        for name, update, same in _ladder(spec):
            total, alone = _fits(spec.model_copy(update=update))
            if alone:
                fit.alternatives.append(Move(name, update, total, same))
    return fit


def _pruned(base, moves):
    """Drop a move that changes the results when the run fits without it (a later, bigger move made it
    unneeded); the totals are then those of the moves that remain, in order."""
    keep = list(moves)
    for m in [m for m in moves[:-1] if not m.same_result]:
        rest = [k for k in keep if k is not m]
        trial = base
        for k in rest:
            trial = trial.model_copy(update=k.update)
        if _fits(trial)[1]:
            keep = rest
    out, current = [], base
    for m in keep:
        current = current.model_copy(update=m.update)
        out.append(Move(m.name, m.update, _fits(current)[0], m.same_result))
    return out


def common_cards(spec):
    """[(label, verdict)] of the run as planned on the cards most people have."""
    out = []
    for cap, name in COMMON_CARDS:
        total, _ = _fits(spec.model_copy(update={"capacity_gib": cap}))
        out.append((name, fit_verdict(total, cap - RESERVE_GIB)))
    return out


# a move's changes in `budget`'s own flags, so the user can run the answer again
_FLAGS = {"batch": "--batch", "grad_accum": "--grad-accum", "seq": "--seq", "grad_ckpt": "--grad-ckpt",
          "precision": "--precision", "optim": "--optim", "zero": "--zero", "offload": "--offload",
          "method": "--method", "quant_bits": "--quant-bits"}


def as_flags(update):
    out = []
    for key, value in update.items():
        flag = _FLAGS.get(key, "--" + key)
        out.append(flag if value is True else f"{flag} {value}")
    return " ".join(out)
