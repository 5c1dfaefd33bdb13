"""Deciding from the final failure: cascades, recovered OOMs, cut pastes, look-alikes."""

from advisor.pipeline import diagnose_text

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB"
       " of which 1.00 GiB is free. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 100.00 MiB is"
       " reserved by PyTorch but unallocated.")
# the bracket form of PyTorch before 2.1
OLD_OOM = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity; "
           "21.00 GiB already allocated; 1.00 GiB free; 21.50 GiB reserved in total by PyTorch)")


def bars(start, stop, total=1000):
    return "".join(f" {100 * i // total}%|#  | {i}/{total} [00:{i % 60:02d}<01:00, 1.00it/s]\n" for i in range(start, stop))


def test_oom_beats_the_nccl_cascade_of_other_ranks():
    log = bars(1, 40) + f"[rank1]: {OOM}\n" + bars(40, 41) + \
        "[rank0]:[E1130 10:00:00.000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout\n" \
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.memory["tried_gib"]) == ("device_oom", "mid_training", 2.0)


def test_an_oom_the_run_recovered_from_is_counted_not_blamed():
    log = bars(1, 10) + OOM + "\n" + bars(10, 30) + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    d = diagnose_text(log, with_plan=False)
    assert d.verdict == "not_oom" and d.rule == "OOM901" and d.earlier_failures == 1


def test_numbers_come_from_the_first_oom_of_the_final_failure():
    second = OOM.replace("2.00 GiB", "512.00 MiB")
    d = diagnose_text(bars(1, 5) + f"[rank1]: {OOM}\n[rank3]: {second}\n", with_plan=False)
    assert d.memory["tried_gib"] == 2.0 and d.memory["oom_messages"] == 2


def test_kill_without_error_is_host_memory_and_launcher_noise_alone_is_incomplete():
    killed = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 7) of binary: x\n"
    assert diagnose_text(killed, with_plan=False).verdict == "host_oom"
    cascade = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  exitcode  : 1 (pid: 7)\n"
    d = diagnose_text(cascade, with_plan=False)
    assert d.verdict == "incomplete" and d.rule == "OOM802"


def test_a_cut_traceback_still_reports_its_phase():
    log = ("Traceback (most recent call last):\n"
           '  File "/env/lib/python3.11/site-packages/transformers/modeling_utils.py", line 3754, in from_pretrained\n'
           "    ) = cls._load_pretrained_model(\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase) == ("incomplete", "load")


def test_chained_exception_keeps_the_oom_as_the_cause():
    log = (f"{OOM}\n\nDuring handling of the above exception, another exception occurred:\n\n"
           "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "RuntimeError: No executable batch size found, reached zero.\n")
    assert diagnose_text(log, with_plan=False).verdict == "device_oom"


def test_warning_mentioning_memory_is_not_a_failure():
    log = "UserWarning: Using a slow image processor; memory usage may be higher.\n" + bars(1, 20) + \
        "{'train_runtime': 100.0, 'train_loss': 1.0, 'epoch': 1.0}\n"
    assert diagnose_text(log, with_plan=False).verdict == "no_failure"


ASSERTS = "".join(f"../aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectLargeIndex: block: [{b},0,0], thread: "
                  f"[{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n" for b, t in ((90, 3), (88, 65), (317, 13)))
TRAIN = ("Traceback (most recent call last):\n"
         '  File "/env/lib/python3.11/site-packages/transformers/trainer.py", line 3318, in training_step\n'
         "    loss = self.compute_loss(model, inputs)\n")


def test_kernel_assertions_decide_only_when_the_exception_was_cut_off():
    full = "  0%|          | 0/294 [00:00<?, ?it/s]\n" + ASSERTS + TRAIN + \
        "RuntimeError: CUDA error: device-side assert triggered\n"
    d = diagnose_text(full, with_plan=False)
    assert (d.verdict, d.rule, d.phase) == ("not_oom", "OOM905", "first_step")
    assert "device-side assert triggered" in d.evidence[0].text      # the exception, with its traceback
    d = diagnose_text("  0%|          | 0/294 [00:00<?, ?it/s]\n" + ASSERTS + TRAIN, with_plan=False)
    assert (d.verdict, d.rule) == ("not_oom", "OOM905")               # not "incomplete": the asserts say what


def test_adapter_loading_is_the_load_phase():
    log = ('[rank2]:   File "/env/lib/python3.11/site-packages/peft/peft_model.py", line 1113, in load_adapter\n'
           "[rank2]:     adapters_weights = load_peft_weights(model_id, device=torch_device)\n"
           '[rank2]:   File "/env/lib/python3.11/site-packages/peft/utils/save_and_load.py", line 486, in load_peft_weights\n'
           "[rank2]:     adapters_weights = safe_load_file(filename, device=device)\n"
           '[rank2]:   File "/env/lib/python3.11/site-packages/safetensors/torch.py", line 315, in load_file\n'
           "[rank2]:     result[k] = f.get_tensor(k)\n"
           "[rank2]: RuntimeError: CUDA error: out of memory\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("device_oom", "load", "weights")


def test_a_trace_after_the_message_survives_the_copies_printed_below_it():
    cpu = ("RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: "
           "you tried to allocate 939524096 bytes. Error code 12 (Cannot allocate memory)\n")
    log = cpu + cpu.replace("RuntimeError: ", "") + \
        "Loading checkpoint shards:  40%|####      | 6/15 [01:44<02:36, 17.43s/it]\nTraceback (most recent call last):\n" \
        '  File "/env/lib/python3.10/site-packages/transformers/models/auto/auto_factory.py", line 493, in from_pretrained\n' \
        "    return model_class.from_pretrained(\n"
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("host_oom", "load", "host_memory")


def test_a_trace_cut_after_its_last_call_still_names_the_phase():
    # the innermost frame's source line is the call that was running when the paste stops
    log = (OOM + "\n[rank5]: Traceback (most recent call last):\n"
           '[rank5]:   File "/srv/LLaMA-Factory/src/llamafactory/train/sft/workflow.py", line 52, in run_sft\n'
           "[rank5]:     model = load_model(tokenizer, model_args, finetuning_args, training_args.do_train)\n")
    assert diagnose_text(log, with_plan=False).phase == "load"
    built = (OOM + "\nTraceback (most recent call last):\n"
             '  File "/srv/LLaMA-Factory/src/llmtuner/train/rm/trainer.py", line 23, in __init__\n'
             "    super().__init__(*args, **kwargs)\n")
    assert diagnose_text(built, with_plan=False).phase == "load"      # a Trainer being built


def test_optimizer_state_creation_is_the_first_step():
    log = ('  File "/env/lib/python3.9/site-packages/torch/optim/adamw.py", line 125, in _init_group\n'
           '    state["exp_avg_sq"] = torch.zeros_like(\n' + OOM + "\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component) == ("first_step", "optimizer_states")


def test_module_conversion_is_loading_and_a_failure_after_the_last_step_is_the_save():
    log = ('[rank1]:   File "/env/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1159, in convert\n'
           "[rank1]:     return t.to(\n"
           '[rank1]:   File "/env/lib/python3.11/site-packages/bitsandbytes/nn/modules.py", line 330, in to\n'
           "[rank1]:     super().to(device=device, dtype=dtype, non_blocking=non_blocking),\n"
           f"[rank1]: {OOM}\n")
    assert diagnose_text(log, with_plan=False).phase == "load"
    done = ("{'loss': 1.317, 'learning_rate': 0.0, 'epoch': 1.0}\n"
            "{'train_runtime': 601.94, 'train_samples_per_second': 7.03, 'train_loss': 1.47, 'epoch': 1.0}\n" + OOM + "\n")
    assert diagnose_text(done, with_plan=False).phase == "checkpoint_save"


def test_the_bar_redrawn_after_the_failure_tells_how_far_training_got():
    # no phase line at all: only the training bar that tqdm redraws as the process dies
    ray = ("(Actor pid=8249) Refer to the documentation on how to address the out of memory issue: "
           "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.\n"
           "Episode [1/10000]:   7%|7         | 11/147 [3:34:08<44:07:37, 1168.07s/it, policy_loss=-0.115]\n")
    d = diagnose_text(ray, with_plan=False)
    assert (d.verdict, d.phase) == ("host_oom", "mid_training")
    cut = OOM + "\n 10%|##################5\n"          # the bar cut by the terminal: a percentage only
    assert diagnose_text(cut, with_plan=False).phase == "mid_training"
    assert diagnose_text(OOM + "\n  0%|\n", with_plan=False).phase == "first_step"


def test_a_process_that_holds_nothing_yet_failed_while_loading():
    log = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 982.00 MiB. GPU 3 has a total capacity "
           "of 44.47 GiB of which 260.38 MiB is free. Process 100842 has 44.05 GiB memory in use. Including non-PyTorch "
           "memory, this process has 164.00 MiB memory in use. Of the allocated memory 4.50 KiB is allocated by "
           "PyTorch, and 1.50 MiB is reserved by PyTorch but unallocated.\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component) == ("load", "other_process")
    assert diagnose_text(OOM + "\n", with_plan=False).phase == "unknown"     # 77 GiB held: not loading


def test_notebook_frames_with_links_or_bare_paths_are_frames():
    colab = ("[/usr/local/lib/python3.10/dist-packages/transformers/trainer_pt_utils.py](https://localhost:8080/#) in "
             "torch_pad_and_concatenate(tensor1, tensor2, padding_index)\n"
             "---> 88     result = tensor1.new_full(new_shape, padding_index)\n\n"
             "OutOfMemoryError: CUDA out of memory. Tried to allocate 12.94 GiB (GPU 0; 39.56 GiB total capacity; 18.33 "
             "GiB already allocated; 12.29 GiB free; 25.71 GiB reserved in total by PyTorch)\n")
    d = diagnose_text(colab, with_plan=False)
    assert (d.rule, d.component) == ("OOM401", "eval_outputs")
    bare = ("/usr/local/lib/python3.11/dist-packages/torch/nn/modules/module.py in convert(t)\n"
            "   1325             return t.to(\n" + OOM + "\n")
    assert diagnose_text(bare, with_plan=False).phase == "load"


def test_the_tail_of_a_cut_cuda_error_still_names_it():
    tail = ("[rank4]: Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
            "group__CUDART__TYPES.html for more information.\n"
            "[rank4]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.\n")
    d = diagnose_text(tail, with_plan=False)
    assert (d.verdict, d.rule) == ("not_oom", "OOM901")


def test_a_launcher_told_to_stop_is_not_an_oom():
    log = (bars(1, 12, 750) + "W0828 22:53:47.001000 139822188226368 torch/distributed/elastic/agent/server/api.py:688] "
           "Received Signals.SIGHUP death signal, shutting down workers\n"
           "W0828 22:53:47.001000 139822188226368 torch/distributed/elastic/multiprocessing/api.py:858] Sending process "
           "246140 closing signal SIGHUP\n")
    assert diagnose_text(log, with_plan=False).verdict == "not_oom"


def test_quantising_while_loading_is_the_load_phase():
    log = ('  File "/env/lib/python3.10/site-packages/bitsandbytes/functional.py", line 996, in quantize_4bit\n'
           "    out = torch.zeros(((n+1)//2, 1), dtype=torch.uint8, device=A.device)\n" + OOM + "\n")
    assert diagnose_text(log, with_plan=False).phase == "load"


def test_merging_adapters_for_a_save_is_the_save_and_loss_lines_count_as_progress():
    merge = ("[/usr/local/lib/python3.11/dist-packages/unsloth/save.py](https://localhost:8080/#) in _merge_lora(layer, name)\n"
             "--> 177             maximum_element = torch.max(W.min().abs(), W.max())\n" + OOM + "\n")
    assert diagnose_text(merge, with_plan=False).phase == "checkpoint_save"
    litgpt = "".join(f"iter {i * 64} step {i}: loss 2.{i:02d}, iter time: 400.10ms\n" for i in range(1, 54)) + OOM + "\n"
    assert diagnose_text(litgpt, with_plan=False).phase == "mid_training"


def test_the_allocator_hint_wrapped_onto_its_own_line_is_not_the_users_setting():
    log = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 986.00 MiB. GPU 3 has a total capacity "
           "of 23.64 GiB of which 500.00 MiB is free. Of the allocated memory 18.71 GiB is allocated by PyTorch, and 3.83 "
           "GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting\n"
           "[rank3]: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
           "Memory Management\n")
    d = diagnose_text(log)
    assert d.facts["expandable_segments"] is None
    assert (d.component, d.plan[0]["action"]) == ("fragmentation", "expandable_segments")


def test_a_kill_while_the_zero_optimizer_is_built_is_setup():
    log = ("[2024-07-22 17:14:41,271] [INFO] [stage_1_and_2.py:151:__init__] CPU Offload: False\n"
           "[2024-07-22 17:14:58,894] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 10531 "
           "closing signal SIGTERM\n"
           "[2024-07-22 17:15:04,394] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
           "local_rank: 1 (pid: 10532) of binary: /opt/conda/bin/python\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase) == ("host_oom", "load")


def test_a_message_cut_at_a_space_keeps_its_head_from_the_line_above():
    """A wrap the reader cannot prove (cut between words): the signal line reads as the middle of a
    sentence, so the line above is the head of its message (FSDP's clone warning → the save)."""
    log = ("UserWarning: Failed to clone() tensor with name lm_head.weight. Please check clone\n"
           "implementation of lm_head.weight. Error: CUDA out of memory. Tried to allocate 982.00 MiB (GPU 2; "
           "79.35 GiB total capacity; 77.16 GiB already allocated; 272.19 MiB free; 77.16 GiB reserved in total by PyTorch)\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.rule, d.phase, d.component) == ("OOM411", "checkpoint_save", "weights")


def test_the_trainers_notebook_bar_is_training_progress():
    """A notebook renders the HF Trainer's bar as "[ 501/1500 06:35 < 13:11, 1.26 it/s, Epoch 1/3]"."""
    log = (" [ 501/1500 06:35 < 13:11, 1.26 it/s, Epoch 1/3]\nStep\tTraining Loss\n"
           "OutOfMemoryError                          Traceback (most recent call last)\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase) == ("device_oom", "mid_training")
    assert "501" in d.basis["phase"]


def test_a_bar_over_tensor_names_is_loading_weights():
    log = ("ram used: 11.98 GB, layers.27.feed_forward.w2.weight      :  85%|######5  | 249/292 [00:41<00:07,  6.01it/s]\n"
           "Error processing tensor for shard: CUDA Error 2, out of memory\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("device_oom", "load", "weights")


def test_an_ipython_frame_reads_the_line_its_arrow_marks():
    """IPython quotes numbered context lines around the call that ran; that call is the frame's source."""
    from advisor.evidence.lines import read_text
    from advisor.evidence.traceback import frames_of
    log = ("/tmp/ipykernel_31/21731.py in train(args)\n"
           "    205 \n"
           "    206                     # forward and backward\n"
           "--> 207                     loss.backward()\n"
           "    208                     optimizer.step()\n"
           "\n"
           "/usr/lib/python3.11/site-packages/torch/_tensor.py in backward(self, gradient)\n"
           "    520             )\n"
           "--> 521         torch.autograd.backward(\n")
    frames = frames_of(read_text(log))
    assert [(f.func, f.source) for f in frames] == [("train", "loss.backward()"), ("backward", "torch.autograd.backward(")]


def test_a_custom_loops_step_and_loss_count_as_progress():
    log = "".join(f"Epoch 0 |   Training | Elapsed Time: 0:00:15 | Steps: {i} | Loss: 24.58\n" for i in range(80, 95)) + \
        "slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed\n"
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("host_oom", "mid_training", "host_memory")


def test_an_evaluation_the_loop_announces_is_the_phase():
    log = f"step 300: loss 1.20\nTraining completed in 302.5s\nStarting final eval...\n{OLD_OOM}\n"
    assert diagnose_text(log, with_plan=False).phase == "evaluation"


def test_a_module_under_an_evaluation_folder_is_evaluation():
    log = ('  File "/work/DeFRCN/defrcn/evaluation/archs/resnet.py", line 203, in forward\n    x = self.layer3(x)\n'
           '  File "/env/lib/python3.8/site-packages/torch/nn/modules/conv.py", line 419, in forward\n'
           f'    return self._conv_forward(input, self.weight)\n{OLD_OOM}\n')
    assert diagnose_text(log, with_plan=False).phase == "evaluation"


def test_a_traceback_glued_after_the_last_bar_and_cut_in_its_header_is_incomplete():
    """The paste ends inside the header of a traceback that tqdm's last bar drew no newline before."""
    log = "Unsloth 2024.5 patched 32 layers.\n  0%|          | 0/769 [00:00<?, ?it/s]Traceback (most r"
    d = diagnose_text(log, with_plan=False)
    assert d.verdict == "incomplete"
    assert diagnose_text("Unsloth 2024.5 patched 32 layers.\n  0%|          | 0/769 [00:00<?, ?it/s]\n",
                         with_plan=False).verdict == "no_failure"


def test_a_rich_frame_whose_name_the_box_wrapped_is_read_with_its_arrow_line():
    from advisor.evidence.lines import Line
    from advisor.evidence.traceback import frames_of
    log = ("│ /env/lib/python3.10/site-packages/bitsandbytes/nn/modules.py:268 in                  │\n"
           "│ _save_to_state_dict                                                                  │\n"
           "│\n"
           "│   267 │   │   │   if reorder_layout:\n"
           "│ ❱ 268 │   │   │   │   self.weight.data = undo_layout(self.state.CxB, self.state.t\n"
           "│   269 │   │   │\n")
    lines = [Line(no, text) for no, text in enumerate(log.splitlines(), 1)]    # as the reader leaves a box
    assert [(f.func, f.source) for f in frames_of(lines)] == [
        ("_save_to_state_dict", "self.weight.data = undo_layout(self.state.CxB, self.state.t")]


def test_a_line_that_lost_its_newlines_is_the_kill_it_reports_not_the_launchers_notice():
    log = ("Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]WARNING:torch.distributed.elastic."
           "multiprocessing.api:Sending process 899505 closing signal SIGTERM ERROR:torch.distributed.elastic."
           "multiprocessing.api:failed (exitcode: -9) local_rank: 4 (pid: 899509) of binary: /usr/bin/python\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("host_oom", "load", "host_memory")


def test_a_loggers_failed_line_below_the_message_does_not_end_its_trace():
    """vLLM logs the OOM, then "EngineCore failed to start.", then the traceback: the frames are the OOM's."""
    log = (f"ERROR 11-05 12:19:32 [linear.py:210] Failed to create unquantized linear weights: {OOM}\n"
           "ERROR 11-05 12:19:32 [core.py:708] EngineCore failed to start.\n"
           "ERROR 11-05 12:19:32 [core.py:708] Traceback (most recent call last):\n"
           'ERROR 11-05 12:19:32 [core.py:708]   File "/env/lib/python3.10/site-packages/vllm/model_executor/layers/'
           'linear.py", line 202, in create_weights\n'
           "ERROR 11-05 12:19:32 [core.py:708]     weight = ModelWeightParameter(data=torch.empty(\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component, d.rule) == ("load", "weights", "OOM101")
    assert d.basis["phase"] == "frame linear.py:create_weights"


def test_ipythons_header_names_an_error_that_is_not_about_memory():
    """A notebook's trace names its exception in the header; a paste that lost the bottom line still says what failed."""
    log = ("---------------------------------------------------------------------------\n"
           "NotImplementedError                       Traceback (most recent call last)\n"
           "Cell In[9], line 2\n"
           "----> 2 trainer_stats = trainer.train()\n"
           "File /env/trainer.py:68, in wrapper(self, *args, **kwargs)\n"
           "---> 68 output = f(self, *args, **kwargs)\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.component) == ("not_oom", "none")


def test_an_exception_name_with_another_ranks_frame_glued_on_is_that_error():
    log = ('FileNotFoundError  File "/app/src/llmtuner/train/tuner.py", line 26, in run_exp\n'
           ": [Errno 2] No such file or directory: 'saves/lora/tmp-checkpoint-1000' -> 'saves/lora/checkpoint-1000'\n"
           '  File "/env/lib/python3.10/site-packages/transformers/trainer.py", line 1914, in _inner_training_loop\n'
           "    self._maybe_log_save_evaluate(tr_loss, model, trial, epoch, ignore_keys_for_eval)\n"
           '  File "/opt/app\n')
    d = diagnose_text(log, with_plan=False)
    assert d.verdict == "not_oom"


def test_a_kill_during_data_preparation_is_at_load():
    """datasets' map bars count examples, not steps, whatever their description; tqdm without its bar still
    draws its timing bracket."""
    log = ("RAM used: 4182.97 MB\n"
           "merge and mask: 100% 3382137/3382137 [02:41<00:00, 20891.13 examples/s]\n"
           "padding:  65% 2207000/3382137 [03:08<01:16, 15381.54 examples/s]Killed\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("host_oom", "load", "host_memory")
    assert d.basis["phase"].startswith("marker line 3: padding")


def test_dataloader_frames_after_data_preparation_are_past_loading():
    """A DataLoader handing out batches means some loop consumes them: not the loading the prep bar was part of."""
    log = ("Running tokenizer on dataset: 100%|##########| 156611/156611 [17:07<00:00, 152.48 examples/s]\n"
           "Traceback (most recent call last):\n"
           '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1132, in _try_get_data\n'
           "    data = self._data_queue.get(timeout=timeout)\n"
           "RuntimeError: DataLoader worker (pid 3919213) is killed by signal: Bus error. It is possible that "
           "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase) == ("host_oom", "first_step")
    assert d.basis["phase"] == "DataLoader frames after loading"


def test_a_prep_bar_after_training_began_is_not_where_the_run_stands():
    log = bars(1, 20) + "Map: 100%|##########| 500/500 [00:01<00:00, 480.10 examples/s]\n" + OOM + "\n"
    d = diagnose_text(log, with_plan=False)
    assert d.phase == "mid_training"


def test_zshs_job_notice_of_a_kill_glued_after_a_loading_bar():
    log = ("Loading checkpoint shards:   0%|          | 0/3 [00:00<?, ?it/s][1]    26478 killed     python test.py\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.component) == ("host_oom", "load", "host_memory")


def test_model_parallel_groups_set_up_before_a_kill_are_loading():
    """fairscale's and Megatron's initialize_model_parallel runs before the checkpoint is read."""
    log = ("> initializing model parallel with size 1\n> initializing ddp with size 1\n"
           "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 29066) of "
           "binary: /env/bin/python\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase) == ("host_oom", "load")


def test_the_statement_that_failed_beats_a_guess_from_its_functions_name():
    """`infer` suggests inference, but its failing line moves a pipeline's weights onto the card."""
    log = ("Traceback (most recent call last):\n"
           '  File "/home/user/app.py", line 72, in infer\n'
           "    pipe.to(device)\n"
           "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 80.00 MiB. GPU 0 has a total capacity of "
           "15.98 GiB of which 84.00 MiB is free. Of the allocated memory 15.44 GiB is allocated by PyTorch, and "
           "267.59 MiB is reserved by PyTorch but unallocated.\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component) == ("load", "weights")
    assert d.basis["phase"] == "quoted call pipe.to("


def test_weights_that_alone_exceed_the_card_were_never_all_placed(tmp_path):
    """A 7B model at 16 bits is 13.5 GiB: on a 10.7 GiB card nothing after loading can have run."""
    from advisor.pipeline import diagnose_path
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("model: mistralai/Mistral-7B-v0.1\ndtype: half\ngpu_memory_utilization: 0.8\nmax_model_len: 4096\n")
    log = tmp_path / "serve.log"
    log.write_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB (GPU 0; 10.73 GiB "
                   "total capacity; 9.85 GiB already allocated; 46.44 MiB free; 9.86 GiB reserved in total by PyTorch)\n")
    d = diagnose_path(str(log), config_path=str(cfg))
    assert (d.phase, d.component) == ("load", "weights")
    assert d.basis["phase"].startswith("model: its weights alone (13.5 GiB")
    # no second GPU is seen, so tensor parallelism (which needs one) comes after a quantised checkpoint
    assert [s["action"] for s in d.plan][:2] == ["quantize", "tensor_parallel"]
    assert "AWQ" in d.plan[0]["display"] and "QLoRA" not in d.plan[0]["display"]
    # a second GPU (the failing one is GPU 1) may hold a share of them: no such claim
    log.write_text(log.read_text().replace("(GPU 0;", "(GPU 1;"))
    assert diagnose_path(str(log), config_path=str(cfg)).phase != "load"


def test_a_training_bar_first_drawn_after_the_loading_means_the_loop_had_begun():
    """tqdm draws the training bar as the exception unwinds; before it only the loading bar had finished."""
    log = ("Loading checkpoint shards: 100%|##########| 16/16 [00:29<00:00,  1.85s/it]\n"
           '  File "/env/lib/python3.10/site-packages/unsloth_zoo/temporary_patches/gpt_oss.py", line 55, in swiglu_torch_forward\n'
           "    a_linear = a_linear.clamp(min=-limit, max=limit)\n" + OOM + "\n"
           "  0%|          | 0/4300 [00:02<?, ?it/s]\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component) == ("first_step", "activations")
    # a loading bar after training had stepped is where the run stands
    assert diagnose_text(bars(1, 20) + "Loading checkpoint shards:  50%|#    | 1/2 [00:05<00:05, 5.00s/it]\n" + OOM,
                         with_plan=False).phase == "load"


def test_a_bar_cut_after_its_percentage_still_counts_after_the_message():
    log = ("RuntimeError: MPS backend out of memory (MPS allocated: 33.48 GB, other allocations: 2.45 GB, max allowed: "
           "36.27 GB). Tried to allocate 600.15 MB on private pool.\nEpoch 0:   4%|#####3\n")
    assert diagnose_text(log, with_plan=False).phase == "mid_training"


def test_a_loops_loss_line_counts_the_steps_it_names():
    """Custom loops print a counter beside their loss: 0 or 1 steps done is the first step, more is later."""
    tail = ('  File "train.py", line 276, in main\n    loss.backward()\n' + OLD_OOM + "\n")
    for line, phase in (("iter = 0 of 60000 completed, loss = 4.349814414978027", "first_step"),
                        ("Epoch: [1][   0/1989]\tTime 15.878 (15.878)\tLoss 0.267222 (0.267222)", "first_step"),
                        ("Epoch: [3][   0/1989]\tTime 15.878 (15.878)\tLoss 0.267222 (0.267222)", "mid_training"),
                        ("iter 3436 step 53: loss 2.9931, iter time: 95.41ms", "mid_training")):
        assert diagnose_text(line + "\n" + tail, with_plan=False).phase == phase, line
    # printed after the message (stdout buffered behind stderr), it still tells how far the run got
    after = OLD_OOM + "\nEpoch: [63/4391266]   0%|          , loss=0.0535, lr=5e-5 [00:09<174:20:29\n"
    assert diagnose_text(after, with_plan=False).phase == "mid_training"


def test_an_evaluations_first_batches_fail_in_their_forward_not_in_accumulated_outputs():
    log = ("0/10 * Epoch (train): 100% 32/32 [00:41<00:00,  2.39s/it, _fps=11.486, loss=0.898]\n"
           "0/10 * Epoch (valid):   3% 1/32 [00:01<00:46,  1.50s/it, _fps=21.531, loss=1.656]\n"
           "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component) == ("evaluation", "activations")
    assert d.basis["component"] == "progress: evaluation batch 1 of 32"
    late = log.replace("3% 1/32", "94% 30/32")
    assert diagnose_text(late, with_plan=False).component == "eval_outputs"


def test_fsdps_failed_clone_warning_is_the_state_dict_gathered_to_save():
    log = ("/env/torch/distributed/fsdp/fully_sharded_data_parallel.py:2224: UserWarning: Failed to clone() tensor with "
           "name _fsdp_wrapped_module.model.layers.30.self_attn.q_proj.weight. This may mean that this state_dict entry "
           "could point to invalid memory regions after returning from state_dict() call if this parameter is managed by "
           "FSDP. Please check clone implementation of x. Error: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 6; "
           "39.42 GiB total capacity; 38.51 GiB already allocated; 16.31 MiB free; 38.60 GiB reserved in total by PyTorch)\n")
    assert diagnose_text(log, with_plan=False).phase == "checkpoint_save"


def test_xla_running_out_of_a_tpus_memory_is_a_device_oom_with_its_capacity():
    log = ("  0%|          | 0/12000 [00:00<?, ?it/s]\n"
           "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory "
           "in memory space hbm. Used 21.90G of 7.48G hbm. Exceeded hbm capacity by 14.42G.\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.memory["total_gib"]) == ("device_oom", "first_step", 7.48)


def test_tgis_launcher_is_a_server_warming_up():
    log = ("2023-07-07T17:55:40.000000Z  INFO text_generation_launcher: Starting Webserver\n"
           "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would exceed allowed "
           "memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested               : 4.83 GiB\\nDevice "
           "limit            : 22.20 GiB\\nFree (according to CUDA): 0 bytes\")'\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.phase, d.facts["job_kind"]) == ("device_oom", "inference", "serving")


def test_ascends_error_codes_are_no_host_names_and_the_error_above_the_message_is_its_head():
    """"EL0004: …" is CANN's out-of-memory code, not a `host:` prefix; "RuntimeError: ACL stream synchronize
    failed." right above it is the same exception's head, so the ZeRO-3 frames above both are its trace."""
    log = ('  File "/env/lib/python3.9/site-packages/deepspeed/runtime/zero/stage3.py", line 1484, in partition_grads\n'
           "    cuda_grad_buffer = grad_buffer.to(grad_partition.device, non_blocking=True)\n"
           "RuntimeError: ACL stream synchronize failed.\n"
           "EL0004: 2025-01-31-08:23:58.845.175 Failed to allocate memory.\n"
           "        Possible Cause: Available memory is insufficient.\n"
           "        rtMalloc execute failed, reason=[driver error:out of memory][FUNC:FuncErrorReason]\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.verdict, d.component) == ("device_oom", "gradients")
    assert d.evidence[0].text.startswith("EL0004: ")


def test_a_driver_level_oom_with_nothing_else_starts_with_the_batch():
    """No allocator numbers, so no other process is shown: the ladder starts with the batch (LABELS 8);
    checking for other processes stays in the rule's explanation."""
    d = diagnose_text("RuntimeError: CUDA error: out of memory\n")
    assert (d.rule, d.phase, d.component) == ("OOM503", "unknown", "unknown")
    assert d.plan[0]["action"] == "reduce_batch" and "nvidia-smi" in d.explanation


def test_memory_failures_of_other_runtimes():
    cases = {
        # a Ray worker the pod's memory limit killed
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker exits unexpectedly. Worker exits with an exit code None. The worker may have exceeded K8s pod memory "
        "limits.": ("host_oom", None, None),
        # a pinned host buffer (MindSpore's data pipeline)
        "[ERROR] MD(14433,7fea2effd700,python):2021-12-12-14:13:43.932.181 [mindspore/ccsrc/minddata/dataset/util/"
        "arena.cc:250] Init] cudaHostAlloc failed, ret[2], out of memory": ("host_oom", None, None),
        # MindSpore's device allocator, in bytes
        "[ERROR] PRE_ACT(145615,fffbdf67f120,python):2025-01-12-09:48:13.703.514 [mindspore/ccsrc/backend/common/"
        "mem_reuse/mem_dynamic_allocator.cc:392] AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 24725382656 "
        "plus alloc size : 100555779072 is more than total mem size : 61079552000.": ("device_oom", 93.65, 56.885),
    }
    for line, (verdict, tried, total) in cases.items():
        d = diagnose_text(line + "\n", with_plan=False)
        assert d.verdict == verdict, line
        if tried:
            assert (round(d.memory["tried_gib"], 2), round(d.memory["total_gib"], 3)) == (tried, total)
    npu = "(allocate:torch_npu/csrc/core/npu/NPUCachingAllocator.cpp:2050 NPU error, error code is 107002\n"
    assert diagnose_text(npu, with_plan=False).verdict == "not_oom"


def test_megatrons_first_step_banner_starts_the_training():
    log = ("Setting rerun_state_machine.current_iteration to 0...\n"
           "[before the start of training step] datetime: 2025-05-06 12:45:42\n"
           "[rank0]: RuntimeError: DataLoader worker (pid 9382) is killed by signal: Killed.\n")
    assert diagnose_text(log, with_plan=False).phase == "first_step"


def test_a_layer_building_its_weights_on_the_card_is_loading_even_inside_an_engine():
    log = ('  File "/env/lib/python3.9/site-packages/vllm/model_executor/models/llama.py", line 103, in __init__\n'
           "    self.qkv_proj = ColumnParallelLinear(\n"
           '  File "/env/lib/python3.9/site-packages/vllm/model_executor/parallel_utils/tensor_parallel/layers.py", '
           "line 272, in __init__\n    self.weight = Parameter(torch.empty(\n" + OLD_OOM + "\n")
    d = diagnose_text(log, with_plan=False)
    assert (d.phase, d.component) == ("load", "weights")


def test_a_statement_on_the_logits_names_activations():
    log = ("    logits = logits / self.temperature\n             ~~~~~~~^~~~~~~~~~~~~~~~~~\n"
           "RuntimeError: MPS backend out of memory (MPS allocated: 12.74 GB, other allocations: 4.39 GB, max allowed: "
           "18.13 GB). Tried to allocate 1.02 GB on private pool.\n")
    assert diagnose_text(log, with_plan=False).component == "activations"


def test_the_bracket_forms_free_memory_kept_when_a_paste_ends_inside_its_word():
    log = "RuntimeError: CUDA out of memory. Tried to allocate 195.31 MiB (GPU 0; 4.00 GiB total capacity; 2.88 GiB already allocated; 170.14 MiB fre\n"
    assert round(diagnose_text(log, with_plan=False).memory["free_gib"], 4) == 0.1662


def test_zero3s_parameter_gathers_say_the_run_is_under_zero3():
    log = ('  File "/env/lib/python3.10/site-packages/deepspeed/runtime/zero/partition_parameters.py", line 1832, in '
           "_allgather_params\n    replicated_tensor = torch.empty(param.ds_shape, dtype=param.ds_tensor.dtype)\n"
           + OLD_OOM + "\n")
    assert diagnose_text(log, with_plan=False).facts["deepspeed"] == "zero3"


def test_paddles_allocator_is_a_device_oom_with_its_numbers():
    log = ("ResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot allocate 428.000000MB memory on GPU 0, "
           "79.153320GB memory has been allocated and available memory is only 175.562500MB.\n")
    d = diagnose_text(log, with_plan=False)
    assert d.verdict == "device_oom"
    assert (round(d.memory["tried_gib"], 4), round(d.memory["allocated_by_pytorch_gib"], 3),
            round(d.memory["free_gib"], 4)) == (0.418, 79.153, 0.1714)


def test_rocms_memory_access_fault_is_a_look_alike():
    log = ("Memory access fault by GPU node-1 (Agent handle: 0x3d1bda20) on address 0x7fa18d83f000. Reason: Page not "
           "present or supervisor privilege.\nTraceback (most recent call last):\n"
           '  File "/env/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py", line 1, in run\n')
    assert diagnose_text(log, with_plan=False).verdict == "not_oom"


def test_building_a_model_on_the_card_is_loading():
    """`with torch.device("cuda"):` (an engine building its model), ColossalAI's lazy materialisation and vLLM's
    old engine constructor (the call on its innermost line) place weights."""
    device = ('  File "/env/lib64/python3.13/site-packages/torch/utils/_device.py", line 109, in __torch_function__\n'
              "    return func(*args, **kwargs)\n" + OOM + "\n")
    lazy = ('  File "/env/lib/python3.10/site-packages/colossalai/lazy/lazy_init.py", line 215, in materialize\n'
            "    target = self._materialize_data()\n" + OOM + "\n")
    engine = ('  File "/env/lib/python3.8/site-packages/vllm/engine/llm_engine.py", line 111, in __init__\n'
              "    self._init_workers()\n" + OOM + "\n")
    for log in (device, lazy, engine):
        d = diagnose_text(log, with_plan=False)
        assert (d.phase, d.component) == ("load", "weights"), log


def test_more_runtimes_reporting_memory_and_crashes():
    mlx = ("libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] Unable to "
           "allocate 12 bytes.\n")
    assert diagnose_text(mlx, with_plan=False).verdict == "device_oom"
    tgi = ("RuntimeError: Not enough memory to handle 1024 prefill tokens. You need to decrease "
           "`--max-batch-prefill-tokens`\n")
    assert diagnose_text(tgi, with_plan=False).verdict == "device_oom"
    windows = ("subprocess.CalledProcessError: Command '['python.exe', 'flux_train.py']' returned non-zero exit status "
               "3221225477.\n")
    assert diagnose_text(windows, with_plan=False).verdict == "not_oom"       # 0xC0000005, an access violation
    npu = ("EE1002: 2024-09-03-16:50:00.041.231 Stream synchronize timeout. rtDeviceSynchronize execute failed, "
           "reason=[stream sync timeout]\n")
    assert diagnose_text(npu, with_plan=False).verdict == "not_oom"
    mindspore = ("[ERROR] PRE_ACT(54175,fffdbcff91e0,python):2024-10-22-11:24:55.301.443 [mindspore/ccsrc/backend/"
                 "common/mem_reuse/mem_dynamic_allocator.cc:392] AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics "
                 ": 29356337664 plus TotalUsedByEventMemStatistics : 0 and plus alloc size : 301990400 is more than "
                 "total mem size : 29464985600.\n")
    m = diagnose_text(mindspore, with_plan=False).memory
    assert (round(m["allocated_by_pytorch_gib"], 2), round(m["free_gib"], 4)) == (27.34, 0.1012)


def test_loading_and_set_up_lines_before_a_kill():
    for line in ("Processing pytorch_model-00001-of-00002.bin",
                 "                             environment is initialized, data parallel size: 4, pipeline parallel size: 1"):
        d = diagnose_text(line + "\nKilled\n", with_plan=False)
        assert (d.verdict, d.phase) == ("host_oom", "load"), line
    saved = diagnose_text("Model weights saved in out/model-00001-of-00002.safetensors\nKilled\n", with_plan=False)
    assert saved.phase != "load"


def test_an_optimizer_wrapping_its_fp32_master_copy_and_an_engine_creating_its_weights_are_set_up():
    zero = ('  File "/env/lib/python3.8/site-packages/colossalai/zero/sharded_optim/low_level_optim.py", line 175, in '
            "__init__\n    fp32_flat_current_rank = fp16_flat_current_rank.float()\n" + OLD_OOM + "\n")
    assert (lambda d: (d.phase, d.component))(diagnose_text(zero, with_plan=False)) == ("load", "optimizer_states")
    engine = ('  File "/env/lib/python3.10/site-packages/lmdeploy/turbomind/turbomind.py", line 199, in '
              "_create_weight_func\n    model_comm.create_shared_weights(device_id, rank)\n"
              "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /turbomind/utils/memory_utils.cu:32\n")
    assert (lambda d: (d.phase, d.component))(diagnose_text(engine, with_plan=False)) == ("load", "weights")


def test_cpythons_fatal_error_is_the_workers_own_failure():
    log = ("Fatal Python error: none_dealloc: deallocating None\n\nThread 0x00007f3c (most recent call first):\n"
           '  File "/env/lib/python3.10/threading.py", line 324 in wait\n'
           "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4242 closing signal SIGTERM\n")
    assert diagnose_text(log, with_plan=False).verdict == "not_oom"


def test_a_models_first_training_forward_with_checkpointing_starts_the_training():
    """HF modeling code warns about use_cache in its first training forward with checkpointing on."""
    log = ("[INFO] [stage_1_and_2.py:140:__init__] Before initializing optimizer states\n"
           "06/13/2023 09:23:52 - WARNING - transformers_modules.chatglm-6b.modeling_chatglm - `use_cache=True` is "
           "incompatible with gradient checkpointing. Setting `use_cache=False`...\n"
           '  File "/env/modules/modeling_chatglm.py", line 250, in attention_fn\n'
           "    attention_scores = attention_scores * query_key_layer_scaling_coeff\n" + OOM + "\n")
    assert diagnose_text(log, with_plan=False).phase == "first_step"


def test_a_softmax_left_without_its_frame_names_activations():
    log = "gpu-q-13:     ret = input.softmax(dim, dtype=dtype)\ngpu-q-13: " + OOM + "\n"
    assert diagnose_text(log, with_plan=False).component == "activations"
