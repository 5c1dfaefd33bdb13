"""Facts of a run as its log states them: model, batch, accumulation, length, method, precision,
sharding, GPUs, the entry script and the launch command, the framework (phrases in phrases.py)."""

import re
from bisect import bisect_right
from itertools import accumulate

from ..core.facts import PRECISION_OF_DTYPE
from .phrases import (ALL, ARCH, ARG, BANNER, COMMAND, COMMAND_HINT, COMMAND_WORDS, DS_KV, FACT, FLAG, FRAMEWORK,
                      FRAMEWORK_HEAD, FRAMEWORK_OF, FRAMEWORK_RANK, FRAMEWORK_RX, MEM_POINT, MEMORY_POINTS, MODEL_PATH,
                      RANK_LINE, SCRIPT, SCRIPT_PATH, TRAINABLE, UNSLOTH, framework_names, to_int)

# a launcher's flag (ARG) -> the fact it sets and how its value reads; the flags that need more are in _arg
_FLAG_FACTS = {"model_name_or_path": ("model", str), "model": ("model", str),
               "per_device_train_batch_size": ("batch", to_int), "per_device_eval_batch_size": ("eval_batch", to_int),
               "gradient_accumulation_steps": ("grad_accum", to_int), "cutoff_len": ("seq_len", to_int),
               "max_seq_length": ("seq_len", to_int), "finetuning_type": ("method", str.lower),
               "quantization_bit": ("quantization_bit", to_int), "lora_rank": ("lora_rank", to_int),
               "lora_target": ("lora_target", str), "nproc_per_node": ("num_gpus", to_int)}


class FactReader:
    """The facts a log states about its run, each kept with the line that said it (first value wins,
    unless a later line is known to overrule it): banners, argument dumps, DeepSpeed's config echo,
    a launch command, the framework's logger names, per-step memory prints."""

    def __init__(self, timeline, progress):
        self.t, self.f = timeline, timeline.facts
        self.progress = progress        # a banner's batch size is an evaluation's while one runs

    def _set(self, name, value, line, overwrite=False):
        if value is None:
            return
        if overwrite or getattr(self.f, name) is None:
            setattr(self.f, name, value)
            self.t.fact_lines[name] = line.no

    def on_facts(self, line, text, mask=ALL):
        f = self.f
        if line.no <= FRAMEWORK_HEAD and mask & COMMAND:   # (a command going on gets every bit)
            self._command(line, text)
        if line.no <= FRAMEWORK_HEAD and f.framework != "llamafactory" and mask & FRAMEWORK:
            self._framework(text)
        if not mask & FACT:                   # a frame's path: its framework and ".py", no fact word
            if mask & SCRIPT:
                self.on_script(line, text)
            return
        if " = " in text:
            m = BANNER.search(text) or UNSLOTH.search(text)
            if m:
                self._banner(line, text)
                return
        if "trainable params" in text:
            m = TRAINABLE.search(text)
            if m:
                self._set("trainable_params", to_int(m.group(1)), line)
                self._set("params_b", round(to_int(m.group(2)) / 1e9, 2), line)
                return
        if "Process rank" in text:
            m = RANK_LINE.search(text)
            if m:
                world = to_int(m.group(1) or m.group(3) or 0)
                if m.group(4) == "True" and world and world > 1:
                    self._set("num_gpus", world, line)
                elif m.group(4) == "False":
                    self._set("num_gpus", 1, line)
                self._set("precision", PRECISION_OF_DTYPE.get(m.group(5)), line)
                self._set("accelerator", m.group(2), line)
            return
        if "......" in text:
            m = DS_KV.search(text)
            if m:
                self._ds_kv(line, m.group(1), m.group(2))
            return
        if mask & FLAG:
            for m in ARG.finditer(text):
                self._arg(line, m.group(1), m.group(2))
        if "ZeRO stage" in text:
            m = re.search(r"Creating \S+ ZeRO stage (\d) optimizer", text)
            if m:
                self._set("deepspeed", f"zero{m.group(1)}", line)
        elif "Gradient checkpointing enabled" in text:
            self._set("grad_ckpt", True, line)
        elif "does not support gradient checkpointing" in text:
            self._set("grad_ckpt", False, line)
        elif "Fine-tuning method:" in text:
            m = re.search(r"Fine-tuning method: (\w+)", text)
            if m:
                self._set("method", {"dora": "lora"}.get(m.group(1).lower(), m.group(1).lower()), line)
        elif "Quantizing model to" in text or "-bit" in text and "quantized model" in text:
            m = re.search(r"Quantizing model to (\d+) bit|Loading (\d+)-bit", text)
            if m:
                self._set("quantization_bit", to_int(m.group(1) or m.group(2)), line)
        elif "for faster training" in text or "vanilla attention" in text:
            self._set("flash_attn", "vanilla" not in text, line)
        elif "Pure bf16" in text:
            self._set("precision", "pure_bf16", line, overwrite=True)
        elif "distributed tasks at" in text:
            m = re.search(r"Initializing (\d+) distributed tasks", text)
            if m:
                self._set("num_gpus", to_int(m.group(1)), line)
        elif "GPU type:" in text or "GPU name" in text:
            m = re.search(r"GPU (?:type|name):\s*(.+)", text)
            if m:
                self._set("gpu", m.group(1).strip(), line)
        if f.model is None and ("oading" in text or "name_or_path" in text):
            m = MODEL_PATH.search(text)
            if m:
                path = re.sub(r"(?:^|/)(?:config\.json|model[\w.-]*\.(?:safetensors|bin|json)|pytorch_model[\w.-]*)$",
                              "", m.group(1).rstrip(",."))
                if path and not path.endswith((".json", ".bin", ".safetensors", ".pt")):
                    self._set("model", path, line)
        if mask & SCRIPT:
            self.on_script(line, text)
        if "Instantiating" in text:
            m = ARCH.search(text)
            if m:
                self._set("precision", PRECISION_OF_DTYPE.get(m.group(2)), line)
        if "expandable_segments:True" in text and "try setting" not in text and "to avoid fragmentation" not in text:
            # set by the user, not PyTorch's hint (whose tail a wrapped paste puts on a line of its own)
            self._set("expandable_segments", True, line)

    def on_script(self, line, text):
        if self.f.script is None and (".py" in text and ("python" in text or "launch" in text or "torchrun" in text
                                                         or "deepspeed" in text or "nohup" in text)
                                      or ".sh" in text and "sh " in text):
            m = SCRIPT_PATH.search(text)
            if m:
                self._set("script", m.group(1) or m.group(2), line)

    def _command(self, line, text):
        """The launch command a log echoes (a shell prompt, `+ cmd`): patched when no config is given."""
        t = self.t
        if t.command is not None and t.command.endswith("\\") and line.no == t.command_line + t.command.count("\n") + 1:
            t.command += "\n" + text                 # a command split with backslashes goes on
            return
        # the launcher opens the line, after settings (`CUDA_VISIBLE_DEVICES=0 …`) or a prompt: a frame's
        # path holding "python" is none, and spares the search
        m = COMMAND_HINT.search(text) if t.command is None and (
            text.startswith(COMMAND_WORDS) or "A" <= text[:1] <= "Z" or text[:1] == "_"
            or "$ " in text or "# " in text or "> " in text or "+ " in text) else None
        if m:                                        # without the shell prompt before it
            t.command, t.command_line = re.sub(r"^[$#>+] ", "", text[m.start():]), line.no

    def _framework(self, text):
        """The framework a log comes from: logger names in its first lines, paths in its frames."""
        m = FRAMEWORK_RX.search(text)
        if m:
            name = FRAMEWORK_OF[m.group(0)]
            if self.f.framework is None or FRAMEWORK_RANK[name] < FRAMEWORK_RANK[self.f.framework]:
                self.f.framework = name

    def frameworks_of(self, texts):
        """_framework for each of `texts`, in one search of their joined text: a line's first name counts."""
        ends = list(accumulate(len(x) + 1 for x in texts))
        seen = -1
        for name, start in framework_names("\n".join(texts)):
            i = bisect_right(ends, start)
            if i != seen:
                seen = i
                self._framework(name)
                if self.f.framework == "llamafactory":
                    return

    def _banner(self, line, text):
        for m in list(BANNER.finditer(text)) + list(UNSLOTH.finditer(text)):
            key, val = m.group(1), to_int(m.group(2))
            if key in ("Instantiating batch size per device", "Instantaneous batch size per device",
                       "Batch size per device"):
                self._set("batch", val, line, overwrite=True)
            elif key == "Gradient Accumulation steps":
                self._set("grad_accum", val, line, overwrite=True)
            elif key in ("Total optimization steps", "Total steps"):
                self._set("total_steps", val, line, overwrite=True)
                self.progress.train_total = val
            elif key == "Number of trainable parameters":
                self._set("trainable_params", val, line)
            elif key == "Num GPUs":
                self._set("num_gpus", val, line)
            elif key.startswith("Total train batch size"):
                b, g = self.f.batch, self.f.grad_accum
                if b and g and val and val % (b * g) == 0:
                    self._set("num_gpus", val // (b * g), line)
            elif key == "Batch size" and self.progress.in_eval:
                self._set("eval_batch", val, line)

    def _ds_kv(self, line, key, val):
        if key == "zero_optimization_stage":
            self._set("deepspeed", f"zero{val}", line, overwrite=True)
        elif key == "train_micro_batch_size_per_gpu":
            self._set("batch", to_int(val), line)
        elif key == "gradient_accumulation_steps":
            self._set("grad_accum", to_int(val), line)
        elif key == "bfloat16_enabled" and val == "True":
            self._set("precision", "bf16", line)
        elif key == "fp16_enabled" and val == "True":
            self._set("precision", "fp16", line)
        elif key == "world_size":
            self._set("num_gpus", to_int(val), line)

    def _arg(self, line, key, val):
        if key in _FLAG_FACTS:
            name, read = _FLAG_FACTS[key]
            self._set(name, read(val), line)
        elif key in ("bf16", "fp16") and val.lower() in ("true", "1"):
            self._set("precision", key, line)
        elif key == "gradient_checkpointing" and val.lower() in ("true", "false"):
            self._set("grad_ckpt", val.lower() == "true", line)
        elif key == "deepspeed":
            m = re.search(r"z(?:ero)?_?(\d)", val)
            self._set("deepspeed", f"zero{m.group(1)}" + ("_offload" if "offload" in val else "") if m else "unknown",
                      line)

    def on_memory(self, line, text):
        m = MEM_POINT.search(text)
        if m is None:
            return
        if m.group("gib"):
            gib = float(m.group("gib"))
        else:
            gib = float(m.group("v")) / (1024 if m.group("u") in ("MiB", "MB") else 1)
        series = self.t.memory_series
        series.append((line.no, gib))
        if len(series) > MEMORY_POINTS:
            del series[0]
