"""The memory budget as aligned text lines with a bar per component (text and markdown reports)."""

from ..core.i18n import assumption_text, label
from .wrap import columns


def pad(text, width):
    """Left-align for a terminal: CJK characters take two columns."""
    return text + " " * max(0, width - columns(text))


COMPONENTS = ("weights_gib", "gradients_gib", "optimizer_states_gib", "activations_gib", "logits_gib",
              "working_buffers_gib", "overhead_gib")
PHASES = ("forward", "backward", "optimizer_step")


def fit_text(b, lang="en"):
    """The card line's verdict, with the 20 % margin it is measured against."""
    h = b["headroom_pct"]
    shown = f"{h:.1f}" if not b.get("fits") and 0 < h and round(h) >= 20 else f"{h:.0f}"
    if lang == "zh":
        if b.get("fits"):
            return f"余量 {shown}%，不少于要求的 20% → 放得下"
        if b.get("fit") == "tight":
            return f"余量 {shown}%，少于要求的 20% → 偏紧（在可用显存以内，但没有应对更长批次或碎片所需的余量）"
        return f"余量 {shown}%：合计已超过可用显存 → 放不下"
    if b.get("fits"):
        return f"headroom {shown} %, at least the 20 % margin → fits"
    if b.get("fit") == "tight":
        return f"headroom {shown} %, less than the 20 % margin → tight (within usable memory, without the margin a longer batch or fragmentation needs)"
    return f"headroom {shown} %: the total is above usable memory → does not fit"


def observed_line(b, memory, lang="en"):
    """When the estimate fits but the allocator saw more at the failure, say so, with its sum
    labelled: the plan measures against the larger of the two."""
    from ..plans.plan import observed_need
    seen = observed_need(memory or {})
    if seen is None or not b.get("fits") or not b.get("usable_gib"):
        return None
    limit = 0.8 * b["usable_gib"]
    if seen <= limit:
        return None
    held, tried = seen - memory["tried_gib"], memory["tried_gib"]
    if lang == "zh":
        return (f"  但失败时实际更多：已占用 {held:.2f} GiB + 失败的申请 {tried:.2f} GiB = {seen:.2f} GiB，"
                f"超过可用显存的 80%（{limit:.2f} GiB）→ 按实际数据放不下")
    return (f"  but the allocator saw more at the failure: in use {held:.2f} GiB + failed request {tried:.2f} GiB = "
            f"{seen:.2f} GiB, above 80 % of usable ({limit:.2f} GiB) → by its numbers the run does not fit")


def budget_lines(b, lang="en", memory=None, width=30):
    b = b if isinstance(b, dict) else b.to_json_dict()
    scale = max(b.get("capacity_gib") or 0, b["total_gib"]) or 1
    lines = []
    for key in COMPONENTS:
        value = b.get(key) or 0
        if key == "working_buffers_gib" and not value:
            continue
        bar = "█" * max(0, round(width * value / scale)) if value else ""
        lines.append(f"  {pad(label(key, lang), 28)} {value:8.2f} GiB  {bar}".rstrip())
        terms = b.get("overhead_terms") or {}
        if key == "overhead_gib" and terms:
            sep = "、" if lang == "zh" else " · "
            lines.append("    " + sep.join(f"{label(k, lang)} {v:.2f}" for k, v in terms.items()))
    lines.append(f"  {pad(label('total', lang), 28)} {b['total_gib']:8.2f} GiB")
    phases = b.get("phases") or {}
    if phases:
        lines.append(f"  {pad(label('peak_in', lang), 28)} {label(b.get('peak_phase'), lang)} ("
                     + ", ".join(f"{label(k, lang)} {phases[k]:.2f}" for k in PHASES if k in phases) + " GiB)")
    if b.get("padding"):
        lines.append(f"  {assumption_text(b['padding'], lang)}")
    if b.get("capacity_gib"):
        reserve = b["capacity_gib"] - b["usable_gib"]
        if lang == "zh":
            usable = f"可用显存 {b['usable_gib']:.2f} GiB（扣除 {reserve:.1f} GiB 预留）；"
        else:
            usable = f"usable {b['usable_gib']:.2f} GiB (capacity − {reserve:.1f} GiB reserve); "
        lines.append(f"  {pad(label('capacity_gib', lang), 28)} {b['capacity_gib']:8.2f} GiB   {usable}{fit_text(b, lang)}")
        seen = observed_line(b, memory, lang)
        if seen:
            lines.append(seen)
    return lines


# The flag that corrects an assumed fact (diagnose's own; precision and checkpointing come from a config)
CORRECTED_BY = (("fine-tuning method", "--method"), ("per-device batch", "--batch"), ("sequence length", "--seq-len"),
                ("precision", "--config"), ("gradient checkpointing", "--config"), ("model shape unknown", "--model / --params"))


def assumed_lines(b, lang="en"):
    """Each fact the budget assumed because no input stated it, with the flag that corrects it: the
    plan rests on them, so they are shown beside it, not only in the JSON."""
    b = b if isinstance(b, dict) else b.to_json_dict()
    out = []
    for a in b.get("assumptions") or []:
        flag = next((f for key, f in CORRECTED_BY if a.startswith(key)), None)
        if flag is None or ("not stated" not in a and "unknown" not in a):
            continue
        if lang == "zh":
            out.append(f"  {assumption_text(a, lang)}——若不对，用 {flag} 更正")
        else:
            out.append(f"  {a} — not so? correct it with {flag}")
    return out


def fit_lines(fit, cards, total_gib, lang="en"):
    """What fits: the cheapest moves to the card (plans/fit.py), or without a card, a hint and the run
    as planned on the common ones."""
    from ..core.i18n import action_name
    from ..plans.fit import as_flags
    zh = lang == "zh"
    verdict = {"fits": "放得下" if zh else "fits", "tight": "偏紧（余量不足 20%）" if zh else "tight (under the 20 % margin)",
               "short": "放不下" if zh else "does not fit"}
    if fit is None:
        head = (f"未指定显卡（--gpu 4090、A100-80G、24GiB）：按计划每卡需要 {total_gib:.2f} GiB" if zh else
                f"No card given (--gpu 4090, A100-80G, 24GiB): as planned it needs {total_gib:.2f} GiB per GPU")
        return [head] + [f"  {name}{'：' if zh else ': '}{verdict[v]}" for name, v in cards]
    lines = [f"在这张卡上怎样放得下（{fit.capacity_gib:.2f} GiB）" if zh else f"What fits this card ({fit.capacity_gib:.2f} GiB)"]
    if not fit.moves:
        lines.append(f"  按计划 {fit.total_gib:.2f} GiB：{verdict['fits']}" if zh else
                     f"  as planned, {fit.total_gib:.2f} GiB: it fits with the 20 % margin")
        return lines
    for i, m in enumerate(fit.moves, 1):
        same = ("【结果不变】" if m.same_result else "【会改变结果】") if zh else \
               ("[same result]" if m.same_result else "[changes results]")
        lines.append(f"  {i}. {action_name(m.name, lang)}：{as_flags(m.update)} → {m.total_gib:.2f} GiB {same}" if zh else
                     f"  {i}. {m.name} ({as_flags(m.update)}) → {m.total_gib:.2f} GiB {same}")
    if fit.fits:
        lines.append("  以上几步之后放得下（留 20% 余量）" if zh else "  with these, it fits with the 20 % margin")
    else:
        least = fit.moves[-1].total_gib / 0.8 + 0.5       # the card on which the last total keeps its margin
        lines.append(f"  即使全部照做也放不下（{fit.moves[-1].total_gib:.2f} GiB）：至少 {least:.0f} GiB 的显卡才放得下，"
                     f"或用 ZeRO-3/FSDP 分到更多 GPU 上" if zh else
                     f"  nothing in reach fits this card: with every move it needs {fit.moves[-1].total_gib:.2f} GiB, "
                     f"which would fit a card of {least:.0f} GiB or more, or shard it over more GPUs (ZeRO-3, FSDP)")
    for m in fit.alternatives[:3]:
        lines.append(f"  或者只改这一项：{action_name(m.name, lang)}：{as_flags(m.update)} → {m.total_gib:.2f} GiB" if zh else
                     f"  or this one change alone: {m.name} ({as_flags(m.update)}) → {m.total_gib:.2f} GiB")
    return lines


def render_budget_text(b, lang="en", fmt="text", fit=None, cards=()):
    d = b.to_json_dict()
    if lang == "zh":
        head = f"{label('budget', lang)}：{d['model']}（{d['params_b']}B，可训练参数 {d['trainable_params']:,}）"
    else:
        head = f"{label('budget', lang)}: {d['model']} ({d['params_b']}B, trainable {d['trainable_params']:,})"
    body = budget_lines(d, lang)
    notes = [f"  - {assumption_text(a, lang)}" for a in d["assumptions"]]
    answer = fit_lines(fit, cards, d["total_gib"], lang) if (fit or cards) else []
    if fmt == "markdown":
        said = ([f"**{answer[0]}**", ""] + [f"- {ln.strip()}" for ln in answer[1:]] + [""]) if answer else []
        return "\n".join([f"### {head}", "", "```"] + body + ["```", ""] + said + [f"**{label('assumptions', lang)}**", ""]
                         + [n.strip() for n in notes]) + "\n"
    from .wrap import report_width, wrap
    width = report_width()
    lines = [head, ""] + body + ([""] + answer if answer else []) + ["", label("assumptions", lang)] + notes
    return "\n".join(piece for ln in lines for piece in wrap(ln, width)) + "\n"
