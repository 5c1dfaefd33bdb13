"""`oom-doctor explain`: one rule's declaration as readable text."""

import textwrap


def explain_text(rule, lang="en"):
    when = rule.when.stated()
    lines = [f"{rule.id} {rule.name} — {getattr(rule.title, lang)}", "",
             f"verdict: {rule.verdict}   phase: {rule.phase}   component: {rule.component}   "
             f"priority: {rule.priority}   confidence: {rule.confidence}", ""]
    lines += textwrap.wrap(getattr(rule.summary, lang), 100) + [""]
    lines += textwrap.wrap(getattr(rule.explanation, lang), 100) + [""]
    lines.append(("first moves: " if lang == "en" else "首选操作：") + ", ".join(rule.actions))
    lines.append(("matches when: " if lang == "en" else "触发条件：") +
                 "; ".join(f"{k} = {' | '.join(v)}" for k, v in when.items()))
    if rule.unless:
        lines.append("unless: " + "; ".join(f"{k} = {' | '.join(v)}"
                                            for k, v in rule.unless.stated().items()))
    return "\n".join(lines)
