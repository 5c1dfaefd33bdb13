"""Issue trackers as triage input (`oom-doctor triage --issues`): one report per issue.

Reads a `gh issue list --json number,title,body,url,comments` export, the REST API's JSON (one issue,
a list of issues, or an issue's comments), and markdown files. A report is what the issue and its
comments paste in code fences and `<details>` blocks: the log is every block that is not a config,
in order; a YAML or JSON block that reads as a mapping is the report's config. The member's id is the
issue's URL (for markdown: the file), so the group's reply can be posted back where it came from.
"""

import json
import os
import re

from ..read.reader import InputError

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\n`]*)\n(.*?)^ {0,3}\1[ \t]*$", re.S | re.M)
_DETAILS = re.compile(r"<details\b[^>]*>(.*?)</details\s*>", re.S | re.I)
_SUMMARY = re.compile(r"<summary\b[^>]*>.*?</summary\s*>", re.S | re.I)
_CONFIG_INFO = {"yaml", "yml", "json", "jsonc"}
_KEY_LINE = re.compile(r"^[A-Za-z_][\w.\-]*\s*:(?:\s|$)", re.M)
_LOGGY = re.compile(r"Traceback|Error\b|error:|out of memory|\d+%\|", re.I)
MAX_REPORT_BYTES = 8 << 20      # a thread is a paste, not a log archive: bounded like the reader's lines


def blocks_of(text):
    """[(info string, body)] of the code fences and <details> blocks of one markdown text, in order.
    A fence inside <details> counts once (as a fence); a <details> without fences is its own block."""
    out = []
    for m in _DETAILS.finditer(text):
        inner = _SUMMARY.sub("", m.group(1))
        if not _FENCE.search(inner):
            out.append((m.start(), "", inner.strip("\n")))
    out += [(m.start(), m.group(2).strip().lower(), m.group(3).rstrip("\n")) for m in _FENCE.finditer(text)]
    return [(info, body) for _, info, body in sorted(out, key=lambda b: b[0])]


def _is_config(info, body):
    """A block written as a config: a YAML/JSON fence, or key: value lines with nothing of a log."""
    lang = info.split()[0] if info else ""
    if lang in _CONFIG_INFO:
        return True
    if lang or _LOGGY.search(body):
        return False
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return len(lines) >= 3 and sum(bool(_KEY_LINE.match(ln.lstrip())) for ln in lines) >= 0.8 * len(lines)


def report_of(texts):
    """(log text, config text or None, config suffix) from an issue's body and comments."""
    logs, config, suffix = [], None, ".yaml"
    for text in texts:
        for info, body in blocks_of(text or ""):
            if _is_config(info, body):
                if config is None:
                    config = body
                    suffix = ".json" if body.lstrip().startswith(("{", "[")) else ".yaml"
            else:
                logs.append(body)
    # no block at all: the error was pasted inline, in the prose; the whole thread is the log then
    log = "\n".join(logs) if logs or config is not None else "\n".join(t or "" for t in texts)
    return log.encode("utf-8")[:MAX_REPORT_BYTES], config, suffix


def _comment_bodies(comments):
    if isinstance(comments, list):
        return [c.get("body") for c in comments if isinstance(c, dict)]
    return []


def _issue_reports(data, path):
    """[(id, log bytes, config text, suffix)] of a gh or REST export already parsed."""
    issues = data if isinstance(data, list) else [data]
    if issues and all(isinstance(i, dict) and "issue_url" in i and "body" in i for i in issues):
        # the REST API's comments of one issue: one report, named by the issue
        return [(issues[0]["issue_url"], *report_of([c["body"] for c in issues]))]
    out = []
    for n, issue in enumerate(issues, 1):
        if not isinstance(issue, dict) or "body" not in issue:
            raise InputError(f"{path}: not an issue export (expected `gh issue list --json "
                             "number,title,body,url,comments` or the REST API's issue JSON)")
        name = issue.get("html_url") or issue.get("url") or f"{path}#{issue.get('number', n)}"
        out.append((name, *report_of([issue.get("body")] + _comment_bodies(issue.get("comments")))))
    return out


def reports_in(path):
    """The reports of one input file: a JSON export (.json) or a markdown file (anything else)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(64 << 20)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})")
    text = raw.decode("utf-8", errors="replace")
    if os.path.splitext(path)[1].lower() == ".json" or text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except ValueError:
            raise InputError(f"{path}: the issue export is not valid JSON")
        return _issue_reports(data, path)
    return [(path, *report_of([text]))]


def diagnose_reports(paths, lang="en"):
    """Rows (advisor.triage.batch's) of every report in `paths`, and [{path, error}] for a file that cannot be
    read. An issue with nothing in it to diagnose is an error row of its own, named by its URL."""
    import tempfile
    from .batch import diagnose_item, error_row
    rows, errors = [], []
    with tempfile.TemporaryDirectory(prefix="oom-doctor-issues-") as tmp:
        for path in paths:
            try:
                reports = reports_in(path)
            except InputError as e:
                errors.append({"path": path, "error": str(e).split(": ", 1)[-1]})
                continue
            for n, (name, log, config, suffix) in enumerate(reports):
                cfg = None
                if config is not None:
                    cfg = os.path.join(tmp, f"config-{len(rows)}-{n}{suffix}")
                    with open(cfg, "w", encoding="utf-8") as fh:
                        fh.write(config)
                row = diagnose_item(name, log, lang, config=cfg) if log.strip() else \
                    error_row(name, "the issue holds no log: nothing pasted in it or its comments")
                if "config" in row:
                    row["config"] = "from the issue"      # the temporary file is gone after the run
                rows.append(row)
    return rows, errors
