"""Triage: many diagnoses -> groups of the same failure, with counts, a representative and a reply.

A pure library over JSON-able diagnosis dicts (`Diagnosis.to_json_dict()`, or a slim subset with
`source`, `verdict`, `rule`, `phase`, `component`, `accelerator`, `evidence`, `memory`, `facts`,
`plan`; optional `mtime` orders first/last, optional `signature` saves recomputing it): no I/O, no
global state, deterministic whatever the input order. Reading files and diagnosing them in parallel
is the CLI's job (`triage_cli.py`); this part maps onto a distributed engine as it is: diagnose and
`signature()` per file anywhere, shuffle by `key_of()` less its component, run `group()` on each
key's dicts.

Grouping follows the error trackers (STYLE.md, last section): exactly on the rule's verdict, id,
phase and accelerator (see key_of) first, then fuzzily inside each key on a normalised signature —
the error phrase and the top frames, with every number a run makes up (sizes, PIDs, ranks,
timestamps, paths, device ordinals, line numbers) removed — and last by the component where the log
names one (_by_component: a component decided by sizes alone never splits a group). rapidfuzz's
token_sort_ratio compares signatures; token_set_ratio is deliberately not used: it scores 100
whenever one signature's words are a subset of another's, so a bare "CUDA out of memory" would
swallow every richer signature. A group's id is a SHA-1 of its key and a signature (_ids): the same
failure gets the same id in tomorrow's run.
"""

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional


SIMILARITY = 90          # token_sort_ratio at or above which two signatures are one failure
MAX_FRAMES = 3           # innermost frames kept: the ones that name what asked for memory
_ERROR_MARKERS = ("oom_error", "host_oom", "killed", "error", "cascade")
OOM_VERDICTS = ("device_oom", "host_oom")

# Order matters: timestamps and sizes go before the catch-all digit rule, paths before ordinals.
_NORMALISE = [(re.compile(p), r) for p, r in [
    (r"\x1b\[[0-9;?]*[ -/]*[@-~]", ""),                                        # ANSI colour
    (r"\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?", ""),              # 2025-04-17 09:32:18,798
    (r"\b\d\d[-/]\d\d(?:[-/]\d{2,4})? \d\d:\d\d:\d\d(?:[.,]\d+)?", ""),        # 03/14/2024 10:23:34 (glog, vLLM)
    (r"\b\d\d?:\d\d:\d\d(?:[.,]\d+)?", ""),                                    # a bare clock
    (r"\[(?:rank|default|RANK:?)\s*\d+\]:?|\b(?:local_)?[Rr]ank:?\s*\d+", "rank"),  # torchrun, axolotl
    (r"\b(?:pid|PID)\s*[:=]?\s*\d+|\bProcess \d+", "pid"),                      # PIDs, NVML process lines
    (r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b", "addr"),                         # pointers, Ray task ids
    (r"\d+(?:\.\d+)?\s*(?:bytes|[KMGTPE]i?B)\b", "SIZE"),                       # sizes in any unit
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


_QUALIFIED = re.compile(r"(?:[A-Za-z_]\w*\.)+(?=[A-Z]\w*(?:Error|Exception)\b)")
_EXC_HEAD = re.compile(r"^.*?(?=\b[A-Z]\w*(?:Error|Exception)\s*:)")
_OOM_WORDS = re.compile(r"out of mem|outofmemory", re.I)
_DEVICE = re.compile(r"\b(CUDA|HIP|NPU|XPU|MPS|MUSA)\b( error:)?")
_ARGS_AFTER = 40         # characters of phrase before which a "(" is part of it (a short message's detail)
_VOLATILE_TAIL = re.compile(r"\s*(?:of binary:.*|\(pid\).*)$")


def _phrase(text):
    """The error phrase: its first sentence, not the allocator's number-laden continuation.

    Cut to what every copy of one failure shares: whatever a terminal glued in front of the exception
    (a progress bar, a logger prefix, the cut tail of a wrapped `to|rch.`) goes, a qualified name is
    its last part (`torch.cuda.OutOfMemoryError` is `torch.OutOfMemoryError` on newer releases), an
    out-of-memory phrase is reduced to its exception and device (a wrap inside `out of memo|ry.` must
    not split copies), and a launcher's `(pid: N) of binary: /path/python` tail is dropped."""
    cut = len(text) >= 400                   # diagnose.py keeps 400 characters: the last word may be cut
    head = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if cut and head == text:
        head = text.rsplit(" ", 1)[0]
    head = _QUALIFIED.sub("", _EXC_HEAD.sub("", normalise(head), count=1))
    if _OOM_WORDS.search(head):
        # One phrase whatever the exception's name: RuntimeError on old releases, OutOfMemoryError on
        # new ones, or nothing left when a wrap cut it; the runtime's own "CUDA error: out of memory"
        # stays apart (another rule, and no allocator numbers).
        dev = _DEVICE.search(head)
        head = f"{dev.group(1)} error: out of memory" if dev and dev.group(2) else \
            f"OutOfMemoryError: {dev.group(1) + ' ' if dev else ''}out of memory"
    head = _VOLATILE_TAIL.sub("", head)
    # an argument list after a long enough head ("…timeout: WorkNCCL(SeqNum=#, OpType=…, Timeout(ms)=#)"):
    # its values vary by rank and op, and it is what a wrap that was not re-joined cuts first
    paren = head.find("(", _ARGS_AFTER)
    return (head[:paren].rstrip() if paren > 0 else head)[:200]


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


_SIZE_BASES = ("tensor shape", "budget:")


def weak_component(d):
    """True when nothing but sizes decided the component, or nothing did: the request matched one of
    the run's tensor shapes, one budget term outgrew the card, or `unknown`. Another report of the same
    failure with other sizes (another batch, another card) reads otherwise, so such a component must
    not split a group (see _by_component)."""
    if "component_weak" in d:
        return bool(d["component_weak"])
    basis = (d.get("basis") or {}).get("component") or ""
    return d.get("component") == "unknown" or basis.startswith(_SIZE_BASES)


def id_key(d):
    """The key a member's own id is made of: its exact key, with a component decided by sizes alone
    read as `unknown` (the id of a failure must not change with the batch a reporter ran)."""
    key = key_of(d)
    return _with_component(_loose(key), "unknown") if weak_component(d) else key


def _loose(key):
    """key_of without its component: what signatures are clustered within."""
    return key[:3] + key[4:]


def _with_component(loose, component):
    return loose[:3] + (component,) + loose[3:]


def _by_component(members):
    """One cluster of similar signatures (one verdict, rule, phase, accelerator) -> {component: members}.

    Members whose component the log itself names (a frame, a quoted call, the rule, the phase table)
    split by it, as before. A member whose component none of its own evidence names stays `unknown`:
    a reply never tells it another member's cause. A member whose component only sizes decided
    (weak_component) joins the one named component of its cluster; with several named it joins its own if named, and
    otherwise, or with none named, the weak members stay together under their most common component
    (ties: a named one, then by name)."""
    out, weak = {}, []
    for m in members:
        if weak_component(m[2]):
            weak.append(m)
        else:
            out.setdefault(m[2].get("component"), []).append(m)
    named, rest = list(out), []
    for m in weak:
        own = m[2].get("component")
        if own == "unknown":             # its own evidence names nothing: it is not told another's cause
            out.setdefault("unknown", []).append(m)
            continue
        target = named[0] if len(named) == 1 else own if own in out else None
        (out[target] if target is not None else rest).append(m)
    if rest:
        counts = Counter(m[2].get("component") for m in rest)
        component = min(counts, key=lambda c: (-counts[c], c == "unknown", str(c)))
        out.setdefault(component, []).extend(rest)
    return out


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
    memory: dict = field(default_factory=dict)   # the representative's own numbers, never a median
    step: Optional[int] = None                   # the representative's last step
    reply: str = ""
    aliases: list = field(default_factory=list)  # ids of the other signatures merged here (see _ids)
    needs_info: bool = False                     # the paste cannot be diagnosed: the reply asks for more
    needs: list = field(default_factory=list)    # what to ask for: traceback, command, config, nvidia_smi
    evidence: str = ""                           # the representative's deciding line
    replies: list = field(default_factory=list)  # one per member, in members' order: its own numbers (member_replies)

    def to_dict(self):
        # asdict's result without its deep copy of every member list (0.7 s of a 10 000-report run,
        # spent after the workers are done): lists and dicts are copied one level, a list's dicts once
        return {name: _copied(getattr(self, name)) for name in self.__dataclass_fields__}


def _copied(value):
    if isinstance(value, list):
        return [dict(v) if isinstance(v, dict) else v for v in value]
    return dict(value) if isinstance(value, dict) else value


def signature_id(key, sig):
    """One signature's own id: its key and normalised text, so no other file can change it."""
    return hashlib.sha1("\x1f".join(map(str, key + (sig,))).encode("utf-8")).hexdigest()[:10]


_WORD = re.compile(r"[A-Za-z_]{4,}")


def _blocks(sig, depth=1):
    """The cheap blocking keys of one signature: fuzzy comparison runs only between signatures that
    share one. With frames, the innermost `depth` frames (copies of one failure asked for memory in
    the same place; a wrap or a cut touches the outermost first); without, each of the two longest
    words of the error phrase (a prefix glued on, or a phrase cut at its start, keeps them)."""
    parts = sig.split(" | ")
    # a long phrase is specific enough to meet its copies that show frames and those that lost them
    # (a paste cut before the traceback, a wrap that made one line a frame)
    own = [("phrase", parts[0])] if len(parts[0]) >= LONG_PHRASE else []
    if len(parts) > 1:
        return [("frame",) + tuple(parts[1:1 + depth])] + own
    words = sorted(set(_WORD.findall(parts[0])), key=lambda w: (-len(w), w))[:2]
    return [("word", w) for w in words] + own or [("phrase", parts[0])]


BLOCK_PAIRWISE = 400     # signatures in one block beyond which it is split by one more frame (a phrase
                         # block that large is left out: its members still meet in their frame blocks)
LONG_PHRASE = 80         # characters from which a phrase is a block of its own


def _cluster(sigs):
    """{signature: n} of one exact key -> {signature: (component root, score)}.

    Single linkage inside blocks (_blocks): two signatures join when token_sort_ratio >= SIMILARITY,
    and joining is transitive. Adding signatures can then only merge components, never split or
    re-cut one, which keeps ids stable (_ids). The cost is the sum of the blocks' squares, not the
    square of the key: a block grown past BLOCK_PAIRWISE is split by one more frame."""
    from rapidfuzz import fuzz, process, utils
    items = sorted(sigs)
    procd = [utils.default_process(s) for s in items]
    parent = list(range(len(items)))
    best = [100.0] * len(items)

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pending = [(1, list(range(len(items))))]
    while pending:
        depth, idx = pending.pop()
        blocks = {}
        for i in idx:
            for b in _blocks(items[i], depth):
                blocks.setdefault(b, []).append(i)
        for b, members in blocks.items():
            if len(members) > BLOCK_PAIRWISE and b[0] == "frame" and depth < MAX_FRAMES:
                pending.append((depth + 1, members))
                continue
            if len(members) > BLOCK_PAIRWISE and b[0] == "phrase" and depth == 1:
                continue
            for n, i in enumerate(members[:-1]):      # each pair once: i against the ones after it
                rest = members[n + 1:]
                for _, score, k in process.extract(procd[i], [procd[j] for j in rest], scorer=fuzz.token_sort_ratio,
                                                   processor=None, score_cutoff=SIMILARITY, limit=None):
                    j = rest[k]
                    parent[find(j)] = find(i)
                    best[j] = min(best[j], score)
    return {s: (items[find(i)], best[i]) for i, s in enumerate(items)}


def group(diagnoses, lang="en"):
    """Diagnosis dicts (each with `source`) -> [Group], largest first; every dict lands in one group."""
    by_key = {}
    for i, d in enumerate(diagnoses):
        sig = d.get("signature") or signature(d)    # a worker may have computed it already
        by_key.setdefault(_loose(key_of(d)), []).append((i, sig, d))    # the component is decided below
    total = len(diagnoses) or 1
    groups = []
    for loose, items in by_key.items():
        counts = {}
        for _, sig, _ in items:
            counts[sig] = counts.get(sig, 0) + 1
        assign = _cluster(counts)
        clusters = {}
        for item in items:
            clusters.setdefault(assign[item[1]][0], []).append(item)
        for root, members in clusters.items():
            for component, part in _by_component(members).items():
                groups.append(_make_group(_with_component(loose, component), part, assign, total, lang))
    groups.sort(key=lambda g: (-g.count, g.id))
    return groups


MAX_ALIASES = 50


def _ids(key, members):
    """(id, aliases): every distinct signature has its own id; the group takes the smallest of its
    named-component members' (of all, when none names one). A file added later either joins a
    signature (nothing changes), brings a new one that joins the group (the id stays unless the new id
    is smaller: then the old one is listed in aliases), or starts a group. The ids weak members would
    have alone (id_key) are aliases too, so a group they held before a named member came keeps its name."""
    named = {signature_id(key, m[1]) for m in members if not weak_component(m[2])}
    alone = {signature_id(id_key(m[2]), m[1]) for m in members if weak_component(m[2])}
    ids = sorted(named or alone)
    return ids[0], (ids[1:] + sorted(alone - set(ids)))[:MAX_ALIASES]


def _make_group(key, members, assign, total, lang):
    from .reply import member_replies, needs_of, reason_text, reply
    verdict, rule, phase, component, accelerator = key
    gid, aliases = _ids(key, members)
    counts = Counter(m[1] for m in members)
    scores = {s: assign[s][1] for s in counts}
    # Ties break on the path, never on the input order, so a re-run in another order reads the same.
    order = sorted(members, key=lambda m: (m[2].get("mtime") or 0, m[2]["source"]))   # first/last seen
    leader = min(scores, key=lambda s: (-counts[s], s))          # the most common signature
    typical = [m for m in members if m[1] == leader]
    tried = sorted((m[2].get("memory") or {}).get("tried_gib") or 0 for m in typical)
    mid = tried[len(tried) // 2]
    # The representative carries the leader signature, the group's component when one of those has it,
    # and the request nearest their middle one: the reply quotes its numbers, which are then the numbers
    # of a real member.
    rep = min(typical, key=lambda m: (m[2].get("component") != component,
                                      abs(((m[2].get("memory") or {}).get("tried_gib") or 0) - mid), m[2]["source"]))
    exact = len(typical)
    lowest = min(scores.values())
    g = Group(id=gid, count=len(members), share=round(len(members) / total, 4),
              members=sorted(m[2]["source"] for m in members), verdict=verdict, rule=rule, phase=phase,
              component=component, accelerator=accelerator, representative=rep[2]["source"],
              first=order[0][2]["source"], last=order[-1][2]["source"],
              reason=reason_text(key, leader, exact, len(members), lowest, len(scores), SIMILARITY, lang), signature=leader,
              memory=dict(rep[2].get("memory") or {}), aliases=aliases)
    step = (rep[2].get("facts") or {}).get("step")
    g.step = step if isinstance(step, int) else None
    g.evidence = _evidence_line(rep[2])
    g.needs = needs_of(rep[2])
    g.needs_info = bool(g.needs)
    g.title, g.reply = reply(g, rep[2], lang)
    g.replies = member_replies(g, rep[2], [m[2] for m in members], lang)
    return g


def _evidence_line(d):
    ev = [e for e in d.get("evidence") or [] if e.get("marker") in _ERROR_MARKERS] or list(d.get("evidence") or [])
    return (ev[0].get("text") or "")[:200] if ev else ""


def summary(diagnoses, errors=(), groups=None):
    """Counts by verdict, phase, component, accelerator and framework (largest first)."""
    def count(get):
        out = {}
        for d in diagnoses:
            k = get(d) or "unknown"
            out[k] = out.get(k, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], str(kv[0]))))
    out = {"files": len(diagnoses) + len(errors), "diagnosed": len(diagnoses), "errors": len(errors),
           "ooms": sum(1 for d in diagnoses if d.get("verdict") in OOM_VERDICTS)}
    if groups is not None:
        out["groups"] = len(groups)
    for name in ("verdict", "phase", "component", "accelerator"):
        out[f"by_{name}"] = count(lambda d, n=name: d.get(n))
    out["by_framework"] = count(lambda d: (d.get("facts") or {}).get("framework"))
    return out


def has_oom(diagnoses):
    return any(d.get("verdict") in OOM_VERDICTS for d in diagnoses)
