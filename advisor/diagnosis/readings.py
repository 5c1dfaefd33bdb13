"""What the allocator's numbers allow when the log says little: the readings they support, ranked,
each with what would confirm it, and the inputs that would decide between them.

A bare OOM message still carries arithmetic: how much of the card was in use, how much was cached
but free, how large the failed request was against the card. Those ratios separate a card full of
long-lived tensors (model states) from one large tensor (logits, attention scores), fragmentation
from capacity, and a capacity problem from none at all (memory free, yet the request failed).
"""

FULL = 0.90            # of the card allocated: long-lived tensors fill it
SMALL_REQUEST = 0.05   # of the card: a request this small fails only on a card already full
LARGE_REQUEST = 0.10   # of the card: one tensor this large is the batch's logits or scores


_WORDS = {
    "other_process": ("{free:.2f} GiB was free for a {tried:.2f} GiB request: not a full card but a limit — "
                      "another process or rank on the same card, a visible-devices mix-up, or a per-process "
                      "memory fraction",
                      "nvidia-smi while the run starts; CUDA_VISIBLE_DEVICES of each rank",
                      "有 {free:.2f} GiB 空闲却申请不到 {tried:.2f} GiB：不是显卡满了，而是受到限制——同一张卡上还有别的进程"
                      "或 rank、可见设备设置混乱，或设置了单进程显存比例",
                      "启动时查看 nvidia-smi；检查每个 rank 的 CUDA_VISIBLE_DEVICES"),
    "fragmentation": ("{cached:.2f} GiB was cached but unallocated, more than the {tried:.2f} GiB request",
                      "the same run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                      "有 {cached:.2f} GiB 已缓存但未分配，比失败的 {tried:.2f} GiB 申请还多",
                      "用 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True 重跑"),
    "weights": ("{held:.2f} of {total:.2f} GiB was allocated before a {tried:.2f} GiB request: long-lived tensors "
                "(weights, gradients, optimizer states) fill the card, not one batch",
                "the model's size and the fine-tuning method (the config or the model name)",
                "申请 {tried:.2f} GiB 之前 {total:.2f} GiB 中已分配 {held:.2f} GiB：占满显卡的是长期存在的张量"
                "（权重、梯度、优化器状态），而不是某一个批次",
                "模型大小和微调方法（训练配置或模型名称）"),
    "activations": ("one {tried:.2f} GiB request is {share:.0f} % of the card: a single large tensor — the logits "
                    "(batch × length × vocabulary) or eager attention scores (batch × heads × length²)",
                    "the per-device batch, the sequence length and the attention implementation (the config)",
                    "单次申请 {tried:.2f} GiB，占整张卡的 {share:.0f}%：是某一个大张量——logits（批次 × 长度 × 词表）"
                    "或 eager 注意力分数（批次 × 头数 × 长度²）",
                    "单卡批处理大小、序列长度和注意力实现（训练配置）"),
    "batch": ("a request in the middle of a step on a nearly full card: the activations of one batch",
              "the traceback's frames (the lines above the error)",
              "显卡几乎已满时在一步中途申请失败：是一个批次的激活值",
              "调用栈（报错上方的几行）"),
}


def _reading(kind, lang, **numbers):
    en, en_confirm, zh, zh_confirm = _WORDS[kind]
    component = "activations" if kind == "batch" else kind
    zh_on = lang == "zh"
    return {"component": component, "why": (zh if zh_on else en).format(**numbers),
            "confirm": zh_confirm if zh_on else en_confirm}


def hypotheses(memory, phase, component, lang="en"):
    """[{component, why, confirm}], most likely first; [] when the log itself decided the component."""
    total, tried = memory.get("total_gib"), memory.get("tried_gib")
    if not total or tried is None or component not in ("unknown", "activations") or phase not in ("unknown", None):
        return []
    free = memory.get("free_gib")
    cached = memory.get("reserved_unallocated_gib") or 0
    held = memory.get("allocated_by_pytorch_gib") or memory.get("process_in_use_gib") or 0
    n = dict(total=total, tried=tried, free=free or 0, cached=cached, held=held, share=100 * tried / total)
    out = []
    if free is not None and free >= 2 * tried:
        out.append(_reading("other_process", lang, **n))
    if cached > tried and cached >= 0.02 * total:
        out.append(_reading("fragmentation", lang, **n))
    if held >= FULL * total and tried <= SMALL_REQUEST * total:
        out.append(_reading("weights", lang, **n))
    if tried >= LARGE_REQUEST * total:
        out.append(_reading("activations", lang, **n))
    if not out:
        out.append(_reading("batch", lang, **n))
    return out


def needs(d, has_config, has_budget):
    """The inputs that would decide what the log leaves open, in the order they help."""
    out = []
    if d.verdict not in ("device_oom", "host_oom", "incomplete"):
        return out
    if d.verdict != "incomplete" and d.phase not in ("unknown", None) and d.component not in ("unknown", None):
        return out                            # the log decided both: nothing is left open
    no_frames = not any(e.marker == "frame" for e in d.evidence)
    if d.phase in ("unknown", None) and no_frames:
        out.append("lines above the traceback")
    if not has_config and d.facts.get("batch") is None and d.facts.get("seq_len") is None:
        out.append("config")
    if d.verdict == "device_oom" and not has_budget and not d.facts.get("model") and not d.facts.get("params_b"):
        out.append("model")
    if d.verdict == "device_oom" and not (d.memory or {}).get("total_gib") and not d.facts.get("gpu"):
        out.append("gpu")
    return out
