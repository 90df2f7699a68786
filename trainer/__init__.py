"""The pretraining stage, after the DeepSeek-V4.1 report §4.2.2 (training settings), scaled down: a small
decoder-only transformer trained on the packed shards with the tiered optimizers.

    trainer.optim     Muon / head-wise Muon / AdamW / Sinkhorn tiers: build_optimizer(model, config)
    trainer.schedule  TokenSchedule: warmup by step, constant / cosine to 0.1x / constant by tokens,
                      the 34/45 switch to the long phase; plan_tokens, scaled_warmup_steps
    trainer.model     Transformer (RMSNorm, RoPE, separate q/k/v/o, SwiGLU clamped at 10), sample-level
                      (within-document, causal) attention from cu_seqlens / segment ids
    trainer.data      shard phases, held-out documents, batches and labels, VocabMap, bytes per token
    trainer.loop      train(shards_dir, steps, device, config) -> summary dict; evaluate (BPB)
    trainer.cli       `curate train ...`: main(argv) takes the arguments after the word `train`

Nothing is imported here, so `import trainer.optim` stays light.
"""
