"""`oom-doctor explain`: one rule's declaration as readable text."""

import textwrap

from ..core.i18n import action_name, label
from ..diagnosis.diagnose import fill

# A rule's words name the numbers of the log it matched ({tried}, {total}…); a rule on its own has
# none, so letters stand for them, the same in both languages.
STAND_INS = {"tried": "N GiB", "total": "M GiB", "free": "F GiB", "allocated": "A GiB", "reserved_unallocated": "R GiB",
             "other": "O GiB", "step": "S", "total_steps": "T", "phase": "…"}
STAND_IN_NOTE = {"en": "(N, M, A, R, S…: the numbers a report fills in from your log.)",
                 "zh": "（N、M、A、R、S 等字母：报告中会换成你日志里的实际数值。）"}


def _name(key, lang):
    if key == "auto":
        return "按日志判断" if lang == "zh" else "auto"
    return label(key, lang) if lang == "zh" else key


def explain_text(rule, lang="en"):
    when = rule.when.stated()
    zh = lang == "zh"
    if zh:
        meta = (f"结论：{_name(rule.verdict, lang)}   发生阶段：{_name(rule.phase, lang)}   "
                f"占用来源：{_name(rule.component, lang)}   优先级：{rule.priority}   置信度：{rule.confidence}")
        wrap = lambda text: [text]  # noqa: E731  (Chinese has no spaces to wrap at: one line per paragraph)
    else:
        meta = (f"verdict: {rule.verdict}   phase: {rule.phase}   component: {rule.component}   "
                f"priority: {rule.priority}   confidence: {rule.confidence}")
        wrap = lambda text: textwrap.wrap(text, 100)  # noqa: E731
    lines = [f"{rule.id} {rule.name} — {getattr(rule.title, lang)}", "", meta, ""]
    summary, explanation = getattr(rule.summary, lang), getattr(rule.explanation, lang)
    lines += wrap(fill(summary, STAND_INS)) + [""]
    lines += wrap(fill(explanation, STAND_INS)) + [""]
    if "{" in summary + explanation:
        lines += [STAND_IN_NOTE["zh" if zh else "en"], ""]
    if zh:
        lines.append("首选操作：" + "、".join(action_name(a, lang) for a in rule.actions))
        lines.append("触发条件：" + "；".join(f"{k} = {' | '.join(v)}" for k, v in when.items()))
        if rule.unless:
            lines.append("例外条件：" + "；".join(f"{k} = {' | '.join(v)}" for k, v in rule.unless.stated().items()))
        return "\n".join(lines)
    lines.append("first moves: " + ", ".join(rule.actions))
    lines.append("matches when: " + "; ".join(f"{k} = {' | '.join(v)}" for k, v in when.items()))
    if rule.unless:
        lines.append("unless: " + "; ".join(f"{k} = {' | '.join(v)}" for k, v in rule.unless.stated().items()))
    return "\n".join(lines)
