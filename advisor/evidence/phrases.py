"""The phrases the parser looks for, and the bits that name its per-line checks.

Each check (progress, phase markers, facts, the entry script, memory prints, failure signals, the
framework, the launch command, a launcher's flags) has its patterns here, next to the literals a
line must hold before a pattern is tried: the parser (parser.py) dispatches a line to the checks
whose words it holds; progress.py and run_facts.py run them.
"""

import re

from .anchors import Gated, automaton

FRAMEWORK_HEAD = 500   # logger names identify the framework in a log's first lines; frames do later

BAR = re.compile(r"(?:^|\r)\s*(?:(?P<desc>(?:[^|\r\s][^|\r]*?)?):\s*)?(?P<pct>\d{1,3})%\s*\|[^|]*\|\s*(?P<n>\d+)"
                  r"/(?P<total>\d+|\?)")    # the description starts after the spaces: one way to split them
BAR_LIGHT = re.compile(r"(?P<desc>[A-Z][\w ]{0,80}?):\s*(?P<pct>\d{1,3})%\s+(?P<n>\d+)/(?P<total>\d+)")  # lightning/colab
# the same without its bar under any description ("padding:  65% 2207000/3382137 [03:08<01:16, …]"):
# tqdm's timing bracket after the counts tells it from prose. Found by its tail (a literal first: a
# fast scan), then its description read from the 80 characters before it (plain_bar)
BAR_PLAIN = re.compile(r"(?P<desc>[^\W\d][^:|\[\]\r]{0,80}?):\s*(?P<pct>\d{1,3})%\s+(?P<n>\d+)/(?P<total>\d+) \[")
BAR_PLAIN_TAIL = re.compile(r":\s*\d{1,3}%\s+\d+/\d+ \[")
# the HF Trainer's notebook bar as a paste renders it: "[ 501/1500 06:35 < 13:11, 1.26 it/s, Epoch 1/3]"
# (transformers utils/notebook.py); only the training bar names the epoch
BAR_NOTEBOOK = re.compile(r"\[\s*(?P<n>\d+)/(?P<total>\d+) [\d:]+(?: < [\d:]+)?(?:, [\d.]+ it/s)?, (?P<desc>Epoch [\d.]+/\d+)(?P<pct>)\]")
# a bar whose description names a tensor ("layers.27.mlp.weight : 85%|…"): weights placed one by one
TENSOR_NAME = re.compile(r"\w\.(?:weight|bias)\b")
# a training bar cut after "N%|" (a narrow terminal, a paste; "Epoch 0:   4%|█▎"): its percentage is all it says
BAR_CUT = re.compile(r"^\s*(?:(?P<desc>[^\W\d][^|:\r]{0,80}?):\s*)?(?P<pct>\d{1,3})%\|(?P<n>)(?P<total>)")
# a loss a loop prints with its counter ("iter 3436 step 53: loss 2.99", "iter = 0 of 60000 completed, loss = 4.35",
# "Epoch: [1][   0/1989]  Time 15.9  Loss 0.27"): the counter says how many steps were done
LOSS_LINE = re.compile(r"\b(?:[Ss]teps?|[Ii]ter\w*)\s*[:=]?\s*(?P<n>\d+)\b.{0,200}?\b[Ll]oss\b\s*[:=]?\s*-?\d"
                        r"|(?P<unit>Epoch|epoch|Step|Iter|Batch)\W{1,3}(?:(?P<epoch>\d+)\W{1,6})?(?P<of>\d+)\s*/\s*\d+\b"
                        r".{0,200}?\b[Ll]oss\b\W{0,3}-?\d")
# the script a launcher ran: "python -u x.py", torchrun/deepspeed/accelerate lines, DeepSpeed's echoed argv
SCRIPT_PATH = re.compile(r"(?:python\d?(?:\.\d+)?|torchrun|deepspeed|launch|'-u',|nohup)\s+(?:['\"]?-[-\w=.]+['\"]?,?\s+)*"
                     r"['\"]?((?:[\w.-]+/)*[\w.-]+\.py)\b"
                     r"|(?:^|[$#>] )(?:bash|sh|zsh) ((?:[\w.-]+/)*[\w.-]+\.sh)\b")     # a shell script run at a prompt
# per-step memory a run prints: ms-swift's 'memory(GiB)', max_memory_allocated prints, "Max memory allocated: X GB"
MEM_POINT = re.compile(r"'memory\(GiB\)':\s*'?(?P<gib>[\d.]+)"
                        r"|(?:max_memory_allocated|[Mm]ax(?:imum)? memory allocated|[Pp]eak memory)\W{0,4}(?P<v>[\d.]+)\s*(?P<u>GiB|GB|MiB|MB)")
MEMORY_POINTS = 64
# a training loop announcing its start, in the words most loops use
TRAIN_START = re.compile(r"(?:[Ss]tart(?:ing|ed)?|[Bb]egin(?:ning)?) (?:the )?(?:model )?training\b|[Tt]raining (?:started|begins)"
                          r"|\[before the start of training step\]"    # Megatron's timer line before its first step
                          # HF models' first training forward with checkpointing on (modeling_*.py forward)
                          r"|`use_cache=True` is incompatible with gradient checkpointing")
# an evaluation announced in the words most loops use ("Starting final eval...", "Running validation")
EVAL_START = re.compile(r"(?:[Ss]tart(?:ing|ed)?|[Bb]egin(?:ning)?|[Rr]unning|[Pp]erforming) (?:the )?(?:final )?"
                         r"(?:eval(?:uation)?|validation|testing)\b")
# Keras's training bar: "  12/500 [====>.......] - ETA: 5:21 - loss: 2.3012" (keras/src/utils/progbar.py):
# its count is the batches of this epoch done
KERAS_BAR = re.compile(r"^\s*(?P<n>\d+)/(?P<total>\d+) \[[=>.]*\] - .{0,200}?\bloss: -?\d")
DICT = re.compile(r"\{'(loss|eval_loss|train_runtime|eval_runtime|predict_loss)'")
BANNER = re.compile(r"(?:^|\s)(Num examples|Num Epochs|Instantaneous batch size per device|Total train batch size "
                     r"\(w\. parallel, distributed & accumulation\)|Gradient Accumulation steps|Total optimization steps"
                     r"|Number of trainable parameters|Batch size|Num GPUs) = ([\d,]+)")
UNSLOTH = re.compile(r"(Num GPUs|Batch size per device|Gradient Accumulation steps|Total steps|Number of trainable parameters)"
                      r" = ([\d,]+)")
TRAINABLE = re.compile(r"trainable params: ([\d,]+) \|\| all params: ([\d,]+)")
RANK_LINE = re.compile(r"Process rank: \d+, (?:world size: (\d+), )?device: (?:(cuda|npu|xpu|mps)|\S)\S*, (?:n_gpu: (\d+), )?"
                        r"distributed training: (\w+), compute dtype: torch\.(\w+)")
DS_KV = re.compile(r"^\s*(zero_optimization_stage|train_micro_batch_size_per_gpu|gradient_accumulation_steps"
                    r"|bfloat16_enabled|fp16_enabled|world_size)\s\.{3,}\s(\S+)")
ARG = re.compile(r"--(model_name_or_path|per_device_train_batch_size|gradient_accumulation_steps|cutoff_len"
                  r"|max_seq_length|finetuning_type|quantization_bit|deepspeed|per_device_eval_batch_size|lora_rank"
                  r"|lora_target|bf16|fp16|gradient_checkpointing|model|nproc_per_node)['\"]?(?:,\s*|\s+|=)['\"]?([^'\",\s]+)")
MODEL_PATH = re.compile(r"(?:loading (?:weights|configuration) file|Loading model|_name_or_path\"?:)\s*\"?([^\s\"]+)")
# phase lines: their literals are asked for before the regex (anchors.Gated)
SAVE_LINE = Gated(r"Saving model checkpoint to|Saving checkpoint|Saving model to|Saving trained model|save_16bit_model"
                   r"|\[Torch\] Checkpoint|Saving the model|saving model checkpoint"
                   # FSDP's full state dict, gathered to be saved (torch distributed/fsdp/_state_dict_utils.py)
                   r"|Failed to clone\(\) tensor with name")
LOAD_LINE = Gated(r"loading weights file|Loading checkpoint shards|Instantiating \w+ model|Quantizing model to"
                   r"|Loading \S+-bit|activating zero\.init|Loading model|finished initializing model|load_model"
                   # a checkpoint shard named as it is read ("Processing pytorch_model-00001-of-00002.bin")
                   r"|\d{5}-of-\d{5}\.(?:bin|safetensors|pt)\b")
SETUP_LINE = Gated(r"DeepSpeed info: version|Creating \S+ ZeRO stage|DeepSpeed Basic Optimizer|initializing optimizer states"
                    r"|Stage 3 initialize beginning|DeepSpeedZeRoOffload initialize|Final Optimizer"
                    r"|\[(?:stage_1_and_2|stage3)\.py:\d+:__init__\]"
                    # fairscale's and Megatron's process groups, set up before the checkpoint is read;
                    # ColossalAI's launch
                    r"|initializing model parallel with size|environment is initialized, data parallel size")
ARCH = re.compile(r"Instantiating (\w+?)(?:ForCausalLM|LMHeadModel|ForConditionalGeneration)\b[^.]* dtype torch\.(\w+)")

# a bar counting examples or batches of a dataset, not steps (datasets' map and filter: "examples/s", "ba/s")
PREP_UNIT = Gated(r"\d (?:examples|ba)/s\]")          # (every training bar asks: literals first)
# bar descriptions of data preparation (datasets, LLaMA-Factory, TRL); any other bar counts as training
PREP_WORDS = ("tokeniz", "map", "convert", "filter", "pack", "truncat", "adding eos", "applying", "download",
               "preprocess", "format", "generating", "extract", "shuffl", "flatten", "casting", "saving the dataset",
               "resolving", "fetching", "computing checksums", "load", "encod", "process", "collat")

FRAMEWORKS = (("llamafactory", "llamafactory"), ("llmtuner", "llamafactory"), ("LLaMA-Factory", "llamafactory"),
               ("axolotl", "axolotl"), ("unsloth", "unsloth"), ("Unsloth", "unsloth"), ("openrlhf", "openrlhf"),
               ("swift/", "ms-swift"), ("autotrain", "autotrain"), ("lightning", "lightning"), ("trl/", "trl"),
               ("deepspeed", "deepspeed"), ("DeepSpeed", "deepspeed"), ("transformers/", "transformers"),
               ("trainer.py", "transformers"), ("peft/", "peft"))
FRAMEWORK_RANK = {name: i for i, (_, name) in enumerate(FRAMEWORKS)}
FRAMEWORK_OF = dict(FRAMEWORKS)
FRAMEWORK_RX = re.compile("|".join(re.escape(n) for n, _ in FRAMEWORKS))

# phase lines whose cut by a terminal wrap the reader must see (lines.seam_is_cut)
MARKER_PHRASES = re.compile(r"\*{5} Running (?:training|Evaluation|Prediction) \*{5}|Saving model checkpoint to"
                            r"|Loading checkpoint shards|\*{5} (?:train|eval) metrics \*{5}")


# a launcher with settings after it; frames (`File ".../bin/torchrun"`) have none
COMMAND_HINT = re.compile(r"(?:^|[$#>+] )(?:[A-Z_]+=\S+ )*(?:llamafactory-cli|lmf|torchrun|accelerate launch|swift (?:sft|pt|rlhf|infer|"
                           r"deploy|export|eval)|vllm serve|tune run|deepspeed|python[\d.]*) \S.*(?:--\w|\w=|\.ya?ml\b)")
# a word each launcher of COMMAND_HINT starts with (the head's gate: a line without one is no command)
COMMAND_WORDS = ("llamafactory-cli", "lmf", "torchrun", "accelerate", "swift", "vllm", "tune", "deepspeed", "python")
PROGRESS_PATTERNS = (BAR, BAR_LIGHT, MARKER_PHRASES)   # bars and phase lines a wrap may cut (reader)
# which checks a line runs: one bit each (FRAMEWORK and COMMAND only in the log's head; FLAG, a
# launcher's `--flag value`, is part of the facts)
PROGRESS, MARKER, FACT, SCRIPT, MEMORY, SIGNAL, FRAMEWORK, COMMAND, FLAG = (1 << i for i in range(9))
ALL = (1 << 9) - 1
# (partition_parameters.py holds ZeRO-3's zero.Init and its parameter gathers)
ZERO_FRAME = re.compile(r"deepspeed/runtime/zero/(stage3|stage_1_and_2|partition_parameters)\.py")


def plain_bar(text):
    tail = BAR_PLAIN_TAIL.search(text)
    return BAR_PLAIN.search(text, max(0, tail.start() - 81), tail.end()) if tail else None


def zero_of_frames(lines):
    for ln in lines:
        m = ZERO_FRAME.search(ln.text) if "runtime/zero/" in ln.text else None
        if m:
            return "zero2" if m.group(1) == "stage_1_and_2" else "zero3"    # stage_1_and_2: 2 is the likelier
    return None


def to_int(s):
    try:
        return int(str(s).replace(",", ""))
    except ValueError:
        return None


_FRAMEWORK_AUTOMATON = []


def framework_names(text):
    """(name, offset) of each framework name in `text`, leftmost first as FRAMEWORK_RX finds them;
    an automaton scans a window's 20 KB many times faster than the regex's alternation."""
    if not _FRAMEWORK_AUTOMATON:
        names = [n for n, _ in FRAMEWORKS]
        found = automaton(names, leftmost_first=True)
        _FRAMEWORK_AUTOMATON.append(found and (found, names))
    found = _FRAMEWORK_AUTOMATON[0]
    if found is None:
        return ((m.group(0), m.start()) for m in FRAMEWORK_RX.finditer(text))
    scanner, names = found
    return ((names[k], start) for k, start, _ in scanner.find_matches_as_indexes(text))
