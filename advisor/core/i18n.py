"""Fixed labels of the reports in English and Chinese (rule texts carry their own)."""

import re

LABELS = {
    "en": {
        "verdict": "Verdict", "phase": "When", "component": "Blame", "confidence": "confidence", "rule": "rule",
        "numbers": "Allocator numbers", "evidence": "Evidence", "facts": "Run facts", "plan": "What to change",
        "patch": "Config patch", "budget": "Memory budget", "conflicts": "Log and config disagree",
        "line": "line", "saves": "saves", "fits": "fits", "not_fit": "still short", "why": "why",
        "total_gib": "capacity", "free_gib": "free", "tried_gib": "tried to allocate",
        "allocated_by_pytorch_gib": "allocated by PyTorch", "reserved_unallocated_gib": "reserved but unallocated",
        "process_in_use_gib": "this process in use", "other_processes_gib": "other processes",
        "other_allocations_gib": "other allocations", "earlier": "earlier failures the run recovered from",
        "oom_messages": "OOM messages in the final failure", "safe": "safe", "unsafe": "changes results",
        "display": "outside the config", "manual": "not in the patch: change by hand", "snippet": "Settings to change", "command": "The command with these changes", "paste": "What to paste",
        "device_oom": "GPU out of memory", "host_oom": "host RAM exhausted", "not_oom": "not an out-of-memory",
        "no_failure": "no failure", "incomplete": "incomplete paste",
        "weights": "weights", "activations": "activations", "gradients": "gradients",
        "optimizer_states": "optimizer states", "fragmentation": "allocator fragmentation",
        "other_process": "another process on the GPU", "eval_outputs": "accumulated evaluation outputs",
        "host_memory": "host memory", "none": "—", "unknown": "unknown",
        "load": "model loading", "first_step": "first training step", "mid_training": "mid-training",
        "evaluation": "evaluation/prediction", "checkpoint_save": "checkpoint saving", "inference": "inference",
        "step": "step", "logits_gib": "logits", "overhead_gib": "context, workspaces, slack",
        "working_buffers_gib": "gathered layers, buffers", "peak_in": "peak in",
        "forward": "forward", "backward": "backward", "optimizer_step": "optimizer step",
        "cuda_context_gib": "runtime context", "workspaces_gib": "workspaces", "allocator_slack_gib": "allocator slack",
        "weights_gib": "weights", "gradients_gib": "gradients", "optimizer_states_gib": "optimizer states",
        "activations_gib": "activations", "capacity_gib": "card capacity", "usable_gib": "usable",
        "total": "total (peak per GPU)", "headroom": "headroom", "assumptions": "Assumptions",
        "estimate_vs_log": "estimate vs. allocator",
        "snapshot": "Memory snapshot", "snapshot_short": "snapshot", "snap_live": "live at the OOM",
        "snap_holes": "largest free blocks", "snap_inactive": "cached and free in all", "snap_site": "allocated at",
        "reserved_gib": "reserved by PyTorch", "pending_free_gib": "freed, awaiting a stream",
        "largest_free_block_gib": "largest free block", "non_releasable_gib": "non-releasable",
    },
    "zh": {
        "verdict": "结论", "phase": "发生阶段", "component": "占用来源", "confidence": "置信度", "rule": "规则",
        "numbers": "分配器数据", "evidence": "证据", "facts": "训练信息", "plan": "修改建议",
        "patch": "配置补丁", "budget": "显存预算", "conflicts": "日志与配置不一致",
        "line": "行", "saves": "节省", "fits": "放得下", "not_fit": "放不下", "why": "原因",
        "total_gib": "总容量", "free_gib": "空闲", "tried_gib": "失败的申请",
        "allocated_by_pytorch_gib": "PyTorch 已分配", "reserved_unallocated_gib": "已预留未分配",
        "process_in_use_gib": "本进程占用", "other_processes_gib": "其他进程",
        "other_allocations_gib": "其他分配", "earlier": "训练中已恢复的早先失败",
        "oom_messages": "最终失败中的显存不足报错条数", "safe": "结果不变", "unsafe": "会改变结果",
        "display": "配置之外", "manual": "补丁未包含，需手动修改", "snippet": "需要修改的设置", "command": "改好的启动命令", "paste": "还需要贴出",
        "device_oom": "显存不足", "host_oom": "主机内存耗尽", "not_oom": "不是显存不足",
        "no_failure": "没有失败", "incomplete": "日志不完整",
        "weights": "权重", "activations": "激活值", "gradients": "梯度",
        "optimizer_states": "优化器状态", "fragmentation": "分配器碎片",
        "other_process": "其他进程占用显卡", "eval_outputs": "评估输出累积",
        "host_memory": "主机内存", "none": "—", "unknown": "未知",
        "load": "模型加载", "first_step": "第一个训练步", "mid_training": "训练中途",
        "evaluation": "评估/预测", "checkpoint_save": "保存训练检查点", "inference": "推理",
        "step": "步", "logits_gib": "logits", "overhead_gib": "运行时上下文、工作区与余量",
        "working_buffers_gib": "聚合层与临时缓冲", "peak_in": "峰值出现在",
        "forward": "前向", "backward": "反向", "optimizer_step": "优化器更新",
        "cuda_context_gib": "运行时上下文", "workspaces_gib": "工作区", "allocator_slack_gib": "分配器余量",
        "weights_gib": "权重", "gradients_gib": "梯度", "optimizer_states_gib": "优化器状态",
        "activations_gib": "激活值", "capacity_gib": "显卡容量", "usable_gib": "可用显存",
        "total": "合计（单卡峰值）", "headroom": "余量", "assumptions": "假设",
        "estimate_vs_log": "估算与分配器对比",
        "snapshot": "显存快照", "snapshot_short": "快照", "snap_live": "OOM 时仍在使用",
        "snap_holes": "最大的空闲块", "snap_inactive": "已缓存的空闲显存共", "snap_site": "分配位置",
        "reserved_gib": "PyTorch 已预留", "pending_free_gib": "已释放、等待其他 stream",
        "largest_free_block_gib": "最大空闲块", "non_releasable_gib": "不可释放",
    },
}


# The HTML report's own words (section titles, legends, timeline events), beside the labels above.
HTML_WORDS = {
    "en": {
        "report": "oom-doctor report", "budget_report": "oom-doctor memory budget",
        "triage_report": "oom-doctor triage",
        "picture": "Memory picture", "row_estimate": "Estimated peak of this run",
        "row_alloc": "What the allocator saw at the failure", "row_after": "After the plan",
        "row_planned": "This run as planned", "capacity": "card capacity",
        "margin": "80 % of usable (20 % margin)", "free": "free", "tried": "failed request",
        "allocated": "allocated by PyTorch", "reserved": "reserved but unallocated", "others": "other processes",
        "context": "runtime context, non-PyTorch", "context_or_others": "not PyTorch's (runtime context, other processes)",
        "needs_model": "The per-component estimate needs the model: run again with --model NAME or --params 7B.",
        "no_picture": "This log has no GPU memory numbers to draw.",
        "after_note": "Estimate with the plan's first moves applied: {moves}.",
        "after_unknown": "The plan's first moves change nothing this estimate measures (allocator settings, other "
                         "processes, evaluation or saving), so there is no bar for after the plan.",
        "timeline": "Run timeline", "loading": "loading the model", "training": "training",
        "steps": "steps", "failed_at": "failed", "cut_at": "log ends", "ended_at": "last seen",
        "step_of": "step {step} of {total}", "step_only": "step {step} (total unknown)",
        "where_unknown": "where in the run it failed is unknown", "not_reached": "not reached",
        "line_no": "line {n}", "ev_load": "model loading started", "ev_load_done": "model loaded",
        "ev_setup": "engine/optimizer setup", "ev_prep": "data preparation", "ev_train_start": "training started", "ev_step": "last progress",
        "ev_eval_start": "evaluation", "ev_eval_done": "evaluation done", "ev_save": "checkpoint save",
        "ev_train_done": "training finished", "ev_predict": "prediction", "ev_end": "failure",
        "ev_cascade": "the launcher reports a failure",
        "num": "#", "action": "action", "change": "change", "fits_after": "then", "applies": "applicability",
        "alternative": "alternative", "explanation": "Why", "notes": "Notes", "source": "log",
        "total": "total", "what_if": "What if (one change at a time)", "saves_gib": "saves {gib} on its own",
        "adds_gib": "adds {gib} on its own",
        "verdict_fits": "fits the card with the 20 % margin", "verdict_short": "does not fit the card",
        "verdict_tight": "tight: fits the card, but with less than the 20 % margin",
        "verdict_nocard": "no card given (--gpu): fit not checked", "trainable": "trainable",
        "wi_batch": "per-device batch {a} → {b}", "wi_ckpt": "gradient checkpointing on",
        "wi_seq": "sequence {a} → {b} tokens", "wi_precision": "precision {a} → {b}",
        "wi_quant": "4-bit base (QLoRA)", "wi_lora": "LoRA instead of full fine-tuning",
        "wi_optim": "8-bit optimizer", "wi_zero": "ZeRO-3 over {n} GPUs",
        "summary": "Summary", "files": "files", "diagnosed": "diagnosed", "ooms": "with an OOM",
        "errors": "Unreadable files", "groups": "Groups", "count": "files", "share": "share",
        "group": "group", "title": "failure", "by_verdict": "By verdict", "by_phase": "By phase",
        "by_component": "By component", "representative": "representative", "first": "first", "last": "last",
        "reason": "grouped because", "reply": "reply", "members": "members", "capacity_gib": "capacity",
        "tried_gib": "failed request", "generated": "Generated by oom-doctor {v}", "in_use": "in use",
        "none_key": "none", "mk_frame": "frame", "mk_oom_numbers": "allocator numbers",
    },
    "zh": {
        "report": "oom-doctor 诊断报告", "budget_report": "oom-doctor 显存预算", "triage_report": "oom-doctor 批量分诊",
        "picture": "显存示意图", "row_estimate": "本次运行的估算峰值", "row_alloc": "失败时分配器的实际数据",
        "row_after": "按建议修改后", "row_planned": "按当前计划运行", "capacity": "显卡容量",
        "margin": "可用显存的 80%（留 20% 余量）", "free": "空闲", "tried": "失败的申请",
        "allocated": "PyTorch 已分配", "reserved": "已预留未分配", "others": "其他进程",
        "context": "运行时上下文等非 PyTorch 占用", "context_or_others": "非 PyTorch 占用（运行时上下文、其他进程）",
        "needs_model": "按组成部分估算需要知道模型：请加上 --model 名称或 --params 7B 重新运行。",
        "no_picture": "这份日志里没有可以画出的显存数据。",
        "after_note": "应用建议中的前几步之后的估算：{moves}。", "after_unknown": "建议的前几步不改变这里估算的部分（分配器设置、其他进程、评估或保存），所以没有“修改后”的条。",
        "timeline": "运行时间线", "loading": "加载模型", "training": "训练", "steps": "步",
        "failed_at": "失败", "cut_at": "日志截止", "ended_at": "最后记录",
        "step_of": "第 {step} 步 / 共 {total} 步", "step_only": "第 {step} 步（总步数未知）",
        "where_unknown": "无法确定失败发生在运行的哪个位置", "not_reached": "未到达",
        "line_no": "第 {n} 行", "ev_load": "开始加载模型", "ev_load_done": "模型加载完成",
        "ev_setup": "引擎/优化器初始化", "ev_prep": "数据预处理", "ev_train_start": "开始训练", "ev_step": "最后的进度",
        "ev_eval_start": "评估", "ev_eval_done": "评估完成", "ev_save": "保存训练检查点",
        "ev_train_done": "训练结束", "ev_predict": "预测", "ev_end": "失败", "ev_cascade": "启动器报告失败",
        "num": "#", "action": "操作", "change": "修改", "fits_after": "能否放下", "applies": "适用性",
        "alternative": "备选", "explanation": "原因", "notes": "提示", "source": "日志",
        "total": "合计", "what_if": "如果只改一项", "saves_gib": "单独这一项节省 {gib}", "adds_gib": "单独这一项增加 {gib}",
        "verdict_fits": "留 20% 余量后放得下", "verdict_short": "放不下",
        "verdict_tight": "偏紧：放得下，但余量不足 20%",
        "verdict_nocard": "未指定显卡（--gpu），未检查能否放下", "trainable": "可训练参数",
        "wi_batch": "单卡批处理大小 {a} → {b}", "wi_ckpt": "开启梯度检查点", "wi_seq": "截断长度 {a} → {b}",
        "wi_precision": "计算类型 {a} → {b}", "wi_quant": "4 位量化基座（QLoRA）", "wi_lora": "用 LoRA 代替全参微调",
        "wi_optim": "8 位优化器", "wi_zero": "ZeRO-3 切分到 {n} 张卡",
        "summary": "概览", "files": "个文件", "diagnosed": "已诊断", "ooms": "含显存或内存不足",
        "errors": "无法读取的文件", "groups": "分组", "count": "文件数", "share": "占比", "group": "分组",
        "title": "失败", "by_verdict": "按结论", "by_phase": "按阶段", "by_component": "按占用来源",
        "representative": "代表日志", "first": "最早", "last": "最晚", "reason": "分组依据", "reply": "回复",
        "members": "成员", "capacity_gib": "容量", "tried_gib": "失败的申请", "generated": "由 oom-doctor {v} 生成",
        "in_use": "已占用", "none_key": "无", "mk_frame": "调用栈", "mk_oom_numbers": "显存数据",
    },
}


def label(key, lang="en"):
    return LABELS.get(lang, LABELS["en"]).get(key, key)


# The run-facts line: LLaMA Board's own labels in Chinese, the fact keys in English.
FACTS = {
    "framework": "框架", "model": "模型", "method": "微调方法", "precision": "计算类型", "quantization_bit": "量化等级",
    "batch": "批处理大小", "grad_accum": "梯度累积", "seq_len": "截断长度", "grad_ckpt": "梯度检查点",
    "deepspeed": "DeepSpeed", "num_gpus": "显卡数量", "step": "当前步数", "total_steps": "总步数",
    "eval_batch": "评估批处理大小", "gpu": "显卡", "job_kind": "任务类型",
}

JOB_KINDS = {"training": "训练", "evaluation": "训练中的评估", "prediction": "预测", "serving": "推理服务",
             "offline_generation": "离线生成", "rl_rollout": "强化学习采样", "saving": "保存模型", "loading": "加载模型"}

# Each plan move by name; the code stays beside it (rules and `explain` use the code).
ACTIONS = {
    "reduce_batch": "减小单卡批处理大小", "grad_accum": "增大梯度累积", "grad_checkpointing": "开启梯度检查点",
    "reduce_seq_len": "缩短截断长度", "precision": "改用 16 位计算类型", "quantize": "QLoRA 4 位量化",
    "use_lora": "改用 LoRA 微调", "optimizer_8bit": "改用 8 位优化器", "smaller_model": "换更小的模型或更大的显卡",
    "zero_sharding": "DeepSpeed ZeRO 多卡切分", "cpu_offload": "卸载到 CPU", "free_other_process": "释放被占用的显卡",
    "expandable_segments": "开启可扩展显存段", "eval_batch": "减小评估批处理大小",
    "eval_accumulation": "评估结果分批移到 CPU", "fix_non_memory_bug": "修复真正的错误",
    "more_host_ram": "增加主机内存", "engine_memory_share": "调低推理引擎的显存占比", "enforce_eager": "以 eager 模式运行引擎",
    "kv_cache_fp8": "KV cache 改用 fp8", "tensor_parallel": "张量并行切分模型", "generation_len": "减少生成长度",
}


def action_name(action, lang="en"):
    """'减小单卡批处理大小（reduce_batch）' in Chinese; the code alone in English."""
    if lang == "zh" and action in ACTIONS:
        return f"{ACTIONS[action]}（{action}）"
    return action


def fact_value(key, value, lang="en"):
    if lang != "zh":
        return str(value)
    if key == "grad_ckpt" and isinstance(value, bool):
        return "开启" if value else "关闭"
    if key == "quantization_bit":
        return f"{value} 位"
    if key == "job_kind":
        return JOB_KINDS.get(value, str(value))
    return str(value)


def facts_line(rows, lang="en"):
    """[(key, value)] -> 'framework=hf, batch=8' or '框架：hf，批处理大小：8'."""
    if lang == "zh":
        return "，".join(f"{FACTS.get(k, k)}：{fact_value(k, v, lang)}" for k, v in rows)
    return ", ".join(f"{k}={v}" for k, v in rows)


def colon(lang):
    return "：" if lang == "zh" else ": "


def steps_ref(numbers, lang="en"):
    """[1, 2, 3] -> 'steps 1–3' / '第 1–3 步'; [2, 4] -> 'steps 2, 4' / '第 2、4 步'."""
    numbers = list(numbers)
    if len(numbers) == 1:
        span = str(numbers[0])
    elif numbers == list(range(numbers[0], numbers[-1] + 1)):
        span = f"{numbers[0]}–{numbers[-1]}"
    else:
        span = ("、" if lang == "zh" else ", ").join(map(str, numbers))
    if lang == "zh":
        return f"第 {span} 步"
    return ("step " if len(numbers) == 1 else "steps ") + span


# The budget's assumptions are written in English (they are part of the JSON contract); these
# patterns say each one in Chinese. One that matches none is shown as it is.
def _zh_onoff(word):
    return {"on": "开启", "off": "关闭"}.get(word, word)


_REVISED = r" not stated: the allocator's numbers \(([\d.]+) GiB in use with the request\) rule out (\S+) \(an estimate of ([\d.]+) GiB\); estimated as (\S+)"
_ASSUMPTIONS = [
    (r"fine-tuning method" + _REVISED,
     lambda m: f"未指明微调方法：分配器的数字（已占用加上失败的申请共 {m[1]} GiB）排除了 {m[2]}（按它估算只有 {m[3]} GiB），按 {m[4]} 估算"),
    (r"sequence length" + _REVISED + " tokens",
     lambda m: f"未指明截断长度：分配器的数字（已占用加上失败的申请共 {m[1]} GiB）排除了 {m[2]} 个 token（按它估算只有 {m[3]} GiB），按 {m[4]} 个 token 估算"),
    (r"fine-tuning method not stated: assumed (\S+)", lambda m: f"未指明微调方法：按 {m[1]} 估算"),
    (r"precision not stated: assumed (\S+)", lambda m: f"未指明计算类型：按 {m[1]} 估算"),
    (r"per-device batch not stated: assumed (\d+)", lambda m: f"未指明单卡批处理大小：按 {m[1]} 估算"),
    (r"sequence length not stated: assumed (\d+) tokens", lambda m: f"未指明截断长度：按 {m[1]} 个 token 估算"),
    (r"gradient checkpointing not stated: assumed (on|off) \((.+) default\)",
     lambda m: f"未指明梯度检查点：按{_zh_onoff(m[1])}估算（" +
               ("框架的默认值" if m[2] == "framework" else f"{m[2]} 的默认值") + "）"),
    (r"model shape unknown: (.+)", lambda m: f"模型结构未知：按 {m[1]} 估算"),
    (r"'(.+)' is ambiguous; picked (.+) over (.+)", lambda m: f"“{m[1]}”有歧义：按 {m[2]} 估算，而不是 {m[3]}"),
    (r"'(.+)' read as (.+)", lambda m: f"“{m[1]}”按 {m[2]} 估算"),
    (r"no catalogued model (?:of size (\S+)B )?looks like (.+)",
     lambda m: f"目录中没有与 {m[2]} 相符的模型" + (f"（{m[1]}B）" if m[1] else "")),
    (r"model (.+): (\S+)B parameters, (\d+) layers, hidden (\d+), vocabulary (\d+)",
     lambda m: f"模型 {m[1]}：{m[2]}B 参数，{m[3]} 层，隐藏维度 {m[4]}，词表 {m[5]}"),
    (r"method (\S+?)(?:, LoRA rank (\d+) on (.+?))?(?:, (\d+)-bit base)?",
     lambda m: f"微调方法 {m[1]}" + (f"，LoRA 秩 {m[2]}，作用于" + ("全部线性层" if m[3] == "all" else f" {m[3]}") if m[2] else "")
               + (f"，基座 {m[4]} 位" if m[4] else "")),
    (r"precision (\S+), optimizer (\S+)", lambda m: f"计算类型 {m[1]}，优化器 {m[2]}"),
    (r"per-device batch (\d+) × sequence (\d+) tokens, gradient checkpointing (on|off), attention (.+)",
     lambda m: f"单卡批处理大小 {m[1]} × 截断长度 {m[2]} 个 token，梯度检查点{_zh_onoff(m[3])}，注意力 "
               + ("eager（要存 s² 的注意力分数）" if m[4].startswith("eager") else m[4])),
    (r"(\d+) GPU\(s\), DeepSpeed ZeRO-(\d)( with CPU offload)?(?:: states split (\d+) ways, plus .*)?",
     lambda m: f"{m[1]} 张显卡，DeepSpeed ZeRO-{m[2]}" + ("，卸载到 CPU" if m[3] else "")
               + (f"：状态切成 {m[4]} 份，另加未切分的工作集（聚合的最大模块与当前层、通信桶、更新步的 fp32 子组）"
                  if m[4] else "")),
    (r"(\d+) GPU\(s\), FSDP (\w+)( with CPU offload)?: fp32 flat parameters split (\d+) ways.*",
     lambda m: f"{m[1]} 张显卡，FSDP {m[2]}" + ("，卸载到 CPU" if m[3] else "")
               + f"：fp32 扁平参数切成 {m[4]} 份（混合精度），另加同时在聚合的两层"),
    (r"(\d+) GPU\(s\), no ZeRO sharding \(every GPU holds a full replica(; DDP gradient buckets)?\)",
     lambda m: f"{m[1]} 张显卡，不用 ZeRO 切分（每张卡各存一份完整副本" + ("；另有 DDP 梯度桶" if m[2] else "") + "）"),
    (r"peak in the (forward|backward|optimizer step|\w+)[^:]*: forward (\S+), backward (\S+), optimizer step (\S+) GiB",
     lambda m: f"峰值出现在{ {'forward': '前向', 'backward': '反向'}.get(m[1], '优化器更新步') }：前向 {m[2]}，"
               f"反向 {m[3]}，优化器更新步 {m[4]} GiB"),
    (r"overhead: runtime context (\S+) GiB, cuBLAS/attention(/NCCL)? workspaces (\S+) GiB, allocator slack (\S+) GiB.*",
     lambda m: f"额外开销：运行时上下文 {m[1]} GiB，cuBLAS/注意力{'/NCCL' if m[2] else ''}工作区 {m[3]} GiB，"
               f"分配器余量 {m[4]} GiB（合计估算的是分配器的预留峰值加上下文，约等于 nvidia-smi 显示的数）"),
    (r"padding: worst case, every sample padded to the cutoff \((\d+) tokens\); batches pad to their longest "
     r"sample, and at (\d+) tokens the peak is (\S+) GiB",
     lambda m: f"填充：按最坏情况估算，每条样本都填充到截断长度（{m[1]} 个 token）；实际每个批次只填充到其中最长的样本，"
               f"按 {m[2]} 个 token 算峰值为 {m[3]} GiB"),
    (r"optimizer step counted with the for-loop/fused AdamW; .*: \+(\S+) GiB \(adamw_torch_fused avoids it\)",
     lambda m: f"优化器更新步按逐个张量/融合版 AdamW 计算；torch 的 foreach 实现（adamw_torch 在 CUDA 上的默认）"
               f"会短暂多存一份二阶矩估计：+{m[1]} GiB（adamw_torch_fused 可以避免）"),
    (r"card capacity (\S+) GiB, usable = capacity − (\S+) GiB, fits when the total is at most (\d+) % of usable",
     lambda m: f"显卡容量 {m[1]} GiB，可用显存 = 容量 − {m[2]} GiB，合计不超过可用显存的 {m[3]}% 才算放得下"),
]


def assumption_text(text, lang="en"):
    if lang != "zh":
        return text
    import re
    for pattern, say in _ASSUMPTIONS:
        m = re.fullmatch(pattern, text)
        if m:
            return say(m)
    return text


# Words that must not reach a Chinese reader, each with the word to use instead: English left
# untranslated, and the terms the course and LLaMA Board replace (tests/test_zh.py reads this list
# over every sample in every format).
ZH_AVOID = {
    # English of the fixed labels
    "unset": "（未设置）", "trainable": "可训练参数", "still short": "仍然放不下", "fits": "放得下", "saves": "节省",
    "headroom": "余量", "Assumptions": "假设", "outside the config": "配置之外", "changes results": "会改变结果",
    "framework=": "框架：", "grad_ckpt": "梯度检查点", "seq_len=": "截断长度：", "batch=": "批处理大小：",
    "Grouped": "分组依据", "signature:": "特征：", "reply:": "回复：", "representative": "代表日志",
    "per-device": "单卡", "GPU(s)": "张显卡", "assumed": "按……估算", "not stated": "未指明",
    "identical after normalising": "归一化后完全相同", "verdict:": "结论：", "first moves": "首选操作",
    "CUDA context": "运行时上下文",
    # the course's vocabulary
    "存档": "训练检查点", "保存 checkpoint": "保存训练检查点", "最大序列长度": "截断长度", "单卡 batch": "单卡批处理大小",
    "batch size": "批处理大小", "batch 大小": "批处理大小", "等效 batch": "等效批量", "降低精度": "改用 16 位计算类型",
    "4 bit": "4 位", "8 bit": "8 位", "16 bit": "16 位", "4-bit": "4 位", "8-bit": "8 位",
    "不是内存不足": "不是显存不足", "动量": "一阶/二阶矩估计", "可以放下": "放得下", "CUDA 上下文": "运行时上下文",
}


# What decided the phase and the component (Diagnosis.basis, English in the JSON), for a reader.
_BASIS_ZH = [
    (r"frame (.+)", lambda m: f"堆栈帧 {m[1]}"),
    (r"quoted call (.+)", lambda m: f"残留的代码行 {m[1]}"),
    (r"marker line (\d+): (.+)", lambda m: f"第 {m[1]} 行的阶段标记（{m[2]}）"),
    (r"progress: step (\d+)", lambda m: f"进度：第 {m[1]} 步"),
    (r"progress: (\d+) losses logged", lambda m: f"进度：已记录 {m[1]} 次 loss"),
    (r"rule (OOM\d+) \((.+)\)", lambda m: f"规则 {m[1]}（{m[2]}）"),
    (r"phase table: (\w+) → (\w+)", lambda m: f"课程的阶段对照表：{label(m[1], 'zh')} → {label(m[2], 'zh')}"),
    (r"tensor shape: the request is (.+)", lambda m: f"张量形状：失败的申请正好是 {m[1]}"),
    (r"budget: (.+)", lambda m: f"显存预算：{m[1]}"),
    (r"entry script (.+)", lambda m: f"入口脚本 {m[1]}"),
    (r"timestamps: (\d+) min after training began", lambda m: f"时间戳：训练开始 {m[1]} 分钟后"),
    (r"allocator: PyTorch held (\S+) GiB, not even the weights", lambda m: f"分配器：PyTorch 只占用 {m[1]} GiB，连权重都还没放上"),
    (r"forward/backward frames after loading", lambda m: "加载之后的前向/反向堆栈帧"),
    (r"DataLoader frames after loading", lambda m: "加载之后 DataLoader 在取数据的堆栈帧"),
    (r"model: its weights alone \((\S+) GiB at (\d+) bits\) exceed the (\S+) GiB card",
     lambda m: f"模型：仅权重（{m[2]} 位下 {m[1]} GiB）就超过了 {m[3]} GiB 的显卡"),
    (r"progress: evaluation batch (\d+) of (\d+)", lambda m: f"进度：评估才到第 {m[1]} / {m[2]} 批，输出还没积累起来"),
    (r"an evaluation bar", lambda m: "评估进度条"),
    (r"nothing in the log (?:shows|names) it", lambda m: "日志中没有依据"),
]


def basis_text(basis, lang="en"):
    """One clause of a basis (`frame trainer.py:evaluation_loop; progress: step 3`) for a reader."""
    if lang != "zh":
        return basis
    out = []
    for part in basis.split("; "):
        for pattern, say in _BASIS_ZH:
            m = re.fullmatch(pattern, part)
            if m:
                out.append(say(m))
                break
        else:
            out.append(part)
    return "；".join(out)


def basis_line(d, lang="en"):
    """`Basis: when — …; blame — …` in one line, or '' when the diagnosis has none."""
    b = getattr(d, "basis", None) or {}
    if not b:
        return ""
    if lang == "zh":
        return (f"依据：{label('phase', 'zh')}——{basis_text(b.get('phase', ''), 'zh')}；"
                f"{label('component', 'zh')}——{basis_text(b.get('component', ''), 'zh')}")
    return f"Basis: when — {b.get('phase', '')}; blame — {b.get('component', '')}"
