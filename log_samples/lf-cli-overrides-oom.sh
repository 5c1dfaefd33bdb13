#!/bin/bash
# the base recipe trains at batch 2; this run tries long context at batch 8 without checkpointing
CUDA_VISIBLE_DEVICES=0 llamafactory-cli train lf-cli-base.yaml \
    per_device_train_batch_size=8 \
    gradient_accumulation_steps=2 \
    cutoff_len=4096 \
    disable_gradient_checkpointing=true
