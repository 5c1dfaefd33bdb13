"""The memory budget as aligned text lines with a bar per component (text and markdown reports)."""

import unicodedata

from ..i18n import label


def pad(text, width):
    """Left-align for a terminal: CJK characters take two columns."""
    cols = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    return text + " " * max(0, width - cols)

COMPONENTS = ("weights_gib", "gradients_gib", "optimizer_states_gib", "activations_gib", "logits_gib",
              "working_buffers_gib", "overhead_gib")
PHASES = ("forward", "backward", "optimizer_step")


def budget_lines(b, lang="en", memory=None, width=30):
    b = b if isinstance(b, dict) else b.to_json_dict()
    scale = max(b.get("capacity_gib") or 0, b["total_gib"]) or 1
    lines = []
    for key in COMPONENTS:
        value = b.get(key) or 0
        if key == "working_buffers_gib" and not value:
            continue
        bar = "█" * max(0, round(width * value / scale)) if value else ""
        lines.append(f"  {pad(label(key, lang), 28)} {value:8.2f} GiB  {bar}")
        terms = b.get("overhead_terms") or {}
        if key == "overhead_gib" and terms:
            lines.append("    " + " · ".join(f"{label(k, lang)} {v:.2f}" for k, v in terms.items()))
    lines.append(f"  {pad(label('total', lang), 28)} {b['total_gib']:8.2f} GiB")
    phases = b.get("phases") or {}
    if phases:
        lines.append(f"  {pad(label('peak_in', lang), 28)} {label(b.get('peak_phase'), lang)} ("
                     + ", ".join(f"{label(k, lang)} {phases[k]:.2f}" for k in PHASES if k in phases) + " GiB)")
    if b.get("padding"):
        lines.append(f"  {b['padding']}")
    if b.get("capacity_gib"):
        verdict = label("fits", lang) if b.get("fits") else label("not_fit", lang)
        lines.append(f"  {pad(label('capacity_gib', lang), 28)} {b['capacity_gib']:8.2f} GiB   "
                     f"{label('usable_gib', lang)} {b['usable_gib']:.2f} GiB, {label('headroom', lang)} "
                     f"{b['headroom_pct']:.0f} % → {verdict}")
    return lines


def render_budget_text(b, lang="en", fmt="text"):
    d = b.to_json_dict()
    head = f"{label('budget', lang)}: {d['model']} ({d['params_b']}B, trainable {d['trainable_params']:,})"
    body = budget_lines(d, lang)
    notes = [f"  - {a}" for a in d["assumptions"]]
    if fmt == "markdown":
        return "\n".join([f"### {head}", "", "```"] + body + ["```", "", f"**{label('assumptions', lang)}**", ""]
                         + [n.strip() for n in notes]) + "\n"
    return "\n".join([head, ""] + body + ["", label("assumptions", lang)] + notes) + "\n"
