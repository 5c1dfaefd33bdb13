"""The catalogue's record types and the arithmetic on a model's shape: the bottom layer.

catalog.py (finding a model or card by name), compiled.py (the snapshot) and budget.py (the
estimate) all build on this module; it imports none of them.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from .record import Record


@dataclass
class ModelShape(Record):
    """A decoder's shape, as its config.json gives it."""
    name: str
    params_b: float
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    family: str = "generic"
    tied_embeddings: bool = False
    head_dim: Optional[int] = None
    experts: Optional[int] = None
    experts_per_token: Optional[int] = None
    moe_intermediate: Optional[int] = None
    aliases: List[str] = field(default_factory=list)
    # whether the model's own forward casts the logits to fp32 before the loss (HF's modelling code
    # and transformers >= 4.45's loss_function do); models.yaml says false where it does not
    loss_upcast: bool = True

    @property
    def dim(self):
        return self.head_dim or self.hidden // self.heads


@dataclass
class Gpu(Record):
    """An accelerator: the capacity its allocator reports and whether it computes in bf16."""
    name: str
    capacity_gib: float
    aliases: List[str] = field(default_factory=list)
    marketed_gb: Optional[float] = None
    bf16: Optional[bool] = None
    vendor: str = "nvidia"
    arch: str = ""
    estimated: bool = False


def linear_shapes(m: ModelShape):
    """{projection: (in, out)} of one decoder layer, and how many copies each has (MoE experts)."""
    d, h = m.dim, m.hidden
    mlp = m.moe_intermediate or m.intermediate if m.experts else m.intermediate
    per = {"q_proj": (h, m.heads * d), "k_proj": (h, m.kv_heads * d), "v_proj": (h, m.kv_heads * d),
           "o_proj": (m.heads * d, h), "gate_proj": (h, mlp), "up_proj": (h, mlp), "down_proj": (mlp, h)}
    copies = {k: (m.experts if m.experts and k in ("gate_proj", "up_proj", "down_proj") else 1) for k in per}
    return per, copies


def count_params(m: ModelShape):
    per, copies = linear_shapes(m)
    layer = sum(i * o * copies[k] for k, (i, o) in per.items()) + 2 * m.hidden
    return m.layers * layer + m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


def layer_params(m: ModelShape):
    """Parameters of one decoder layer (an FSDP unit, what ZeRO-3 gathers to compute a layer)."""
    embed = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return max(1.0, (m.params_b * 1e9 - embed) / m.layers)


def largest_module_params(m: ModelShape):
    """The largest single module's parameters (DeepSpeed's largest_layer_params): in HF decoders the
    embedding or the LM head (vocabulary × hidden), else a layer's widest projection."""
    per, copies = linear_shapes(m)
    return max([m.vocab * m.hidden] + [i * o * copies[k] for k, (i, o) in per.items()])
