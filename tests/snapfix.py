"""Synthetic PyTorch memory snapshots, written for this project to the documented format.

Shapes follow torch/cuda/memory.py `_snapshot` (segments of blocks with frames innermost first,
device_traces with alloc/segment_free/oom entries, allocator_settings); 2.0's blocks carry
`history` instead of `frames`. Every block list fills its segment exactly (memory_viz's segsum
asserts it), so PyTorch's own reader accepts these files too.
"""

import pickle

MIB, GIB = 2**20, 2**30
HF = "/usr/lib/python3/site-packages/transformers"
TORCH = "/usr/lib/python3/site-packages/torch"


def f(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


MAIN = [f(f"{HF}/trainer.py", 2279, "_inner_training_loop"), f(f"{HF}/trainer.py", 1859, "train"),
        f("train.py", 40, "<module>")]
WEIGHTS = [f(f"{TORCH}/nn/modules/module.py", 1160, "to"), f(f"{HF}/modeling_utils.py", 3850, "from_pretrained"),
           f("train.py", 20, "<module>")]
ACTS = [f(f"{TORCH}/nn/modules/linear.py", 116, "forward"), f(f"{TORCH}/nn/modules/module.py", 1527, "_call_impl"),
        f(f"{HF}/models/llama/modeling_llama.py", 310, "forward"), f(f"{HF}/trainer.py", 3161, "compute_loss"),
        f(f"{HF}/trainer.py", 3138, "training_step")] + MAIN
GRADS = [f("??", 0, "torch::autograd::Engine::evaluate_function(std::shared_ptr<GraphTask>&, Node*)"),
         f("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)")]
OPTIM = [f(f"{TORCH}/optim/adamw.py", 139, "_init_group"), f(f"{TORCH}/optim/adamw.py", 188, "step"),
         f(f"{TORCH}/optim/optimizer.py", 373, "wrapper")] + MAIN


class Builder:
    def __init__(self, legacy=False):
        self.segments, self.trace, self.addr, self.legacy = [], [], 0x7F0000000000, legacy

    def segment(self, blocks, kind="large"):
        """blocks: (size, state, frames); one segment holding them back to back."""
        base, out, at = self.addr, [], self.addr
        for size, state, frames in blocks:
            b = {"address": at, "size": size, "state": state}
            if self.legacy:
                b["history"] = [{"addr": at, "real_size": size, "frames": frames}] if state != "inactive" else []
            else:
                b.update(requested_size=size if state != "inactive" else 0, frames=frames if state != "inactive" else [])
            out.append(b)
            if state != "inactive":
                self.trace.append({"action": "alloc", "addr": at, "size": size, "stream": 0, "frames": frames})
            at += size
        total = at - base
        active = sum(s for s, st, _ in blocks if st != "inactive")
        self.segments.append({"device": 0, "address": base, "total_size": total, "stream": 0, "segment_type": kind,
                              "segment_pool_id": (0, 0), "allocated_size": active, "active_size": active,
                              "blocks": out})
        self.addr = at + 64 * MIB
        return self

    def oom(self, size, free, frames):
        self.trace.append({"action": "segment_free", "addr": 0x7E0000000000, "size": 20 * MIB, "stream": 0,
                           "frames": frames})
        self.trace.append({"action": "oom", "size": size, "device_free": free, "stream": 0, "frames": frames,
                           "time_us": 1700000000000000})
        return self

    def data(self):
        out = {"segments": self.segments, "device_traces": [self.trace]}
        if not self.legacy:
            out["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1,
                                         "garbage_collection_threshold": 0.0, "expandable_segments": False,
                                         "pinned_num_register_threads": 1}
        return out

    def write(self, path):
        path.write_bytes(pickle.dumps(self.data()))
        return path


def activations_first_step(legacy=False):
    """A 24 GiB card: 14 GiB of weights, 8 GiB of activations, a 2 GiB forward request fails."""
    b = Builder(legacy)
    b.segment([(2 * GIB, "active_allocated", WEIGHTS)] * 7)
    b.segment([(1 * GIB, "active_allocated", ACTS)] * 8 + [(20 * MIB, "inactive", [])])
    return b.oom(2 * GIB, 700 * MIB, ACTS)


def fragmentation():
    """Mid-training (optimizer states live): 3.6 GiB cached and free in 9 holes of 400 MiB, a 512 MiB
    request fails."""
    b = Builder()
    b.segment([(2 * GIB, "active_allocated", WEIGHTS)] * 3)
    b.segment([(2 * GIB, "active_allocated", OPTIM)] * 3)
    for _ in range(9):
        b.segment([(300 * MIB, "active_allocated", ACTS), (400 * MIB, "inactive", []),
                   (324 * MIB, "active_allocated", ACTS)])
    b.segment([(100 * MIB, "active_pending_free", ACTS), (924 * MIB, "active_allocated", GRADS)])
    return b.oom(512 * MIB, 200 * MIB, ACTS)


def optimizer_first_step():
    """A 40 GiB card, full fine-tuning: weights and gradients in, AdamW's first states fail."""
    b = Builder()
    b.segment([(2 * GIB, "active_allocated", WEIGHTS)] * 7)
    b.segment([(2 * GIB, "active_allocated", GRADS)] * 7)
    b.segment([(2 * GIB, "active_allocated", OPTIM)] * 5)
    return b.oom(2 * GIB, 900 * MIB, OPTIM)
