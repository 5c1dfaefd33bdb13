"""Rendering of a triage report (triage_cli.run_triage's dict): table, Markdown, CSV, JSON, HTML.

Every file name and every line quoted from a log goes through advisor/safe.py before it joins the
output: a name may hold anything but '/' and NUL, a log line any escape sequence.
"""


def _gib(x):
    return "—" if x is None else (f"{x * 1024:.0f} MiB" if x < 1 else f"{x:.2f} GiB")


def _counts(d, lang="en"):
    if lang == "zh":
        from ..core.i18n import label
        return "，".join(f"{label(k, lang) if k != 'none' else '无'} {v}" for k, v in d.items()) or "—"
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "—"


_ZH_BY = {"verdict": "结论", "phase": "发生阶段", "component": "占用来源", "accelerator": "加速器", "framework": "框架"}


def _summary_lines(s, fmt="{:<12} {}", lang="en"):
    if lang == "zh":
        from ..render.budget_text import pad
        head = (f"{s['files']} 个文件：已诊断 {s['diagnosed']}，含显存或内存不足 {s['ooms']}，"
                f"无法读取 {s['errors']}；共 {s.get('groups', 0)} 组")
        line = (lambda k, v: f"{pad(k, 12)} {v}") if fmt == "{:<12} {}" else fmt.format
        return [head] + [line(_ZH_BY[name], _counts(s["by_" + name], lang))
                         for name in ("verdict", "phase", "component", "accelerator", "framework")]
    head = (f"{_n(s['files'], 'file')}: {s['diagnosed']} diagnosed, {s['ooms']} with an OOM, "
            f"{s['errors']} unreadable; {_n(s.get('groups', 0), 'group')}")
    return [head] + [fmt.format(name, _counts(s["by_" + name]))
                     for name in ("verdict", "phase", "component", "accelerator", "framework")]


def render_table(r, lang="en"):
    zh = lang == "zh"
    from .week import change_lines
    out = _summary_lines(r["summary"], lang=lang) + change_lines(r, lang) + [""]
    for i, g in enumerate(r["groups"], 1):
        mem = g["memory"]
        if zh:
            from ..core.i18n import label
            out.append(f"{i:>3}. [{g['id']}] {g['count']} 个文件（{100 * g['share']:.1f}%）  {label(g['verdict'], lang)}  "
                       f"{g['rule']}  {label(g['phase'], lang)}/{label(g['component'], lang)}  {g['accelerator']}  "
                       f"总容量 {_gib(mem['total_gib'])}，失败的申请 {_gib(mem['tried_gib'])}")
            out += [f"     {g['title']}", f"     代表日志：{g['representative']}"] + _evidence(g, "     关键行：") + \
                   [f"     最早：{g['first']}   最晚：{g['last']}", f"     分组依据：{g['reason']}",
                    f"     成员（{g['count']}）：{_listed(g, '、', lang)}", f"     回复：{g['reply']}", ""]
            continue
        out.append(f"{i:>3}. [{g['id']}] {_n(g['count'], 'file')} ({g['share']:.1%})  {g['verdict']}  {g['rule']}  "
                   f"{g['phase']}/{g['component']}  {g['accelerator']}  capacity {_gib(mem['total_gib'])}, tried {_gib(mem['tried_gib'])}")
        out += [f"     {g['title']}", f"     representative: {g['representative']}"] + _evidence(g, "     evidence: ") + \
               [f"     first: {g['first']}   last: {g['last']}", f"     grouped: {g['reason']}",
                f"     members ({g['count']}): {_listed(g, ', ', lang)}", f"     reply: {g['reply']}", ""]
    if r["errors"]:
        out.append(f"无法读取的文件（{len(r['errors'])}）：" if zh else f"errors ({len(r['errors'])}):")
        out += [f"  {e['path']}: {e['error']}" for e in r["errors"]]
    return "\n".join(out).rstrip("\n") + "\n"


MEMBERS_SHOWN = 10          # a group of 4 000 is a count, not a page of names


def _listed(g, sep, lang):
    shown = g["members"][:MEMBERS_SHOWN]
    more = g["count"] - len(shown)
    tail = ([f"另有 {more} 个" if lang == "zh" else f"and {more} more"] if more > 0 else [])
    return sep.join(shown + tail)


def _evidence(g, label):
    line = (g.get("evidence") or "").replace("`", "'")
    return [f"{label}`{line}`"] if line else []


def _details(g, lang):
    """Markdown: the members folded under the group, bounded like the table's list."""
    from ..core.safe import md_code
    more = g["count"] - min(g["count"], MEMBERS_SHOWN_MD)
    out = ["", "<details><summary>" + (f"成员（{g['count']} 个）" if lang == "zh" else f"members ({g['count']})")
           + "</summary>", ""]
    out += [f"- {m}" for m in g["members"][:MEMBERS_SHOWN_MD]]
    if more > 0:
        out.append(f"- 另有 {more} 个" if lang == "zh" else f"- and {more} more")
    if g.get("evidence"):
        out += ["", ("代表日志的关键行：" if lang == "zh" else "The representative's evidence: ")
                + md_code(g["evidence"])]
    return out + ["", "</details>"]


MEMBERS_SHOWN_MD = 50


def _cell(text):
    """A table cell: GFM splits cells at '|' even inside a code span, unless it is escaped."""
    return text.replace("|", "\\|")


def render_markdown(r, lang="en"):
    """Paths arrive as code spans (see _named); other outside text is escaped here."""
    from ..core.safe import md_text
    s = r["summary"]
    if lang == "zh":
        from ..core.i18n import label
        out = ["# oom-doctor 批量分诊", ""] + [f"- {ln}" for ln in _summary_lines(s, "**{}**：{}", lang)] + [""]
        out += _changes_md(r, lang)
        out += ["| # | 分组 | 文件数 | 占比 | 结论 | 规则 | 发生阶段 | 占用来源 | 总容量 | 失败的申请 | 代表日志 |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for i, g in enumerate(r["groups"], 1):
            out.append(f"| {i} | `{g['id']}` | {g['count']} | {100 * g['share']:.1f}% | {label(g['verdict'], lang)} | "
                       f"{g['rule']} | {label(g['phase'], lang)} | {label(g['component'], lang)} | "
                       f"{_gib(g['memory']['total_gib'])} | {_gib(g['memory']['tried_gib'])} | {_cell(g['representative'])} |")
        for i, g in enumerate(r["groups"], 1):
            out += ["", f"## {i}. {md_text(g['title'])}（`{g['id']}`，{g['count']} 个文件）", "",
                    f"最早 {g['first']}，最晚 {g['last']}。分组依据：{md_text(g['reason'])}", "", "> " + md_text(g["reply"])]
            out += _details(g, lang)
        if r["errors"]:
            out += ["", "## 无法读取的文件", ""] + [f"- {e['path']}：{md_text(e['error'])}" for e in r["errors"]]
        return "\n".join(out) + "\n"
    out = ["# oom-doctor triage", ""] + [f"- {ln}" for ln in _summary_lines(s, "**{}**: {}")] + [""]
    out += _changes_md(r, lang)
    out += ["| # | id | count | share | verdict | rule | phase | component | capacity | tried | representative |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, g in enumerate(r["groups"], 1):
        out.append(f"| {i} | `{g['id']}` | {g['count']} | {g['share']:.1%} | {g['verdict']} | {g['rule']} | "
                   f"{g['phase']} | {g['component']} | {_gib(g['memory']['total_gib'])} | "
                   f"{_gib(g['memory']['tried_gib'])} | {_cell(g['representative'])} |")
    for i, g in enumerate(r["groups"], 1):
        out += ["", f"## {i}. {md_text(g['title'])} (`{g['id']}`, {g['count']})", "",
                f"First {g['first']}, last {g['last']}. Grouped: {md_text(g['reason'])}", "", "> " + md_text(g["reply"])]
        out += _details(g, lang)
    if r["errors"]:
        out += ["", "## Errors", ""] + [f"- {e['path']}: {md_text(e['error'])}" for e in r["errors"]]
    return "\n".join(out) + "\n"


def _changes_md(r, lang):
    from ..core.safe import md_text
    from .week import change_lines
    lines = change_lines(r, lang)
    return ([md_text(lines[0]), ""] + [f"- {md_text(ln.strip())}" for ln in lines[1:]] + [""]) if lines else []


def render_csv(r):
    import csv
    import io
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["kind", "id", "count", "share", "verdict", "rule", "phase", "component", "capacity_gib", "tried_gib",
                "representative", "first", "last", "reason", "reply", "needs_info", "evidence"]
               + (["change", "was"] if "change" in r else []))
    for g in r["groups"]:
        w.writerow(["group", g["id"], g["count"], g["share"], g["verdict"], g["rule"], g["phase"], g["component"],
                    g["memory"].get("total_gib"), g["memory"].get("tried_gib"), g["representative"], g["first"], g["last"],
                    g["reason"], g["reply"], g.get("needs_info", False), g.get("evidence", "")]
                   + ([g["change"], g["was"]] if "change" in r else []))
    for g in (r.get("change") or {}).get("gone", []):
        w.writerow(["gone", g["id"], 0, "", "", g.get("rule") or "", "", "", "", "", "", "", "", g.get("title") or "",
                    "", "", "", "gone", g.get("count")])
    pad = ["", ""] if "change" in r else []
    for g in r["groups"]:       # one row per member, after the groups: a sheet can filter on kind
        replies = g.get("replies") or [{}] * len(g["members"])      # in the members' order
        for m, x in zip(g["members"], replies):
            w.writerow(["member", g["id"], 1, "", g["verdict"], g["rule"], g["phase"], g["component"],
                        x.get("total_gib", ""), x.get("tried_gib", ""), m, "", "", "", x.get("reply", ""),
                        g.get("needs_info", False), ""] + pad)
    for e in r["errors"]:
        w.writerow(["error", "", 1, "", "", "", "", "", "", "", e["path"], e["path"], e["path"], e["error"], "", "", ""] + pad)
    return buf.getvalue()


def render_report(report, fmt="table", lang="en"):
    from ..core import safe
    if fmt == "json":
        import json
        return safe.inert_json(json.dumps(report, ensure_ascii=False, indent=2)) + "\n"
    if fmt == "html":
        from ..render.html import render_triage_html
        return safe.inert(render_triage_html(_named(report, safe.inert_name), lang))
    # file names may hold anything but '/' and NUL: escaped before they join a row, so a newline or
    # an escape sequence in a name can neither split the table nor reach the terminal
    name = safe.md_code if fmt == "markdown" else safe.inert_name
    if fmt == "csv":                      # for machines: English headers and keys in every language
        return safe.inert(render_csv(_named(report, name)))
    render = {"table": render_table, "markdown": render_markdown}[fmt]
    return safe.inert(render(_named(report, name), lang))


def _named(report, name):
    """A copy of the report with every file name passed through `name` (and other text made inert)."""
    from ..core import safe
    r = safe.inert_tree(report)           # names are taken from `report`: not escaped twice
    for g in r["groups"]:
        for k in ("representative", "first", "last"):
            g[k] = name(g[k])
        g["members"] = [name(m) for m in g["members"]]
        g["replies"] = [{**x, "source": name(x["source"])} for x in g.get("replies") or []]
    r["errors"] = [{**e, "path": name(e["path"])} for e in r["errors"]]
    return r


def _n(count, noun):
    """'1 file', '2 files'."""
    return f"{count} {noun}" + ("" if count == 1 else "s")

