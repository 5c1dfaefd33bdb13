#!/usr/bin/env python3
"""Generate a realistic multi-gigabyte LLaMA-Factory training log that ends in a multi-rank OOM.

usage: python benchmarks/biglog.py OUT SIZE [--failure end|middle|start]
SIZE like 100M, 1G, 4G. The body is what tqdm writes to a file: every bar state as '\\r' + bar on
one physical line per logging interval, `{'loss': …}` dicts, periodic evaluations (banner, eval bar,
eval dict) and checkpoint saves. `--failure middle|start` plants the OOM there and fills the rest
with other ranks' warnings and NCCL chatter (no progress), as a hung multi-rank job does.
"""

import random
import sys

HEAD = """[INFO|2025-06-01 10:00:00] llamafactory.hparams.parser:401 >> Process rank: 0, world size: 4, device: cuda:0, distributed training: True, compute dtype: torch.bfloat16
[INFO|2025-06-01 10:00:01] llamafactory.data.loader:143 >> Loading dataset alpaca_zh_demo.json...
[INFO|configuration_utils.py:691] 2025-06-01 10:00:05,100 >> loading configuration file /models/Qwen2.5-7B-Instruct/config.json
[INFO|modeling_utils.py:1121] 2025-06-01 10:00:05,200 >> loading weights file /models/Qwen2.5-7B-Instruct/model.safetensors.index.json
Loading checkpoint shards: 100%|██████████| 4/4 [00:10<00:00,  2.50s/it]
[INFO|2025-06-01 10:00:16] llamafactory.model.model_utils.checkpointing:143 >> Gradient checkpointing enabled.
[INFO|2025-06-01 10:00:16] llamafactory.model.adapter:143 >> Fine-tuning method: LoRA
[INFO|2025-06-01 10:00:17] llamafactory.model.loader:143 >> trainable params: 20,185,088 || all params: 7,635,801,600 || trainable%: 0.2643
[INFO|trainer.py:2414] 2025-06-01 10:00:20,000 >> ***** Running training *****
[INFO|trainer.py:2415] 2025-06-01 10:00:20,000 >>   Num examples = 2,000,000
[INFO|trainer.py:2416] 2025-06-01 10:00:20,000 >>   Num Epochs = 3
[INFO|trainer.py:2417] 2025-06-01 10:00:20,000 >>   Instantaneous batch size per device = 4
[INFO|trainer.py:2420] 2025-06-01 10:00:20,000 >>   Total train batch size (w. parallel, distributed & accumulation) = 128
[INFO|trainer.py:2421] 2025-06-01 10:00:20,000 >>   Gradient Accumulation steps = 8
[INFO|trainer.py:2422] 2025-06-01 10:00:20,000 >>   Total optimization steps = {total:,}
[INFO|trainer.py:2423] 2025-06-01 10:00:20,000 >>   Number of trainable parameters = 20,185,088
"""

OOM = """[rank2]: Traceback (most recent call last):
[rank2]:   File "/opt/LLaMA-Factory/src/llamafactory/launcher.py", line 23, in <module>
[rank2]:     launch()
[rank2]:   File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2599, in _inner_training_loop
[rank2]:     tr_loss_step = self.training_step(model, inputs, num_items_in_batch)
[rank2]:   File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 3778, in training_step
[rank2]:     loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
[rank2]:   File "/opt/conda/lib/python3.11/site-packages/transformers/models/qwen2/modeling_qwen2.py", line 816, in forward
[rank2]:     logits = self.lm_head(hidden_states[:, slice_indices, :])
[rank2]:   File "/opt/conda/lib/python3.11/site-packages/transformers/loss/loss_utils.py", line 36, in fixed_cross_entropy
[rank2]:     loss = nn.functional.cross_entropy(source, target, ignore_index=ignore_index, reduction=reduction)
[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB. GPU 2 has a total capacity of 79.15 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process has 76.02 GiB memory in use. Of the allocated memory 72.40 GiB is allocated by PyTorch, and 2.91 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
W0601 18:22:10.500000 4242 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4243 closing signal SIGTERM
E0601 18:22:12.100000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 2 (pid: 4245) of binary: /opt/conda/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""
NOISE = "[rank{r}]:[W601 18:{m:02d}:{s:02d}.{us:06d} ProcessGroupNCCL.cpp:1285] Warning: collective still pending on rank {r}; waiting (heartbeat {n})\n"


def parse_size(text):
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def bar(step, total, t):
    pct = 100 * step // total
    return f"\r {pct:3d}%|{'█' * (pct // 10):<10}| {step}/{total} [{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}<9:59:59,  {1 + t % 7}.{t % 97:02d}s/it]"


def write_log(path, size, failure="end", seed=0):
    rnd = random.Random(seed)
    total = max(100, size // 300)
    body_budget = size if failure == "end" else (size // 2 if failure == "middle" else 0)
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write(HEAD.replace("{total:,}", f"{total:,}"))
        written, step, t = len(HEAD), 0, 0
        while written < body_budget - 4096 and step < total - 20:
            chunk = []
            for _ in range(10):
                step += 1
                for _ in range(5):
                    t += 1
                    chunk.append(bar(step, total, t))
            chunk.append(f"\n{{'loss': {rnd.uniform(0.5, 2):.4f}, 'grad_norm': {rnd.uniform(0.1, 2):.4f}, "
                         f"'learning_rate': {rnd.uniform(1e-5, 1e-4):.4e}, 'epoch': {step / total * 3:.2f}}}\n")
            if step % 5000 == 0:
                chunk.append("[INFO|trainer.py:4011] 2025-06-01 12:00:00,000 >> \n***** Running Evaluation *****\n"
                             "  Num examples = 2000\n  Batch size = 4\n")
                chunk += [f"\r {100 * i // 125:3d}%|█         | {i}/125 [00:{i % 60:02d}<00:10, 12.0it/s]" for i in range(1, 126)]
                chunk.append(f"\n{{'eval_loss': {rnd.uniform(0.5, 2):.4f}, 'eval_runtime': 12.3, 'epoch': {step / total * 3:.2f}}}\n")
            if step % 10000 == 0:
                chunk.append(f"[INFO|trainer.py:3984] 2025-06-01 13:00:00,000 >> Saving model checkpoint to saves/checkpoint-{step}\n")
            text = "".join(chunk)
            out.write(text)
            written += len(text.encode("utf-8"))
        out.write(bar(step, total, t) + OOM)
        written += len(OOM)
        n = 0
        while written < size:
            lines = "".join(NOISE.format(r=rnd.randrange(4), m=n // 3600 % 60, s=n % 60, us=n % 999999, n=n)
                            for n in range(n, n + 2000))
            n += 2000
            out.write(lines)
            written += len(lines)
    return step


if __name__ == "__main__":
    args = sys.argv[1:]
    failure = args[args.index("--failure") + 1] if "--failure" in args else "end"
    print(write_log(args[0], parse_size(args[1]), failure))
