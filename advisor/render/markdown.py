"""Markdown report, ready to paste as an issue reply."""

from ..core.i18n import basis_line, colon, facts_line, label
from ..core.safe import md_fence, md_text
from .text import (bases, conflict_text, evidence_where, fact_rows, headline, memory_rows, snapshot_head,
                   snapshot_lines, step_line)


def render_markdown(d, lang="en"):
    L = lambda k: label(k, lang)  # noqa: E731
    zh = lang == "zh"
    # values from the log and the config are escaped (md_text) or fenced (md_fence): a config value
    # holding ``` or <img> must not close a block or render as markup in the issue it is pasted into.
    # The rules' own texts (title, summary, explanation, why) are ours, with code spans meant as such.
    out = [f"### {headline(d, lang)}", ""] + ([md_text(d.run_folder["line"]), ""] if d.run_folder else []) + [d.summary, "",
           f"| {L('phase')} | {L('component')} | {L('rule')} |", "|---|---|---|",
           f"| {L(d.phase)} | {L(d.component)} | `{d.rule}`" + (f"（{L('confidence')} {d.confidence:.2f}）" if zh else f" ({d.confidence:.2f})")
           + " |", ""]
    if basis_line(d, lang):
        out += [f"_{md_text(basis_line(d, lang))}_", ""]
    if d.explanation:
        out += [d.explanation, ""]
    rows = memory_rows(d.memory, lang)
    if rows:
        out += [f"**{L('numbers')}**", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]
    if d.snapshot:
        out += [f"**{md_text(snapshot_head(d.snapshot, lang))}**", ""] + md_fence("\n".join(
            ln.strip() for ln in snapshot_lines(d.snapshot, lang))) + [""]
    if d.budget:
        from .budget_text import assumed_lines, budget_lines
        out += [f"**{L('budget')}**", ""] + md_fence("\n".join(budget_lines(d.budget, lang, d.memory))) + [""]
        out += [f"- {ln.strip()}" for ln in assumed_lines(d.budget, lang)] + ([""] if assumed_lines(d.budget, lang) else [])
    if d.plan:
        out += [f"**{L('plan')}**", ""]
        for i, (step, basis) in enumerate(zip(d.plan, bases(d.plan)), 1):
            out.append(f"{i}. {md_text(step_line(step, lang, basis))}"
                       + (f"  \n   {step['why']}" if step.get("why") else ""))
        out.append("")
    if d.patch:
        out += [f"**{L('patch')}**", ""] + md_fence(d.patch, "diff") + [""]
    if d.command:
        out += [f"**{L('command')}**", ""] + md_fence(d.command, "sh") + [""]
    if d.conflicts:
        out += [f"**{L('conflicts')}**{colon(lang)}" + ("；" if zh else "; ").join(md_text(conflict_text(c, lang))
                                                                                for c in d.conflicts), ""]
    for note in d.notes:
        out += [f"> {md_text(note)}", ""]
    where = [evidence_where(e, lang) for e in d.evidence]
    evidence = "\n".join(f"{w:>7}{': ' if w[-1:].isdigit() else colon(lang)}{e.text[:200]}" for w, e in zip(where, d.evidence))
    out += [f"<details><summary>{L('evidence')}</summary>", ""] + md_fence(evidence) + ["", "</details>"]
    facts = fact_rows(d.facts)
    if facts:
        out += ["", f"_{L('facts')}{colon(lang)}" + md_text(facts_line(facts, lang)) + "_"]
    return "\n".join(out) + "\n"
