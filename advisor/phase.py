"""When did it fail: the phase from traceback frames first, from the last marker otherwise.

Frames are walked from the innermost outwards and the first frame that names a phase wins
(reference §5): `prediction_step` under `_inner_training_loop` is an evaluation, a module `to()`
under `accelerator.prepare` is setup. `forward`, `backward` and `compute_loss` name no phase;
`generate` only counts when no outer frame says evaluation or training. A traceback cut short still
names what it was calling; without frames or markers, the progress drawn says first step or
mid-training, and an allocator that held next to nothing says loading.
"""

import re

_FRAME_PHASES = [
    ("checkpoint_save", r"_save_checkpoint|save_model|save_pretrained|_save_to_state_dict|save_checkpoint"
                        r"|_zero3_consolidated_16bit_state_dict|save_16bit_model|save_state|_save_optimizer_and_scheduler"
                        r"|save_file|_save|on_save_checkpoint|consolidate_state_dict"
                        r"|merge_and_unload|_merge_lora|unsloth_save_model|save_pretrained_merged|push_to_hub_\w+"),
    ("evaluation", r"evaluation_loop|prediction_step|_evaluate|evaluate|prediction_loop|predict|validation_step"
                   r"|test_step|_run_evaluate|evaluation_step|eval_step|run_evaluation|gather_for_metrics"),
    ("load", r"from_pretrained|_load_pretrained_model|_load_state_dict_into_meta_model|load_shard_file"
             r"|convert_and_load_state_dict_in_model|caching_allocator_warmup|dispatch_model|set_module_tensor_to_device"
             r"|load_model|load_model_and_tokenizer|_move_model_to_device|_post_init_method|prepare_model_for_kbit_training"
             r"|get_peft_model|_configure_distributed_model|_configure_optimizer|_configure_zero_optimizer"
             r"|initialize_optimizer_states|_create_fp32_partitions|_setup_for_real_optimizer|_prepare_deepspeed"
             r"|create_optimizer_and_scheduler|_wrap_model|load_checkpoint_in_model|replace_with_bnb_linear|quantize\w*"
             r"|load_adapter|load_peft_weights|_ddp_init_helper"),
    ("train", r"training_step|_inner_training_loop|train_step|_training_step|fit_loop|_run_train|run_training_epoch"
              r"|advance|optimizer_step|backward|train_epoch|ppo_train|training_loop|_train_batch"),
]
_COMPILED = [(phase, re.compile(rf"(?:{pat})")) for phase, pat in _FRAME_PHASES]
_MODULE_TO = re.compile(r"torch/nn/modules/module\.py$")
_GENERATE = re.compile(r"generate|_sample|_beam_search|greedy_search|_assisted_decoding|_prefill")
_STATE_INIT = re.compile(r"zeros(?:_like)?\(")    # an optimizer allocating its states
_CALL = re.compile(r"(\w+)\(")                     # the first call on a source line


def _frame_phase(frame):
    func = frame.func
    if func in ("to", "_apply", "cuda", "convert") and _MODULE_TO.search(frame.path):
        return "load"                       # Module.to(): weights being moved onto the device
    if func == "__init__" and frame.path.endswith("trainer.py"):
        return "load"                       # a Trainer being built moves the model to the device
    if "/optim/" in frame.path and (func == "init_state" or _STATE_INIT.search(frame.source)):
        return "first_step"                 # an optimizer creates its states at its first step only
    if func == "backward" and "autograd" in frame.path:
        return None                         # autograd's own backward frames name no phase
    for phase, rx in _COMPILED:
        if rx.fullmatch(func):
            if phase == "train" and func == "advance" and "lightning" not in frame.path:
                continue
            return phase
    return None


def phase_from_frames(frames):
    """'load' | 'train' | 'first_step' | 'evaluation' | 'checkpoint_save' | 'inference' | None."""
    weak = None
    for frame in reversed(frames):
        phase = _frame_phase(frame)
        if phase:
            return phase
        if weak is None and _GENERATE.fullmatch(frame.func) and "generation" in frame.path:
            weak = "inference"
    return weak


def training_phase(context):
    """first_step or mid_training from the progress the run had made."""
    if context.step is not None:
        return "first_step" if context.step <= 1 and context.losses_logged == 0 else "mid_training"
    if context.losses_logged:
        return "mid_training"
    marker = context.last_marker
    if marker is not None and marker.kind == "train_start":
        return "first_step"
    return "unknown"


def phase_from_markers(context):
    marker = context.last_marker
    if context.in_eval:
        return "evaluation"
    if marker is None:                      # no phase line, but a training bar or loss said how far
        return training_phase(context)
    return {
        "load": "load", "load_done": "load", "setup": "load",
        "train_start": training_phase(context), "step": training_phase(context),
        "eval_start": "evaluation", "eval_done": training_phase(context),
        "save": "checkpoint_save", "predict": "evaluation",
        "train_done": "checkpoint_save",    # what follows the last step, unless an evaluation begins
    }.get(marker.kind, "unknown")


_FORWARD = re.compile(r"(?<!\w)modeling_\w+\.py$|/peft/|torch/autograd/|torch/utils/checkpoint\.py$")


def _called(frame):
    """The innermost frame as the function its source line was calling: a traceback cut there
    still says what ran (`model = load_model(...)`)."""
    m = _CALL.search(frame.source)
    return frame.model_copy(update={"func": m.group(1)}) if m else None


def infer_phase(frames, context, memory=None):
    phase = _phase_of(frames, context)
    held = (memory or {}).get("allocated_by_pytorch_gib")
    if phase == "unknown" and held is not None and held < 0.05:
        return "load"                       # PyTorch held next to nothing: not even the weights were on the card
    return phase


def _phase_of(frames, context):
    by_frames = phase_from_frames(frames)
    if by_frames is None and frames:
        called = _called(frames[-1])
        by_frames = _frame_phase(called) if called is not None else None
    if by_frames == "train":
        return training_phase(context)
    if by_frames:
        return by_frames
    by_markers = phase_from_markers(context)
    if by_markers in ("load", "unknown") and any(_FORWARD.search(f.path) for f in frames):
        # a forward or backward pass is running, so loading is over: a custom training loop
        step = training_phase(context)
        return "first_step" if step == "unknown" and by_markers == "load" else step
    return by_markers
