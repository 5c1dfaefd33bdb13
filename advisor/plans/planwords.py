"""The words of a plan: why each move helps (en/zh) and what to do for moves outside the config."""

WHY = {
    "reduce_batch": {"en": "A smaller per-device batch cuts activations and logits in the same proportion; raising gradient "
                           "accumulation by the same factor keeps the effective batch, so results do not change.",
                     "zh": "减小单卡批处理大小，激活值与 logits 按同样的比例减少；梯度累积按同样倍数增大，等效批量不变，训练结果不变。"},
    "grad_accum": {"en": "More accumulation steps keep the effective batch while each step holds fewer samples.",
                   "zh": "增大梯度累积步数：每步处理的样本更少，等效批量不变。"},
    "grad_checkpointing": {"en": "Gradient checkpointing keeps only each layer's input and recomputes the rest in the "
                                 "backward pass: far fewer activations for about 30 % more compute (this is not a "
                                 "checkpoint-N save).",
                           "zh": "梯度检查点只保存每层的输入，反向传播时重算其余中间结果：激活值大幅减少，计算量约增加 30%"
                                 "（它不是 checkpoint-N 那样的训练检查点）。"},
    "reduce_seq_len": {"en": "Activations and logits grow with the sequence length; shorter cutoffs truncate the "
                             "longest samples, so check that answers stay complete.",
                       "zh": "激活值和 logits 随序列长度增长；缩短截断长度会截掉最长的样本，请先确认输入和答案仍然完整。"},
    "precision": {"en": "16-bit weights and activations take half the memory of fp32; bf16 needs an Ampere or newer "
                        "card, fp16 is the choice on V100/T4.",
                  "zh": "16 位计算类型下，权重和激活值只占 fp32 的一半显存；bf16 需要 Ampere 及更新的显卡，V100/T4 上请选 fp16。"},
    "quantize": {"en": "4-bit quantisation (QLoRA) stores the frozen base weights at about half a byte per parameter; "
                       "it trains LoRA adapters on top and changes the result slightly.",
                 "zh": "4 位量化（QLoRA）让冻结的基座权重每个参数只占约半字节；在其上训练 LoRA，结果会略有变化。"},
    "use_lora": {"en": "LoRA trains small adapters instead of every weight: gradients and optimizer states shrink "
                       "from 14 bytes per parameter to almost nothing.",
                 "zh": "LoRA 只训练新增的小分支，不训练全部权重：梯度与优化器状态从每个参数 14 字节降到几乎为零。"},
    "optimizer_8bit": {"en": "An 8-bit (paged) AdamW stores its two moments in 2 bytes per parameter instead of 8.",
                       "zh": "8 位（分页）AdamW 把一阶和二阶矩估计从每个参数 8 字节压到 2 字节。"},
    "smaller_model": {"en": "When even quantised weights do not fit, only a smaller model or a bigger card will.",
                      "zh": "如果量化后的权重仍放不下，只能换更小的模型或更大的显卡。"},
    "zero_sharding": {"en": "DeepSpeed ZeRO shards optimizer states (stage 1), gradients (2) and weights (3) across "
                            "the GPUs instead of copying them to each: same result, less memory per card.",
                      "zh": "DeepSpeed ZeRO 把优化器状态（stage 1）、梯度（stage 2）和权重（stage 3）切分到各张卡上，"
                            "而不是每张卡各存一份：结果相同，单卡显存更少。"},
    "cpu_offload": {"en": "Offloading moves optimizer states (and with ZeRO-3 weights) to host RAM — slower, same "
                          "result; for a ZeRO-3 save, do not gather the 16-bit weights on one GPU.",
                    "zh": "卸载把优化器状态（ZeRO-3 时还有权重）放到主机内存：更慢，但结果不变；"
                          "ZeRO-3 保存时不要把 16 位权重收集到一张卡上。"},
    "free_other_process": {"en": "Another process holds the card; no training setting can give that memory back.",
                           "zh": "显卡被其他进程占用；任何训练设置都无法把这部分显存要回来。"},
    "expandable_segments": {"en": "Expandable segments let the allocator grow blocks in place instead of leaving "
                                  "fragments too small for the next request.",
                            "zh": "可扩展显存段（expandable_segments）让分配器原地扩展显存块，不再留下装不下下一次申请的碎片。"},
    "eval_batch": {"en": "Evaluation has its own batch size (default 8 even when training uses 1).",
                   "zh": "评估有自己的批处理大小（per_device_eval_batch_size，即使训练用 1，默认也是 8）。"},
    "eval_accumulation": {"en": "eval_accumulation_steps moves accumulated predictions to the CPU every few steps "
                                "instead of keeping all of them on the GPU.",
                          "zh": "eval_accumulation_steps 每隔几步把累积的预测结果转移到 CPU，而不是全部留在显卡上。"},
    "fix_non_memory_bug": {"en": "This failure is not about memory: memory settings will not fix it.",
                           "zh": "这次失败与显存无关：调整显存设置解决不了它。"},
    "more_host_ram": {"en": "Host RAM, not GPU memory, ran out: fewer worker processes, streaming the data and "
                            "low_cpu_mem_usage loading help; otherwise add RAM or swap.",
                      "zh": "耗尽的是主机内存而不是显存：减少工作进程、流式读取数据、low_cpu_mem_usage 加载都有帮助；"
                            "否则请增加内存或交换空间。"},
    "engine_memory_share": {"en": "The engine takes this share of the card for its weights and KV cache up front; a smaller "
                                  "share leaves room for what runs beside it (its warm-up and CUDA graphs, or the RL "
                                  "actor on the same card), with fewer requests served at once.",
                            "zh": "推理引擎启动时就按这个比例占下显卡，用于权重和 KV cache；比例调小，给同卡上的其他部分"
                                  "（引擎的预热和 CUDA graph，或 RL 中同卡的 actor）留出空间，代价是同时处理的请求变少。"},
    "enforce_eager": {"en": "Eager mode skips CUDA-graph capture and the memory its graphs keep, at some decoding speed.",
                      "zh": "eager 模式不捕获 CUDA graph，省下 graph 占用的显存，解码会稍慢。"},
    "kv_cache_fp8": {"en": "An fp8 KV cache holds twice the tokens in the same memory; it changes outputs slightly.",
                     "zh": "fp8 的 KV cache 在同样的显存里能放下两倍的 token；输出会略有变化。"},
    "tensor_parallel": {"en": "Tensor parallelism splits every layer's weights across the GPUs: each holds a share.",
                        "zh": "张量并行把每层的权重切分到多张卡上，每张卡只存一部分。"},
    "generation_len": {"en": "Generation keeps a KV cache and logits for every new token; fewer new tokens per sample "
                             "need less, but long answers are cut.",
                       "zh": "生成时每个新 token 都要保留 KV cache 和 logits；减少每条样本生成的 token 数能省显存，但长答案会被截断。"},
}

# an engine's batch and length are its own settings: said in its words
ENGINE_WHY = {
    "reduce_batch": {"en": "The engine runs up to max_num_seqs sequences at once and warms its sampler up with that many: "
                           "fewer at once need less memory outside the KV cache; results do not change, throughput "
                           "falls.",
                     "zh": "引擎最多同时运行 max_num_seqs 条序列，并按这个数量预热采样器：同时运行的序列少了，KV cache 之外"
                           "需要的显存就少；结果不变，吞吐量下降。"},
    "reduce_seq_len": {"en": "max_model_len caps the longest request the engine accepts and sizes its warm-up; longer "
                             "requests are refused.",
                       "zh": "max_model_len 限定引擎接受的最长请求，也决定预热的规模；更长的请求会被拒绝。"},
    "quantize": {"en": "A checkpoint quantised to 4 bits (AWQ, GPTQ) holds its weights in about a quarter of their 16-bit "
                       "size, fp8 in half; answers change slightly.",
                 "zh": "量化到 4 位的权重（AWQ、GPTQ）只占 16 位时的约四分之一，fp8 占一半；回答会略有变化。"},
    "precision": {"en": "An engine serves in the model's own 16-bit dtype unless told otherwise: fp32 weights take "
                        "twice the memory for no gain in serving.",
                  "zh": "引擎默认按模型自己的 16 位类型提供服务；fp32 权重多占一倍显存，对推理没有好处。"},
}

# Each move in a few words, for a support reply that speaks to many runs at once (no numbers).
SHORT = {
    "reduce_batch": ("lower the per-device batch size", "减小单卡批处理大小"),
    "grad_accum": ("raise gradient accumulation to keep the effective batch", "增大梯度累积步数，保持等效批量不变"),
    "grad_checkpointing": ("turn on gradient checkpointing", "开启梯度检查点"),
    "reduce_seq_len": ("shorten the cutoff length", "缩短截断长度（cutoff_len）"),
    "precision": ("train in bf16/fp16 instead of fp32", "计算类型改用 bf16/fp16，不用 fp32"),
    "quantize": ("load the model in 4 bit (QLoRA)", "以 4 位量化加载模型（QLoRA）"),
    "use_lora": ("fine-tune with LoRA instead of all weights", "用 LoRA 代替全参数微调"),
    "optimizer_8bit": ("use an 8-bit or paged optimizer", "使用 8 位或分页优化器"),
    "smaller_model": ("pick a smaller model", "换一个更小的模型"),
    "zero_sharding": ("shard with DeepSpeed ZeRO-2/3 across the GPUs", "用 DeepSpeed ZeRO-2/3 在多卡间切分"),
    "cpu_offload": ("offload to CPU (and gather 16-bit weights on save off)", "卸载到 CPU（保存时不收集 16 位权重）"),
    "free_other_process": ("free the GPU from other processes or pick another card", "释放被其他进程占用的显卡，或换一张卡"),
    "expandable_segments": ("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                            "设置 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    "eval_batch": ("lower per_device_eval_batch_size", "调小 per_device_eval_batch_size"),
    "eval_accumulation": ("set eval_accumulation_steps to move eval outputs to the CPU",
                          "设置 eval_accumulation_steps，把评估输出移到 CPU"),
    "fix_non_memory_bug": ("fix the underlying error — memory settings will not help", "修复真正的错误：调整显存设置没有用"),
    "more_host_ram": ("give the job more host RAM, or load with low_cpu_mem_usage and fewer workers",
                      "增加主机内存，或用 low_cpu_mem_usage 加载并减少预处理进程"),
    "engine_memory_share": ("lower the inference engine's gpu_memory_utilization", "调低推理引擎的 gpu_memory_utilization"),
    "enforce_eager": ("run the engine eagerly (enforce_eager), without CUDA graphs", "以 eager 模式运行引擎（enforce_eager），不用 CUDA graph"),
    "kv_cache_fp8": ("store the KV cache in fp8 (kv_cache_dtype: fp8)", "KV cache 改用 fp8（kv_cache_dtype: fp8）"),
    "tensor_parallel": ("split the model across GPUs with tensor parallelism (tensor_parallel_size)",
                        "用张量并行（tensor_parallel_size）把模型切分到多张卡"),
    "generation_len": ("generate fewer new tokens per sample (max_new_tokens)", "减少每条样本生成的 token 数（max_new_tokens）"),
}

# an engine's moves in its own words
ENGINE_SHORT = {"reduce_batch": ("lower max_num_seqs, the sequences the engine runs at once", "调小 max_num_seqs（引擎同时运行的序列数）"),
                "reduce_seq_len": ("lower max_model_len", "调小 max_model_len"),
                "quantize": ("serve a 4-bit checkpoint of the model (AWQ, GPTQ) or quantise it as it loads "
                             "(vLLM: --quantization fp8)",
                             "改用该模型的 4 位量化版本（AWQ、GPTQ），或在加载时量化（vLLM：--quantization fp8）")}


_DISPLAY = {
    "reduce_batch": {"en": "halve the per-device batch size and double gradient accumulation",
                     "zh": "单卡批处理大小减半，梯度累积翻倍"},
    "reduce_seq_len": {"en": "shorten the longest sequences (cutoff_len / max_seq_length, image resolution)",
                       "zh": "缩短截断长度（cutoff_len / max_seq_length）或图像分辨率"},
    "free_other_process": {"en": "run `nvidia-smi`, stop the other process (or pick a free GPU with CUDA_VISIBLE_DEVICES)",
                           "zh": "运行 `nvidia-smi`，停掉其他进程（或用 CUDA_VISIBLE_DEVICES 换一张空闲的卡）"},
    "smaller_model": {"en": "pick a smaller model or a card with more memory",
                      "zh": "换一个更小的模型或显存更大的显卡"},
    "fix_non_memory_bug": {"en": "fix the error shown as evidence (see `oom-doctor explain {rule}`)",
                           "zh": "修复证据中显示的错误（见 `oom-doctor explain {rule}`）"},
    "more_host_ram": {"en": "add RAM or swap; confirm with `dmesg | grep -i oom`",
                      "zh": "增加内存或交换空间；用 `dmesg | grep -i oom` 确认"},
    "cpu_offload": {"en": "in the DeepSpeed JSON set \"stage3_gather_16bit_weights_on_model_save\": false and recover "
                          "weights with zero_to_fp32.py",
                    "zh": "在 DeepSpeed 配置中设置 \"stage3_gather_16bit_weights_on_model_save\": false，"
                          "再用 zero_to_fp32.py 恢复权重"},
    "quantize": {"en": "load with BitsAndBytesConfig(load_in_4bit=True) and train a PEFT LoRA adapter",
                 "zh": "用 BitsAndBytesConfig(load_in_4bit=True) 加载并训练 PEFT LoRA 适配器"},
    "use_lora": {"en": "wrap the model with peft.get_peft_model(model, LoraConfig(...))",
                 "zh": "用 peft.get_peft_model(model, LoraConfig(...)) 包装模型"},
}


_FSDP_SAVE = {"en": "save a sharded state dict (fsdp_state_dict_type: SHARDED_STATE_DICT), or gather the full one on "
                    "rank 0 only, offloaded to the CPU (FullStateDictConfig(rank0_only=True, offload_to_cpu=True))",
              "zh": "保存分片的 state dict（fsdp_state_dict_type: SHARDED_STATE_DICT），或只在 rank 0 上收集完整的 "
                    "state dict 并卸载到 CPU（FullStateDictConfig(rank0_only=True, offload_to_cpu=True)）"}


_FSDP_OFFLOAD = {"en": "turn on FSDP's CPU offload of parameters, gradients and optimizer states (HF Trainer: add "
                       "`offload` to `fsdp`, e.g. \"full_shard auto_wrap offload\"; accelerate: fsdp_offload_params: true)",
                 "zh": "打开 FSDP 的 CPU 卸载，把参数、梯度和优化器状态放到内存（HF Trainer：在 `fsdp` 中加入 `offload`，"
                       "例如 \"full_shard auto_wrap offload\"；accelerate：fsdp_offload_params: true）"}


def _fsdp(c):
    from .compat import fsdp_run           # DeepSpeed's gather-on-save is not an FSDP run's setting
    return fsdp_run(c)


# a script that generates or predicts with no engine (diffusers, generate(), a model's forward in
# torch.no_grad()): no training knob exists, so its moves are said in what the script does
GENERATION_SHORT = {
    "reduce_batch": ("run fewer inputs at once (fewer prompts, images or samples per call)",
                     "每次少处理一些输入（每次调用的提示、图片或样本更少）"),
    "reduce_seq_len": ("shorten what each input makes: fewer new tokens, a lower resolution or fewer frames",
                       "缩短每个输入的输出：更少的新 token、更低的分辨率或更少的帧"),
    "precision": ("load the model in float16/bfloat16 (torch_dtype=torch.float16), and run under torch.no_grad()",
                  "以 float16/bfloat16 加载模型（torch_dtype=torch.float16），并在 torch.no_grad() 下运行"),
    "cpu_offload": ("offload what waits to the CPU (diffusers: enable_model_cpu_offload(); transformers: "
                    "device_map=\"auto\")",
                    "把暂时不用的部分卸载到 CPU（diffusers：enable_model_cpu_offload()；transformers：device_map=\"auto\"）"),
}
GENERATION_WHY = {
    "reduce_batch": ("Each input carries its own activations (and, generating, its own KV cache): fewer at once "
                     "need proportionally less memory; the outputs are the same.",
                     "每个输入都有自己的激活值（生成时还有自己的 KV cache）：同时处理的越少，显存按比例越少；输出不变。"),
}


_DS_OFFLOAD = {"en": "offload the optimizer states to the CPU (DeepSpeed JSON: \"zero_optimization\": "
                      "{\"offload_optimizer\": {\"device\": \"cpu\"}}; with ZeRO-3 also offload_param)",
               "zh": "把优化器状态卸载到 CPU（DeepSpeed 配置：\"zero_optimization\": {\"offload_optimizer\": "
                     "{\"device\": \"cpu\"}}；ZeRO-3 时还可设置 offload_param）"}


def display_text(action, c):
    if c.engine_job and action in ENGINE_SHORT:
        return ENGINE_SHORT[action][1 if c.lang == "zh" else 0]
    if c.generation and action in GENERATION_SHORT:
        return GENERATION_SHORT[action][1 if c.lang == "zh" else 0]
    if action == "expandable_segments":
        var = {"npu": "PYTORCH_NPU_ALLOC_CONF", "rocm": "PYTORCH_HIP_ALLOC_CONF"}.get(c.d.accelerator,
                                                                                     "PYTORCH_CUDA_ALLOC_CONF")
        return f"export {var}=expandable_segments:True"
    if action == "cpu_offload" and _fsdp(c):
        return (_FSDP_SAVE if c.d.phase == "checkpoint_save" else _FSDP_OFFLOAD)["zh" if c.lang == "zh" else "en"]
    if action == "cpu_offload" and c.d.phase != "checkpoint_save":    # the gather-on-save words are a save's only
        return _DS_OFFLOAD["zh" if c.lang == "zh" else "en"]
    text = _DISPLAY.get(action, {}).get(c.lang) or _DISPLAY.get(action, {}).get("en", "")
    if not text and action in SHORT:      # the config's dialect has no key for it: say it in words
        text = SHORT[action][1 if c.lang == "zh" else 0]
    return text.format(rule=c.d.rule)


# Moves that are config changes even when the patch cannot carry them (the key or its value is
# unknown, or the change lives in the DeepSpeed JSON): "change by hand", not "outside the config".
MANUAL = ("reduce_batch", "grad_accum", "grad_checkpointing", "reduce_seq_len", "precision", "optimizer_8bit",
          "zero_sharding", "cpu_offload", "eval_batch", "eval_accumulation", "engine_memory_share", "enforce_eager",
          "kv_cache_fp8", "tensor_parallel", "generation_len")


def why_text(action, c, changes):
    """Why a move helps; the batch move says what its own numbers do (8 → 1 is not a halving)."""
    if c.engine_job and action in ENGINE_WHY:
        return ENGINE_WHY[action][c.lang]
    if c.generation and action in GENERATION_WHY:
        return GENERATION_WHY[action][1 if c.lang == "zh" else 0]
    if action == "reduce_batch":
        said = _batch_why(c.lang, changes.get(c.key("batch")), changes.get(c.key("grad_accum")))
        if said:
            return said
    return WHY[action][c.lang]


def _batch_why(lang, batch, accum):
    if not batch or not accum or not all(isinstance(v, int) and v > 0 for v in batch + accum):
        return None
    (b, nb), (g, ng) = batch, accum
    if b <= nb:
        return None
    same = b * g == nb * ng
    if lang == "zh":
        acts = "减半" if b == 2 * nb else f"约降到原来的 {nb}/{b}" if b % nb else f"约降到原来的 1/{b // nb}"
        keep = f"等效批量仍是 {b} × {g} = {b * g}，训练结果不变。" if same else \
            f"等效批量从 {b} × {g} = {b * g} 变为 {nb} × {ng} = {nb * ng}，结果会略有不同。"
        return f"单卡批处理大小从 {b} 降到 {nb}，激活值和 logits {acts}；梯度累积从 {g} 增到 {ng}，" + keep
    acts = "halve" if b == 2 * nb else f"fall to about {nb}/{b}" if b % nb else f"fall to about 1/{b // nb}"
    keep = f"keeps the effective batch at {b} × {g} = {b * g}, so results do not change." if same else \
        f"moves the effective batch from {b} × {g} = {b * g} to {nb} × {ng} = {nb * ng}, so results change slightly."
    return f"A per-device batch of {nb} instead of {b}: activations and logits {acts}; gradient accumulation " \
           f"{g} → {ng} " + keep
