"""Render a diagnosis: text (terminal), markdown (issue reply), json (contract), html (report)."""


def render(diagnosis, fmt="text", lang="en", color=False):
    if fmt == "json":
        import json
        return json.dumps(diagnosis.to_json_dict(), ensure_ascii=False, indent=2) + "\n"
    if fmt == "markdown":
        from .markdown import render_markdown
        return render_markdown(diagnosis, lang)
    if fmt == "html":
        from .html import render_html
        return render_html(diagnosis, lang)
    from .text import render_text
    return render_text(diagnosis, lang, color)
