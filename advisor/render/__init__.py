"""Render a diagnosis: text (terminal), markdown (issue reply), json (contract), html (report).

Every format's text passes through advisor.core.safe: what came from a log, a file name or a config is
made inert (escape sequences, C1 controls, bidi overrides shown as escapes) wherever it lands.
May import: plans, diagnosis, memory, evidence, read, core (never pipeline: it renders what it is given).
"""

from ..core import safe


def render(diagnosis, fmt="text", lang="en", color=False):
    if fmt == "json":
        import json
        return safe.inert_json(json.dumps(diagnosis.to_json_dict(), ensure_ascii=False, indent=2)) + "\n"
    d = safe.inert_tree(diagnosis)          # outside text escaped before any markup or colour is added
    if fmt == "markdown":
        from .markdown import render_markdown
        return safe.inert(render_markdown(d, lang))
    if fmt == "html":
        from .html import render_html
        return safe.inert(render_html(d, lang))
    from .text import render_text
    out = render_text(d, lang, color)
    return safe.inert_coloured(out) if color else safe.inert(out)
