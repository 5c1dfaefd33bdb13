"""Triage: many diagnoses -> groups of the same failure, with counts, a representative and a reply.

A pure library over JSON-able diagnosis dicts (`Diagnosis.to_json_dict()`, or a slim subset with
`source`, `verdict`, `rule`, `phase`, `component`, `accelerator`, `evidence`, `memory`, `facts`,
`plan`; optional `mtime` orders first/last, optional `signature` saves recomputing it): no I/O, no
global state, deterministic whatever the input order. Reading files and diagnosing them in parallel
is the CLI's job (`triage_cli.py`); this part maps onto a distributed engine as it is: diagnose and
`signature()` per file anywhere, shuffle by `key_of()`, run `group()` on each key's dicts.

Grouping follows the error trackers (STYLE.md, last section): exactly on the rule's verdict, id,
phase and component (and the accelerator, see key_of) first, then fuzzily inside each key on a
normalised signature — the error phrase and the top frames, with every number a run makes up
(sizes, PIDs, ranks, timestamps, paths, device ordinals, line numbers) removed. rapidfuzz's
token_sort_ratio compares them; token_set_ratio is deliberately not used: it scores 100 whenever
one signature's words are a subset of another's, so a bare "CUDA out of memory" would swallow every
richer signature. A group's id is a SHA-1 of its key and leading signature: the same failure gets
the same id in tomorrow's run.
"""

import hashlib
import re
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Optional


SIMILARITY = 90          # token_sort_ratio at or above which two signatures are one failure
MAX_FRAMES = 3           # innermost frames kept: the ones that name what asked for memory
_ERROR_MARKERS = ("oom_error", "host_oom", "killed", "error", "cascade")
_BAD = ("device_oom", "host_oom")

# Order matters: timestamps and sizes go before the catch-all digit rule, paths before ordinals.
_NORMALISE = [(re.compile(p), r) for p, r in [
    (r"\x1b\[[0-9;?]*[ -/]*[@-~]", ""),                                        # ANSI colour
    (r"\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?", ""),              # 2025-04-17 09:32:18,798
    (r"\b\d\d[-/]\d\d(?:[-/]\d{2,4})? \d\d:\d\d:\d\d(?:[.,]\d+)?", ""),        # 03/14/2024 10:23:34 (glog, vLLM)
    (r"\b\d\d?:\d\d:\d\d(?:[.,]\d+)?", ""),                                    # a bare clock
    (r"\[(?:rank|default|RANK:?)\s*\d+\]:?|\b(?:local_)?[Rr]ank:?\s*\d+", "rank"),  # torchrun, axolotl
    (r"\b(?:pid|PID)\s*[:=]?\s*\d+|\bProcess \d+", "pid"),                      # PIDs, NVML process lines
    (r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b", "addr"),                         # pointers, Ray task ids
    (r"\d+(?:\.\d+)?\s*(?:bytes|[KMGTP]i?B)\b", "SIZE"),                       # sizes in any unit
    (r"(?:[A-Za-z]:)?(?:~|\.{1,3})?(?:[/\\][^/\\\s\"'(),:;]+)+[/\\]", ""),      # directories; the file name stays
    (r"\b(GPU|NPU|XPU|cuda|npu|xpu)\s*:?\s*\d+", r"\1"),                        # device ordinals
    (r"\bline \d+|(?<=\.py):\d+|(?<=\.cpp):\d+|(?<=\.cc):\d+", ""),            # line numbers
    (r"\d+(?:\.\d+)?", "#"),                                                   # whatever number is left
    (r"\[\s*\]|\(\s*\)", ""),                                                  # brackets left empty
    (r"\s+", " "),
]]


def normalise(text):
    """One evidence line without the numbers a run makes up (see _NORMALISE)."""
    for rx, repl in _NORMALISE:
        text = rx.sub(repl, text)
    return text.strip()


def _phrase(text):
    """The error phrase: its first sentence, not the allocator's number-laden continuation."""
    cut = len(text) >= 400                   # diagnose.py keeps 400 characters: the last word may be cut
    head = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if cut and head == text:
        head = text.rsplit(" ", 1)[0]
    return normalise(head)[:200]


def _frame(text):
    """'path/to/file.py: func — source' -> 'file.py func'. The source line is left out: a wrapped or
    cut paste loses it first, and the file and function already say where memory was asked for."""
    path, _, func = text.partition(" — ")[0].rpartition(": ")
    return normalise(f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]} {func}")


def signature(diagnosis):
    """The normalised error phrase and top frames of one diagnosis dict: equal for the same failure."""
    evidence = diagnosis.get("evidence") or []
    parts = [_phrase(e["text"]) for e in evidence if e.get("marker") in _ERROR_MARKERS][:1]
    parts += [_frame(e["text"]) for e in evidence if e.get("marker") == "frame"][:MAX_FRAMES]
    return " | ".join(p for p in parts if p)


def key_of(d):
    # The accelerator is part of the exact key: "HIP out of memory" and "CUDA out of memory" differ by
    # one word, which token_sort_ratio forgives on a short signature, yet the fixes differ by device
    # family (the allocator settings, the cards), so a ROCm group must not absorb a CUDA one.
    return (d.get("verdict"), d.get("rule"), d.get("phase"), d.get("component"), d.get("accelerator"))


@dataclass
class Group:
    id: str
    count: int
    share: float
    members: list
    verdict: str
    rule: str
    phase: str
    component: str
    accelerator: str
    representative: str
    first: str
    last: str
    reason: str
    signature: str
    title: str = ""
    memory: dict = field(default_factory=dict)   # medians over members: capacity and request
    step: Optional[int] = None                   # median last step, for rules that name it
    reply: str = ""

    def to_dict(self):
        return asdict(self)


def _median(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return round(median(values), 3) if values else None


def _cluster(sigs):
    """Leader clustering of {signature: n}: most common first, so the result ignores input order."""
    from rapidfuzz import fuzz, process, utils
    leaders, assign, scores = [], {}, {}
    for sig in sorted(sigs, key=lambda s: (-sigs[s], s)):
        hit = process.extractOne(sig, leaders, scorer=fuzz.token_sort_ratio, processor=utils.default_process,
                                 score_cutoff=SIMILARITY) if leaders else None
        if hit is None:
            leaders.append(sig)
            assign[sig], scores[sig] = sig, 100.0
        else:
            assign[sig], scores[sig] = hit[0], hit[1]
    return assign, scores


def group(diagnoses, lang="en"):
    """Diagnosis dicts (each with `source`) -> [Group], largest first; every dict lands in one group."""
    by_key = {}
    for i, d in enumerate(diagnoses):
        sig = d.get("signature") or signature(d)    # a worker may have computed it already
        by_key.setdefault(key_of(d), []).append((i, sig, d))
    total = len(diagnoses) or 1
    groups = []
    for key, items in by_key.items():
        counts = {}
        for _, sig, _ in items:
            counts[sig] = counts.get(sig, 0) + 1
        assign, scores = _cluster(counts)
        clusters = {}
        for item in items:
            clusters.setdefault(assign[item[1]], []).append(item)
        for leader, members in clusters.items():
            groups.append(_make_group(key, leader, members, {s: scores[s] for s in counts if assign[s] == leader},
                                      total, lang))
    groups.sort(key=lambda g: (-g.count, g.id))
    return groups


def _make_group(key, leader, members, scores, total, lang):
    verdict, rule, phase, component, accelerator = key
    gid = hashlib.sha1("\x1f".join(map(str, key + (leader,))).encode("utf-8")).hexdigest()[:10]
    # Ties break on the path, never on the input order, so a re-run in another order reads the same.
    order = sorted(members, key=lambda m: (m[2].get("mtime") or 0, m[2]["source"]))   # first/last seen
    mem = {k: _median(m[2].get("memory", {}).get(k) for m in members)
           for k in ("total_gib", "tried_gib", "reserved_unallocated_gib", "allocated_by_pytorch_gib")}
    # The representative carries the leader signature and the request nearest the group's median.
    typical = [m for m in members if m[1] == leader]
    rep = min(typical, key=lambda m: (abs((m[2].get("memory", {}).get("tried_gib") or 0) - (mem["tried_gib"] or 0)),
                                      m[2]["source"]))
    exact = sum(1 for m in members if m[1] == leader)
    if lang == "zh":
        from .i18n import label
        reason = (f"规则 {rule}（{label(phase, lang)}，{label(component, lang)}，{accelerator}）；"
                  f"特征：{leader or '（没有报错行，也没有调用栈）'}")
        if exact > 1:
            reason += f"；归一化后 {exact} 份完全相同"
        if exact < len(members):
            reason += (f"；{len(members) - exact} 份相似（token_sort_ratio ≥ {SIMILARITY}，"
                       f"最低 {min(scores.values()):.0f}）")
    else:
        reason = f"rule {rule} ({phase}, {component}, {accelerator}); signature: {leader or '(no error line, no frames)'}"
        if exact > 1:
            reason += f"; {exact} identical after normalising"
        if exact < len(members):
            reason += (f"; {len(members) - exact} similar (token_sort_ratio ≥ {SIMILARITY}, "
                       f"lowest {min(scores.values()):.0f})")
    g = Group(id=gid, count=len(members), share=round(len(members) / total, 4),
              members=[m[2]["source"] for m in members], verdict=verdict, rule=rule, phase=phase,
              component=component, accelerator=accelerator, representative=rep[2]["source"], first=order[0][2]["source"],
              last=order[-1][2]["source"], reason=reason, signature=leader, memory=mem)
    step = _median((m[2].get("facts") or {}).get("step") for m in members)
    g.step = None if step is None else int(step)
    g.title, g.reply = reply(g, rep[2], lang)
    return g


def _step_text(step, zh):
    # The representative's own values (1024 -> 512) may not fit the other members: say the move, not the numbers.
    from .planwords import SHORT
    return step.get("display") or SHORT.get(step["action"], (step["action"],) * 2)[zh]


def reply(g, rep, lang="en"):
    """(title, reply) for a group: the cause in one sentence, then the first two plan steps of the
    representative's diagnosis `rep` (the rule's own ladder when it carries no plan)."""
    from .diagnose import fill, text_values
    from .rules import rules_by_id
    rule = rules_by_id().get(g.rule)
    zh = lang == "zh"
    if rule is None:                       # a diagnosis from another rule set: use its own words
        title, summary = rep.get("title", ""), rep.get("summary", "")
    else:
        title = getattr(rule.title, lang)
        summary = fill(getattr(rule.summary, lang), text_values(g.memory, g.step, phase=g.phase, lang=lang), lang)
    plan = [s for s in (rep.get("plan") or []) if s.get("action") not in (None, "none") and not s.get("alternative")]
    for action in (rule.actions if rule else []):      # the plan may be short: the rule's ladder fills it
        if len(plan) >= 2:
            break
        if action != "none" and all(s["action"] != action for s in plan):
            plan.append({"action": action})
    steps = [_step_text(s, zh) for s in plan[:2]]
    if not steps:
        return title, summary
    if zh:
        return title, summary + "建议先：" + "；".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) + "。"
    return title, summary + " Try first: " + "; ".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) + "."


def summary(diagnoses, errors=(), groups=None):
    """Counts by verdict, phase, component, accelerator and framework (largest first)."""
    def count(get):
        out = {}
        for d in diagnoses:
            k = get(d) or "unknown"
            out[k] = out.get(k, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], str(kv[0]))))
    out = {"files": len(diagnoses) + len(errors), "diagnosed": len(diagnoses), "errors": len(errors),
           "ooms": sum(1 for d in diagnoses if d.get("verdict") in _BAD)}
    if groups is not None:
        out["groups"] = len(groups)
    for name in ("verdict", "phase", "component", "accelerator"):
        out[f"by_{name}"] = count(lambda d, n=name: d.get(n))
    out["by_framework"] = count(lambda d: (d.get("facts") or {}).get("framework"))
    return out


def has_oom(diagnoses):
    return any(d.get("verdict") in _BAD for d in diagnoses)
