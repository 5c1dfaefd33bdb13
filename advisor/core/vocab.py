"""The contract's vocabularies (DESIGN.md section 4): every verdict, phase, component, action and
phase marker the tool may name. Rules are validated against them; renderers and tools read them."""

VERDICTS = ("device_oom", "host_oom", "not_oom", "no_failure", "incomplete")
PHASES = ("load", "first_step", "mid_training", "evaluation", "checkpoint_save", "inference", "unknown", "none")
COMPONENTS = ("weights", "activations", "gradients", "optimizer_states", "fragmentation", "other_process",
              "eval_outputs", "host_memory", "none", "unknown")
ACTIONS = ("reduce_batch", "grad_accum", "grad_checkpointing", "reduce_seq_len", "precision", "quantize", "use_lora",
           "optimizer_8bit", "smaller_model", "zero_sharding", "cpu_offload", "free_other_process",
           "expandable_segments", "eval_batch", "eval_accumulation", "fix_non_memory_bug", "more_host_ram", "none")
MARKERS = ("load", "load_done", "setup", "prep", "train_start", "step", "eval_start", "eval_done", "save", "train_done",
           "predict", "inference")
