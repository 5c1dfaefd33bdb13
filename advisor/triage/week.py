"""Week over week: a triage report compared with last week's (`--baseline`), and filtered views.

A group of this week is the same group as one of last week when they share an id, or when one's id is
among the other's aliases (grouping._ids: a group keeps the smallest id of its signatures and lists the
others). A matched group takes last week's id back, so adding files never renames a group a desk
already tracks. Two old groups that match one new group are a merge, and the report says so.
"""

import json

CHANGES = ("new", "grown", "shrunk", "same")


class BaselineError(ValueError):
    """The baseline is not a triage report this tool wrote (one line, for the usage error)."""


def load_baseline(path):
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8", errors="replace"))
    except OSError as e:
        raise BaselineError(f"{path}: cannot read the baseline ({e.strerror or e})")
    except ValueError:
        raise BaselineError(f"{path}: the baseline is not JSON (write it with `triage --format json -o FILE`)")
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("oom-doctor/triage/") \
            or not isinstance(data.get("groups"), list):
        raise BaselineError(f"{path}: not a triage report (its schema is not oom-doctor/triage/v1)")
    return data


def _names(g):
    return {g.get("id")} | set(g.get("aliases") or [])


def _keep_old_id(g, was):
    """A group that matches last week's under another of its names takes last week's id back (the
    largest old group's, when several merged): adding files never renames a group a desk already
    tracks; the new id is kept among the aliases."""
    old_id = max(was.values(), key=lambda o: (int(o.get("count") or 0), str(o["id"])))["id"]
    g["aliases"] = sorted((set(g.get("aliases") or []) | {g["id"]}) - {old_id})
    g["id"] = old_id


def compare(report, baseline, baseline_name):
    """Marks each group of `report` new/grown/shrunk/same (with `was`, last week's count) and adds
    `change`: each class's groups with their counts then and now, the merges, and the groups gone."""
    old = [g for g in baseline["groups"] if isinstance(g, dict) and g.get("id")]
    by_name = {}
    for g in old:
        for n in _names(g):
            by_name.setdefault(n, []).append(g)
    matched, change = set(), {"baseline": baseline_name, "merged": [], "gone": []}
    change.update({c: [] for c in CHANGES})
    for g in report["groups"]:
        was = {o["id"]: o for n in _names(g) for o in by_name.get(n, [])}
        matched |= set(was)
        if was and g["id"] not in was:
            _keep_old_id(g, was)
        before = sum(int(o.get("count") or 0) for o in was.values())
        kind = ("new" if not was else "grown" if g["count"] > before else "shrunk" if g["count"] < before else "same")
        g["change"], g["was"] = kind, before
        change[kind].append({"id": g["id"], "was": before, "now": g["count"]})
        if len(was) > 1:
            change["merged"].append({"id": g["id"], "from": sorted(was)})
    change["gone"] = [{"id": o["id"], "count": o.get("count"), "title": o.get("title", ""), "rule": o.get("rule")}
                      for o in old if o["id"] not in matched]
    report["change"] = change
    return report


def apply_filters(report, verdicts=(), rules=(), min_count=None):
    """Keeps the groups that pass every filter given; the summary still counts every file, and
    `filtered_out` says how many groups and files the view leaves out."""
    def keep(g):
        return ((not verdicts or g["verdict"] in verdicts) and (not rules or g["rule"] in rules)
                and (min_count is None or g["count"] >= min_count))
    if not (verdicts or rules or min_count):
        return report
    kept = [g for g in report["groups"] if keep(g)]
    dropped = [g for g in report["groups"] if not keep(g)]
    report["groups"] = kept
    report["filtered_out"] = {"groups": len(dropped), "files": sum(g["count"] for g in dropped),
                              "filters": {"verdict": list(verdicts), "rule": list(rules), "min_count": min_count}}
    return report


_EN = {"new": "new", "grown": "grown", "shrunk": "shrunk", "gone": "gone", "merged": "merged"}
_ZH = {"new": "新增", "grown": "增多", "shrunk": "减少", "gone": "消失", "merged": "合并"}


def change_lines(report, lang="en"):
    """The lines a table or a Markdown report prints about the baseline and the filters."""
    out = []
    ch = report.get("change")
    words = _ZH if lang == "zh" else _EN
    if ch:
        head = (f"与基线 {ch['baseline']} 相比：" if lang == "zh" else f"since the baseline {ch['baseline']}: ")
        parts = [f"{words[k]} {len(ch[k])}" for k in ("new", "grown", "shrunk", "gone") if ch[k]]
        sep, none = ("，", "无变化") if lang == "zh" else (", ", "no change")
        out.append(head + (sep.join(parts) or none))
        for k in ("new", "grown", "shrunk"):
            for c in ch[k]:
                out.append(f"  {words[k]} [{c['id']}] {c['was']} → {c['now']}")
        for m in ch["merged"]:
            out.append(f"  {words['merged']} [{m['id']}] ← " + ", ".join(f"[{i}]" for i in m["from"]))
        for g in ch["gone"]:
            out.append(f"  {words['gone']} [{g['id']}] {g['count']} → 0  {g['title']}")
    f = report.get("filtered_out")
    if f:
        out.append(f"筛选后未显示 {f['groups']} 组（{f['files']} 个文件）" if lang == "zh"
                   else f"filtered out: {f['groups']} groups ({f['files']} files)")
    return out
