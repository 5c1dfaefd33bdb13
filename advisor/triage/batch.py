"""Triage as map -> shuffle -> reduce, with no I/O policy of its own.

map:    diagnose_item / diagnose_batch: one log (a path, or the bytes of one) -> one flat row, pure.
reduce: partial(rows) per partition, merge_groupings(parts), finish(...) -> the triage/v1 report.

Any engine (local processes, Ray Data) runs the same functions, so a partitioned run gives exactly the
one-pass result. A partial grouping keeps, per member, only its path, mtime and numbers; the full
row is kept only for the member that can become its signature's representative (see _keep), so the
reducer's memory grows with the paths (and four numbers and a step each, for the member's own reply),
not with the diagnoses.
"""

import os
import re
import stat

FINGERPRINT_VERSION = "v3"      # v2: a component decided by sizes alone is read as unknown (triage.id_key);
                                # v3: a long phrase ends before its argument list (triage._phrase)
_FACT_KEYS = ("framework", "model", "step")
_MEM_KEYS = ("total_gib", "tried_gib", "reserved_unallocated_gib", "allocated_by_pytorch_gib")
_PLAN_KEYS = ("action", "display", "alternative")
_PLAN_STEPS = 4             # a reply quotes two; alternatives are skipped on the way
_SLIM_KEYS = ("verdict", "accelerator", "phase", "component", "confidence", "rule", "title", "summary", "evidence")
_KILLED = "process killed, no error before it"
_TAIL = 4096
# A run the shell or the kernel killed prints no error: the last lines say so, often glued to a bar.
_KILL = re.compile(r"(?:^|[\]\s])(?:Killed|Terminated)\s*$|SIGKILL|signal 9\b|exit(?: code|code| status)\s*:?\s*(?:-9|137)\b",
                   re.M)
_SUMMARY_DIMS = ("verdict", "phase", "component", "accelerator", "framework")


def _plan_wanted(diagnosis):
    """Only an out-of-memory reply quotes plan steps; the others use the rule's own ladder or ask
    for more, so their plan (~15 % of a diagnosis) is not made."""
    return diagnosis.verdict in ("device_oom", "host_oom")


def killed_in(tail_bytes):
    """True when the last few KB of a log say the process was killed."""
    from ..read.reader import sniff_encoding
    try:
        return bool(_KILL.search(tail_bytes.decode(sniff_encoding(tail_bytes[:4096]), errors="replace")))
    except Exception:
        return False


def _tail_of(path):
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - _TAIL))
            return fh.read(_TAIL)
    except OSError:
        return b""


def _without_path(msg, path):
    return msg[len(path) + 2:] if msg.startswith(path + ": ") else msg


def fingerprint(key, sig):
    """Versioned id of one failure: its id key (triage.id_key) and the normalised signature. Equal to the id
    a group of only this signature gets; the version changes when normalise() or the key changes."""
    from .grouping import signature_id
    return f"{FINGERPRINT_VERSION}:" + signature_id(tuple(key), sig)


def error_row(id, error):
    return {"id": id, "error": error}


def diagnose_item(id, data_or_path, lang="en", config=None):
    """One log -> one row: the slim diagnosis a group needs (with `source` = id, `signature`,
    `fingerprint`), or {"id", "error"} with a one-line error. Never raises.

    `data_or_path` is a path (a file or a run folder, read here) or the bytes of one log; `config`,
    for bytes, a config file that came with them (a path's config is the one beside it)."""
    from ..read.reader import InputError
    from ..read.files import os_error, why_not_regular
    is_path = isinstance(data_or_path, (str, os.PathLike))
    if is_path:
        path = os.fspath(data_or_path)
        try:
            st = os.stat(path)
        except OSError as e:
            return error_row(id, _without_path(str(os_error(path, e)), path))
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            return error_row(id, why_not_regular(st.st_mode, "log file") + "; skipped")
    try:
        # The plan is made here, in the map: the reducer never re-diagnoses a representative.
        if is_path:
            d, config = _diagnose_path(path, lang, stat.S_ISREG(st.st_mode))
        else:
            d, config = _diagnose_data(bytes(data_or_path), str(id), lang, config)
    except InputError as e:
        return error_row(id, _without_path(str(e), path if is_path else str(id)))
    except Exception as e:          # a crash on one file must not lose the other 9 999
        return error_row(id, f"internal error: {type(e).__name__}: {e}".splitlines()[0])
    row = _slim(id, d, data_or_path, is_path)
    if config:
        row["config"] = config
    return row


def _diagnose_data(data, name, lang, config):
    """The bytes of one log, with a config file when the item brought one (an issue's config block)."""
    from ..pipeline import diagnose_bytes
    return _with_config(lambda **kw: diagnose_bytes(data, name, lang=lang, with_plan=_plan_wanted, **kw), config)


def _diagnose_path(path, lang, is_file):
    """A path, with the config beside it (triage_config) as its --config."""
    from ..pipeline import diagnose_any
    from .config import config_beside
    return _with_config(lambda **kw: diagnose_any(path, lang=lang, with_plan=_plan_wanted, **kw),
                        config_beside(path) if is_file else None)


def _with_config(diagnose, config):
    """(diagnosis dict, the config used or None): a config that cannot be read costs the member its
    config, never its diagnosis."""
    from ..read.reader import InputError
    if config:
        try:
            return diagnose(config_path=config).to_json_dict(), config
        except (InputError, ValueError):
            pass
    return diagnose().to_json_dict(), None


def _slim(id, d, data_or_path, is_path):
    from .grouping import id_key, signature, weak_component
    row = {"id": id}
    row.update({k: d[k] for k in _SLIM_KEYS})
    row["component_weak"] = weak_component(d)
    row["source"] = id              # as given, not as the reader named it
    row["memory"] = {k: d["memory"].get(k) for k in _MEM_KEYS}
    row["facts"] = {k: d["facts"].get(k) for k in _FACT_KEYS}
    row["plan"] = [{k: s.get(k) for k in _PLAN_KEYS} for s in (d.get("plan") or [])[:_PLAN_STEPS]]
    if d["verdict"] == "no_failure" and killed_in(_tail_of(data_or_path) if is_path else bytes(data_or_path[-_TAIL:])):
        row["killed"] = True
    # a killed run never shares the healthy group
    row["signature"] = _KILLED if row.get("killed") else signature(d)
    row["fingerprint"] = fingerprint(id_key(row), row["signature"])
    if d.get("run_folder"):
        row["run_folder"] = {k: d["run_folder"][k] for k in ("log", "config", "records")}
    if is_path:
        try:
            row["mtime"] = os.path.getmtime(d["run_folder"]["log"] or data_or_path) if d.get("run_folder") \
                else os.path.getmtime(data_or_path)
        except OSError:
            row["mtime"] = None
    else:
        row["mtime"] = None         # bytes carry no time; an engine that knows one sets it
    return row


def diagnose_batch(items, lang="en"):
    """[(id, bytes or path)] -> [row], in order."""
    return [diagnose_item(i, data, lang) for i, data in items]


# --- reduce ---------------------------------------------------------------------------------------

def _tried(row):
    return (row.get("memory") or {}).get("tried_gib") or 0


def _counts(row):
    return {"verdict": row.get("verdict"), "phase": row.get("phase"), "component": row.get("component"),
            "accelerator": row.get("accelerator"), "framework": (row.get("facts") or {}).get("framework")}


def empty():
    return {"keys": {}, "summary": {d: {} for d in _SUMMARY_DIMS}, "errors": []}


def _keep(slot, row):
    """The representative of a signature is the member whose request is nearest the middle one, ties
    on the path: of the members with one request size, only the smallest path can win, so that one
    full row per (signature, size) is all a merge needs."""
    t = _tried(row)
    old = slot["full"].get(t)
    if old is None or row["source"] < old["source"]:
        slot["full"][t] = row


def add(state, row):
    """Fold one row into a partial grouping (in place)."""
    if "error" in row:
        state["errors"].append({"path": row["id"], "error": row["error"]})
        return state
    from .grouping import key_of
    key = key_of(row) + (bool(row.get("component_weak")),)
    slot = state["keys"].setdefault(key, {}).setdefault(row["signature"], {"members": [], "full": {}})
    # what a member's own reply quotes (triage.member_replies): its numbers and its step
    slot["members"].append((row["source"], row.get("mtime"), tuple((row.get("memory") or {}).get(k) for k in _MEM_KEYS),
                            (row.get("facts") or {}).get("step")))
    _keep(slot, row)
    for dim, value in _counts(row).items():
        counter = state["summary"][dim]
        counter[value or "unknown"] = counter.get(value or "unknown", 0) + 1
    return state


def partial(rows):
    """Rows of one partition -> its partial grouping (mergeable, see merge_groupings)."""
    state = empty()
    for row in rows:
        add(state, row)
    return state


def merge_groupings(parts):
    """Partial groupings -> one; errors keep the parts' order."""
    out = empty()
    for part in parts:
        out["errors"].extend(part["errors"])
        for dim, counter in part["summary"].items():
            mine = out["summary"][dim]
            for k, n in counter.items():
                mine[k] = mine.get(k, 0) + n
        for key, sigs in part["keys"].items():
            for sig, slot in sigs.items():
                to = out["keys"].setdefault(key, {}).setdefault(sig, {"members": [], "full": {}})
                to["members"].extend(slot["members"])
                for row in slot["full"].values():
                    _keep(to, row)
    return out


def _rows_of(state):
    """The rows triage.group needs: the kept full rows, and for every other member a stand-in with
    only what grouping reads of it (its key, signature, path, mtime and request)."""
    for key, sigs in state["keys"].items():
        verdict, rule, phase, component, accelerator, weak = key
        for sig, slot in sigs.items():
            full = {r["source"]: r for r in slot["full"].values()}
            for source, mtime, numbers, step in slot["members"]:
                yield full.get(source) or {
                    "verdict": verdict, "rule": rule, "phase": phase, "component": component,
                    "component_weak": weak, "accelerator": accelerator, "signature": sig, "source": source,
                    "mtime": mtime, "memory": dict(zip(_MEM_KEYS, numbers)), "facts": {"step": step}}


def group_rows(rows, lang="en"):
    """Rows (no errors) -> [triage.Group], the one-pass grouping."""
    from .grouping import group
    return group(list(rows), lang)


def finish(state, lang="en", errors_before=()):
    """A (merged) partial grouping -> the triage/v1 report dict. `errors_before` come first (paths
    that matched nothing)."""
    from .grouping import OOM_VERDICTS
    groups = group_rows(_rows_of(state), lang)
    errors = list(errors_before) + state["errors"]
    diagnosed = sum(len(slot["members"]) for sigs in state["keys"].values() for slot in sigs.values())
    ooms = sum(len(slot["members"]) for key, sigs in state["keys"].items() if key[0] in OOM_VERDICTS for slot in sigs.values())
    summary = {"files": diagnosed + len(errors), "diagnosed": diagnosed, "errors": len(errors), "ooms": ooms,
               "groups": len(groups)}
    for dim in _SUMMARY_DIMS:
        summary[f"by_{dim}"] = dict(sorted(state["summary"][dim].items(), key=lambda kv: (-kv[1], str(kv[0]))))
    return {"schema": "oom-doctor/triage/v1", "summary": summary,
            "groups": [g.to_dict() for g in groups], "errors": errors}
