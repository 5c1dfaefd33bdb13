"""Markdown report, ready to paste as an issue reply."""

from ..i18n import colon, facts_line, label
from .text import bases, conflict_text, fact_rows, headline, memory_rows, step_line


def render_markdown(d, lang="en"):
    L = lambda k: label(k, lang)  # noqa: E731
    zh = lang == "zh"
    out = [f"### {headline(d, lang)}", "", d.summary, "",
           f"| {L('phase')} | {L('component')} | {L('rule')} |", "|---|---|---|",
           f"| {L(d.phase)} | {L(d.component)} | `{d.rule}`" + (f"（{L('confidence')} {d.confidence:.2f}）" if zh else f" ({d.confidence:.2f})")
           + " |", ""]
    if d.explanation:
        out += [d.explanation, ""]
    rows = memory_rows(d.memory, lang)
    if rows:
        out += [f"**{L('numbers')}**", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]
    if d.budget:
        from .budget_text import budget_lines
        out += [f"**{L('budget')}**", "", "```"] + budget_lines(d.budget, lang, d.memory) + ["```", ""]
    if d.plan:
        out += [f"**{L('plan')}**", ""]
        for i, (step, basis) in enumerate(zip(d.plan, bases(d.plan)), 1):
            out.append(f"{i}. {step_line(step, lang, basis)}" + (f"  \n   {step['why']}" if step.get("why") else ""))
        out.append("")
    if d.patch:
        out += [f"**{L('patch')}**", "", "```diff", d.patch.rstrip("\n"), "```", ""]
    if d.command:
        out += [f"**{L('command')}**", "", "```sh", d.command.rstrip("\n"), "```", ""]
    if d.conflicts:
        out += [f"**{L('conflicts')}**{colon(lang)}" + ("；" if zh else "; ").join(conflict_text(c, lang)
                                                                                for c in d.conflicts), ""]
    for note in d.notes:
        out += [f"> {note}", ""]
    out += [f"<details><summary>{L('evidence')}</summary>", "", "```"]
    out += [f"{('~' if e.approximate else '') + str(e.line):>7}: {e.text[:200]}" for e in d.evidence] + ["```", "", "</details>"]
    facts = fact_rows(d.facts)
    if facts:
        out += ["", f"_{L('facts')}{colon(lang)}" + facts_line(facts, lang) + "_"]
    return "\n".join(out) + "\n"
