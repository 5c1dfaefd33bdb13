"""A triage group's words: why it was grouped, what is missing, and the reply a desk posts.

Replies speak to the reporter, who sees only their own log: they quote the representative's own
numbers (never a median that no member has), say "unknown" where a number is missing (never '?'),
name the error the log reports instead of pointing at evidence or `oom-doctor explain`, and ask for
exactly what is missing when a paste cannot be diagnosed (a bare OOM line, a cut traceback, a run
that stopped without an error).
"""

import re


_UNKNOWN = {"en": "unknown", "zh": "未知"}
# Pointers to what the reporter never sees: the report's evidence list and the explain command.
_POINTERS = re.compile(r"\s*[(（]see `oom-doctor explain [^`]*`[)）]|\s*[(（]见 `oom-doctor explain [^`]*`[)）]")

ASK = {   # what a desk asks for, in the order it is asked
    "traceback": ("the full traceback, from 'Traceback (most recent call last):' to the last error line",
                  "完整的调用栈，从 “Traceback (most recent call last):” 到最后一行报错"),
    "stop_output": ("the part of the output where the run stopped (stderr, the other ranks' logs, the scheduler's message)",
                    "训练停下时的那段输出（stderr、其他 rank 的日志、作业调度系统的消息）"),
    "dmesg": ("the output of `dmesg -T | grep -i -E 'killed process|out of memory'` on that machine",
              "那台机器上 `dmesg -T | grep -i -E 'killed process|out of memory'` 的输出"),
    "command": ("the launch command", "启动命令"),
    "config": ("the training config (YAML or JSON)", "训练配置文件（YAML 或 JSON）"),
    "nvidia_smi": ("the output of `nvidia-smi` while the job runs", "任务运行时 `nvidia-smi` 的输出"),
}


def needs_of(d):
    """What a diagnosis cannot tell without more from the reporter; [] when it can be answered."""
    verdict, evidence = d.get("verdict"), d.get("evidence") or []
    frames = any(e.get("marker") == "frame" for e in evidence)
    unknown_card = (d.get("memory") or {}).get("total_gib") is None
    if d.get("killed"):
        return ["stop_output", "dmesg", "command"]
    if verdict == "no_failure":
        return ["stop_output"]
    if verdict == "incomplete" or (verdict == "device_oom" and not frames and d.get("component") == "unknown"):
        return ["traceback", "command", "config"] + (["nvidia_smi"] if unknown_card else [])
    return []


def reason_text(key, leader, exact, n, lowest, distinct, similarity, lang):
    """Why these reports are one group; `similarity` is the grouping's threshold (triage.SIMILARITY)."""
    verdict, rule, phase, component, accelerator = key
    if lang == "zh":
        from ..core.i18n import label
        out = (f"规则 {rule}（{label(phase, lang)}，{label(component, lang)}，{accelerator}）；"
               f"特征：{leader or '（没有报错行，也没有调用栈）'}")
        if exact > 1:
            out += f"；归一化后 {exact} 份完全相同"
        if exact < n:
            out += f"；另有 {distinct - 1} 种相似特征共 {n - exact} 份（token_sort_ratio ≥ {similarity}，最低 {lowest:.0f}）"
        return out
    out = f"rule {rule} ({phase}, {component}, {accelerator}); signature: {leader or '(no error line, no frames)'}"
    if exact > 1:
        out += f"; {exact} identical after normalising"
    if exact < n:
        out += f"; {n - exact} in {distinct - 1} similar signature(s) (token_sort_ratio ≥ {similarity}, lowest {lowest:.0f})"
    return out


def _values(g, lang):
    from ..diagnosis.diagnose import text_values
    values = text_values(g.memory, g.step, phase=g.phase)
    return {k: (_UNKNOWN[lang] if v == "?" else v) for k, v in values.items()}


def _numbers(g, lang):
    """'a request of 1.16 GiB on a 39.39 GiB card': the representative's own, or nothing."""
    from ..core.units import fmt_gib
    tried, total = g.memory.get("tried_gib"), g.memory.get("total_gib")
    if tried is None and total is None:
        return ""
    t, c = fmt_gib(tried, _UNKNOWN[lang]), fmt_gib(total, _UNKNOWN[lang])
    if lang == "zh":
        if total is None:
            return f"（申请 {t}）"
        return f"（申请 {t}，显卡总容量 {c}）" if tried is not None else f"（显卡总容量 {c}）"
    if total is None:
        return f" (a request of {t})"
    return f" (a request of {t} on a {c} card)" if tried is not None else f" (on a {c} card)"


def _ask(g, lang):
    zh = lang == "zh"
    heads = {
        "killed": ("The log ends with the process being killed and no error before it — usually the machine's "
                   "out-of-memory killer, sometimes the job scheduler.",
                   "日志以进程被杀结束，之前没有任何报错——通常是系统的内存不足杀手（OOM killer），有时是作业调度系统。"),
        "no_failure": ("The log shows no error, kill or out-of-memory message, so it does not show why the run stopped.",
                       "日志里没有报错、被杀进程或显存不足的信息，看不出训练为什么停下。"),
        "incomplete": ("The paste ends before the error that stopped the run, so what failed cannot be told from it.",
                       "贴出的日志在导致训练停止的报错之前就结束了，无法判断是什么失败了。"),
        "device_oom": ("The paste shows that the card ran out of memory{n}, but not where in the run it happened, "
                       "so the cause cannot be told yet.",
                       "贴出的日志显示显存不足{n}，但看不出发生在训练的哪个环节，暂时无法判断原因。"),
    }
    kind = "killed" if "dmesg" in g.needs else g.verdict if g.verdict in heads else "incomplete"
    head = heads[kind][zh].format(n=_numbers(g, lang))
    asks = [ASK[k][zh] for k in g.needs]
    if zh:
        return head + "请补充：" + "；".join(f"{i}. {a}" for i, a in enumerate(asks, 1)) + "。"
    return head + " Please send: " + "; ".join(f"{i}. {a}" for i, a in enumerate(asks, 1)) + "."


def _step_text(step, zh, g, rep):
    from ..plans.planwords import SHORT
    if step["action"] == "fix_non_memory_bug":     # name the error itself: the reporter has no evidence list
        line = g.evidence.strip()[:160].replace("`", "'")
        if line:
            return f"修复日志报告的这个错误：`{line}`" if zh else f"fix the error the log reports: `{line}`"
    # The representative's own values (1024 -> 512) may not fit the other members: say the move, not the numbers.
    text = step.get("display") or SHORT.get(step["action"], (step["action"],) * 2)[zh]
    return _POINTERS.sub("", text)


def reply(g, rep, lang="en"):
    """(title, reply) for a group: the cause in one sentence with the representative's own numbers,
    then the first two plan steps of its diagnosis (the rule's own ladder when it carries no plan);
    a request for what is missing when the paste cannot be diagnosed."""
    from ..diagnosis.diagnose import fill
    from ..diagnosis.rules import rules_by_id
    rule = rules_by_id().get(g.rule)
    zh = lang == "zh"
    title = getattr(rule.title, lang) if rule is not None else rep.get("title", "")
    if g.needs:
        return title, _ask(g, lang)
    if rule is None:                       # a diagnosis from another rule set: use its own words
        summary = rep.get("summary", "")
    else:
        summary = fill(getattr(rule.summary, lang), _values(g, lang))
        if zh:                             # the templates space a number off; a Chinese word is not
            summary = re.sub(r" ?未知 ?", "未知", summary)
    plan = [s for s in (rep.get("plan") or []) if s.get("action") not in (None, "none") and not s.get("alternative")]
    for action in (rule.actions if rule else []):      # the plan may be short: the rule's ladder fills it
        if len(plan) >= 2:
            break
        if action != "none" and all(s["action"] != action for s in plan):
            plan.append({"action": action})
    steps = [_step_text(s, zh, g, rep) for s in plan[:2]]
    if not steps:
        return title, summary
    if zh:
        return title, summary + "建议先：" + "；".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) + "。"
    return title, summary + " Try first: " + "; ".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) + "."


def _own_numbers(d):
    """(memory, step, key) of one member: the numbers its reply may quote, and them as a dict key."""
    from ..diagnosis.diagnose import TEXT_NUMBERS
    numbers = d.get("memory") or {}
    memory = {k: numbers[k] for _, k in TEXT_NUMBERS if numbers.get(k) is not None}
    step = (d.get("facts") or {}).get("step")
    step = step if isinstance(step, int) else None
    return memory, step, (tuple(sorted(memory.items())), step)


def member_replies(g, rep, members, lang="en"):
    """One reply per member (sorted by source, as g.members): the group's cause and steps with that
    member's own request, card and step, so each reporter reads their own numbers. Members with the
    same numbers share one text; the representative's is the group's reply."""
    import dataclasses
    made, out = {_own_numbers(rep)[2]: g.reply}, []
    for d in sorted(members, key=lambda d: d["source"]):
        memory, step, key = _own_numbers(d)
        if key not in made:
            made[key] = reply(dataclasses.replace(g, memory=memory, step=step), rep, lang)[1]
        out.append({"source": d["source"], "tried_gib": memory.get("tried_gib"), "total_gib": memory.get("total_gib"),
                    "step": step, "reply": made[key]})
    return out
