"""Moves that exclude each other (data/exclusions.yaml): the planner never stacks them.

What a run holds (a client 8-bit optimizer, ZeRO-Offload, FSDP, ZeRO-3, 4-bit weights, a GPTQ/AWQ
checkpoint, checkpointing on) comes from its facts and config; each step the plan takes adds what
it brings. A move whose entry names something held is left out, unless the dialect's framework
makes the pair work.
"""

import re

from .runspec import zero_of


def _table():
    from ..core.snapshot import snapshot
    return snapshot()["exclusions"]


def fsdp_run(c):
    """An FSDP run: its config says so, or its frames do."""
    data = c.data or {}
    return bool(data.get("fsdp") or data.get("fsdp_config") or "FSDP" in str(data.get("distributed_type") or "")
                or any("fsdp/" in e.text or "fully_sharded_data_parallel" in e.text for e in c.d.evidence))


def held(c):
    """What the run already holds, in the table's words."""
    f = c.facts
    zero, offload = zero_of(f.get("deepspeed"))
    out = set()
    if "8bit" in str(f.get("optim") or "").lower():
        out.add("optim_8bit")
    if offload:
        out.add("deepspeed_offload")
    if zero >= 3:
        out.add("zero3")
    if f.get("quantization_bit") == 4 or f.get("method") == "qlora":
        out.add("quant_4bit")
    if re.search(r"(?i)gptq|awq", str(f.get("model") or "")):
        out.add("pre_quantized")
    if f.get("grad_ckpt"):
        out.add("grad_ckpt")
    if fsdp_run(c):
        out.add("fsdp")
    return out


def brings(action, update):
    """What a step adds to the run."""
    update = update or {}
    out = {"optimizer_8bit": {"optim_8bit"}, "quantize": {"quant_4bit"}, "grad_checkpointing": {"grad_ckpt"}}.get(
        action, set()).copy()
    if action == "cpu_offload" and update.get("offload"):
        out.add("deepspeed_offload")
    if (update.get("zero") or 0) >= 3:
        out.add("zero3")
    return out


def excluded(action, update, holding, dialect):
    """The entry that leaves this move out ({move, with, reason, source}), or None."""
    for e in _table():
        if e["move"] != action or e["with"] not in holding or dialect in (e.get("unless") or ()):
            continue
        if e.get("stage") and (update or {}).get("zero") != e["stage"]:
            continue
        return e
    return None
