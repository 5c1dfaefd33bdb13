"""Fill a diagnosis with its budget, plan and patch: the stages after the diagnosis proper."""

from ..memory.budget import estimate
from ..core.i18n import colon, label
from .plan import make_plan, observed_need, several_gpus
from ..diagnosis.rules import rules_by_id
from .runspec import sharding_facts, spec_from_facts


def complete(diagnosis, config=None, gpu=None, model=None, params=None):
    rule = rules_by_id()[diagnosis.rule]
    spec = None
    from ..diagnosis.jobkind import no_training_estimate
    # an inference engine's memory is weights, a KV cache it sizes itself and its warm-up: the
    # training estimate (gradients, optimizer, activations of a batch) does not describe it
    if diagnosis.verdict == "device_oom" and not no_training_estimate(diagnosis):
        overrides = _sharding_seen(diagnosis, config)
        spec, notes = spec_from_facts(diagnosis.facts, diagnosis.memory, gpu=gpu, model=model, params=params,
                                      overrides=overrides)
        if spec is not None:
            spec, notes = revise_assumed(diagnosis, spec, notes, lambda extra: spec_from_facts(
                diagnosis.facts, diagnosis.memory, gpu=gpu, model=model, params=params, overrides={**overrides, **extra}))
            budget = estimate(spec)
            budget.assumptions = notes + budget.assumptions
            diagnosis.budget = budget.to_json_dict()
            _compare(diagnosis, budget)
            if diagnosis.component == "unknown":
                _component_from_sizes(diagnosis, spec, budget)
    from ..diagnosis.readings import hypotheses, needs
    diagnosis.hypotheses = hypotheses(diagnosis.memory or {}, diagnosis.phase, diagnosis.component, diagnosis.lang)
    diagnosis.needs = needs(diagnosis, config is not None, diagnosis.budget is not None)
    left_out = []
    diagnosis.plan = make_plan(diagnosis, rule, spec, config, diagnosis.lang, left_out)
    applied = _patched_since(diagnosis, rule, spec, config)
    for e in left_out:
        diagnosis.notes.append(_left_out_note(e, diagnosis.lang))
    _traps(diagnosis, config)
    if diagnosis.plan and not applied:
        from .patch import patch_for, patched_command
        diagnosis.patch, diagnosis.snippet = patch_for(diagnosis, config)
        diagnosis.command = patched_command(diagnosis, config)
    return diagnosis


def _patched_since(diagnosis, rule, spec, config):
    """True when the config already holds what the plan from the log's own values would write (a
    `--write` after this log): that plan is shown, with a note, and nothing is patched again."""
    from .reapplied import already_applied, as_logged, note
    if config is None or config.from_log is not None or not diagnosis.conflicts or not diagnosis.plan:
        return False
    logged = as_logged(config, diagnosis.conflicts)
    plan = make_plan(diagnosis, rules_by_id()[diagnosis.rule], spec, logged, diagnosis.lang) if logged else None
    changes = already_applied(plan, config) if plan else None
    if changes is None:
        return False
    diagnosis.plan = plan
    diagnosis.notes.insert(0, note(changes, diagnosis.lang))
    return True


def _left_out_note(e, lang):
    """Why a move the ladder names is not in the plan: the run, or an earlier step, excludes it."""
    from ..core.i18n import action_name
    if lang == "zh":
        return f"未建议{action_name(e['move'], 'zh')}：它与本次运行已有的设置或前面的步骤不兼容（{e['with']}）。"
    return f"Not suggested: {e['move']} — {e['reason']}"


def _component_from_sizes(d, spec, budget):
    """The lower rungs of the component ladder, once the run's shapes are known: the failed request
    is one of its tensors (stated batch and length only), else one term alone is larger than the card."""
    from ..memory.tensors import match
    f, mem = d.facts, d.memory or {}
    counts = (f["num_gpus"],) if f.get("num_gpus") else (2, 4, 8) if several_gpus(d) else (1,)
    hit = match(mem.get("tried_gib"), spec.model, f.get("batch"), f.get("seq_len"), counts)
    if hit:
        d.component, d.basis["component"] = hit[0], f"tensor shape: the request is {hit[1]}"
        return
    cap = spec.capacity_gib or mem.get("total_gib")
    terms = {"weights": budget.weights_gib, "optimizer_states": budget.optimizer_states_gib,
             "gradients": budget.gradients_gib, "activations": budget.activations_gib + budget.logits_gib}
    name, size = max(terms.items(), key=lambda kv: kv[1] or 0)
    if cap and size and size > cap:
        d.component = name
        d.basis["component"] = f"budget: {label(name, 'en')} alone ({size:.1f} GiB) exceed the {cap:.1f} GiB card"


def _sharding_seen(d, config):
    """FSDP and DeepSpeed bucket settings: from the config, else FSDP's own frames in the evidence."""
    out = sharding_facts(config) if config is not None else {}
    if "fsdp" not in out and not str(d.facts.get("deepspeed") or "").startswith("zero") and any(
            "torch/distributed/fsdp/" in e.text or "FullyShardedDataParallel" in e.text for e in d.evidence):
        out["fsdp"] = "full_shard"               # the default strategy; the frames do not name it
    return out


# The other values an unstated fact may take, in the order a guess should try them:
# (its note's words, the fact, the Spec field it sets, the values)
_CANDIDATES = (("fine-tuning method not stated", "method", "method", ("full",)),
               ("sequence length not stated", "seq_len", "seq", (2048, 4096, 8192)))
_TRAINING_PHASES = ("first_step", "mid_training")


def revise_assumed(d, spec, notes, respec):
    """The run failed: an assumed value under which its estimate stays well below what the allocator
    saw (in use plus the failed request) cannot be the run's. Each unstated fact in turn takes the
    first of its other plausible values that explains the numbers, and the note says which and why
    (the flag that corrects it stays in the report). Training steps only: at loading or in an
    evaluation the method and the length do not set what was in use."""
    seen = observed_need(d.memory or {})
    if seen is None or d.phase not in _TRAINING_PHASES or d.component in ("other_process", "fragmentation"):
        return spec, notes
    chosen, total = {}, estimate(spec).total_gib
    for stem, fact, field, values in _CANDIDATES:
        if total >= 0.8 * seen:
            break
        if not any(n.startswith(stem) for n in notes) or fact == "method" and _adapters_seen(d):
            continue
        first, first_total = getattr(spec, field), total
        for value in values:
            if value == getattr(spec, field):
                continue
            trial, trial_notes = respec({**chosen, fact: value})
            trial_total = estimate(trial).total_gib if trial is not None else 0
            if trial_total <= total:
                continue
            chosen[fact] = value
            unit = " tokens" if fact == "seq_len" else ""
            said = (f"{stem}: the allocator's numbers ({seen:.1f} GiB in use with the request) rule out "
                    f"{first} (an estimate of {first_total:.1f} GiB); estimated as {value}{unit}")
            spec, notes = trial, [said] + [n for n in trial_notes if not n.startswith(stem)]
            total = trial_total
            if total >= 0.8 * seen:
                break
    return spec, notes


def _adapters_seen(d):
    """PEFT's frames or logger in the log: adapters were trained, whatever the method's key says."""
    return d.facts.get("framework") == "peft" or any("/peft/" in e.text for e in d.evidence)


def _compare(d, budget):
    """Say when the estimate and the allocator disagree: a big gap is itself a clue."""
    seen = observed_need(d.memory or {})
    if seen is None:
        return
    zh = d.lang == "zh"
    if budget.total_gib < 0.6 * seen:
        d.notes.append(
            f"估算峰值 {budget.total_gib:.1f} GiB 远低于失败时实际需要的 {seen:.1f} GiB（已占用加上失败的申请）："
            f"可能有其他进程、碎片，或某个假设不成立（例如 ZeRO 没有真正生效、序列比配置更长）。" if zh else
            f"The estimate ({budget.total_gib:.1f} GiB) is far below what the run needed at the failure "
            f"({seen:.1f} GiB: in use plus the failed request): another process, fragmentation, or a wrong "
            f"assumption (ZeRO not actually active, longer sequences).")
    elif budget.total_gib > 1.8 * seen and d.phase != "load":
        d.notes.append(
            f"估算峰值 {budget.total_gib:.1f} GiB 远高于失败时已占用加上失败的申请（共 {seen:.1f} GiB）："
            f"失败发生在到达峰值之前。" if zh else
            f"The estimate ({budget.total_gib:.1f} GiB) is well above what was in use plus the failed request at the "
            f"failure ({seen:.1f} GiB): the run failed on its way to the peak.")


def _traps(d, config):
    """Misconceptions the course asks us to correct when the facts suggest them."""
    zh = d.lang == "zh"
    data = config.data if config is not None else {}
    if config is not None and config.dialect == "llamafactory" and "gradient_checkpointing" in data:
        d.notes.append("LLaMA-Factory 用 disable_gradient_checkpointing 控制梯度检查点且默认开启；"
                       "YAML 里的 gradient_checkpointing 不起作用。" if zh else
                       "LLaMA-Factory switches gradient checkpointing with disable_gradient_checkpointing and turns "
                       "it on by default; `gradient_checkpointing` in its YAML does nothing.")
    if any(s["action"] == "grad_checkpointing" for s in d.plan or []) and ("save_steps" in data or "save_strategy" in data):
        d.notes.append("save_steps 产生的 checkpoint-N 是训练检查点（保存到磁盘），不是梯度检查点。" if zh else
                       "The checkpoint-N folders from save_steps are saves, not gradient checkpointing.")
    if d.facts.get("precision") == "bf16" and d.budget is not None:
        from .runspec import card_of
        card = card_of(d)
        if card is not None and card.bf16 is False:
            d.notes.append(f"{card.name} 没有原生 bf16：请改用 fp16。" if zh else
                           f"{card.name} has no native bf16 (torch.cuda.is_bf16_supported() says True anyway): "
                           f"use fp16.")
    if d.verdict == "device_oom" and d.phase in ("load", "first_step") and d.facts.get("method") == "full":
        d.notes.append("能推理不等于能训练：推理只需权重和 KV cache，训练还要梯度、优化器状态和激活值。" if zh else
                       "Being able to run inference does not mean being able to train: inference needs weights and "
                       "a KV cache, training adds gradients, optimizer states and activations.")
    if d.verdict == "incomplete":
        d.notes.append(label("paste", d.lang) + colon(d.lang) + (
            "从第一个 Traceback 到以 Error 结尾的那一行，以及其后几行。" if zh else
            "everything from the first 'Traceback (most recent call last):' down to the line that names the error, "
            "plus a few lines after it."))
