"""`curate train`: train the small transformer on packed shards with the tiered optimizers.

    curate train --shards OUT/shards --steps 200 [--device cpu|cuda] [--optimizer tiered|adamw]
                 [--batch B] [--d-model D] [--layers L] [--heads H] [--lr LR]
                 [--checkpoint DIR] [--resume [PATH]] [--log-every K] [--eval-every K] [--seed S]
                 [--vocab auto|full|compact] [--attention auto|dense|segments] [--holdout-every N]
                 [--eval-tokens N] [--long-phase auto|off] [--tokens T] [--threads N] [--out FILE]
                 [--vision auto|off] [--images DIR] [--vit-d-model D] [--vit-layers L] [--vit-heads H]

It prints a log line every --log-every steps (loss, lr per tier, tokens/s; on shards with image spans
also the images consumed so far), an evaluation line every --eval-every steps, and finally one JSON
summary line (train loss start/end, held-out BPB, tokens, tokens/s, images, routing summary).
Shards with image spans train a ViT + projector with the decoder (trainer/vision.py) on the run's
image store (OUT/images/, or --images); without a store it stops with one line, and --vision off
trains text-only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainer.loop import TrainConfig

DEFAULTS = TrainConfig()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curate train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", required=True,
                   help="a shards folder (pretrain/, long/), a phase folder, or a run's output folder")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda: bf16 autocast)")
    p.add_argument("--optimizer", choices=("tiered", "adamw"), default=DEFAULTS.optimizer)
    p.add_argument("--batch", type=int, default=DEFAULTS.batch, help="packed pretrain sequences per step")
    p.add_argument("--d-model", type=int, default=DEFAULTS.d_model)
    p.add_argument("--layers", type=int, default=DEFAULTS.n_layers)
    p.add_argument("--heads", type=int, default=DEFAULTS.n_heads)
    p.add_argument("--d-ff", type=int, default=DEFAULTS.d_ff, help="SwiGLU hidden size (default 8/3 d_model, x64)")
    p.add_argument("--lr", type=float, default=DEFAULTS.lr, help="peak lr of every tier")
    p.add_argument("--warmup-steps", type=int, default=DEFAULTS.warmup_steps,
                   help="warmup steps of the full-size run (2,000); scaled to min(this, ceil(1%% of steps))")
    p.add_argument("--tokens", type=float, default=None,
                   help="token budget of the schedule (default: planned from --steps)")
    p.add_argument("--checkpoint", default=None, help="checkpoint folder")
    p.add_argument("--checkpoint-every", type=int, default=DEFAULTS.checkpoint_every)
    p.add_argument("--resume", nargs="?", const=True, default=False,
                   help="continue from the newest checkpoint in --checkpoint, or from PATH")
    p.add_argument("--log-every", type=int, default=DEFAULTS.log_every)
    p.add_argument("--eval-every", type=int, default=DEFAULTS.eval_every, help="0: evaluate at the end only")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--vocab", choices=("auto", "full", "compact"), default=DEFAULTS.vocab,
                   help="auto: compact on CPU, full on CUDA")
    p.add_argument("--vocab-min-count", type=int, default=DEFAULTS.vocab_min_count)
    p.add_argument("--attention", choices=("auto", "dense", "segments"), default=DEFAULTS.attention)
    p.add_argument("--holdout-every", type=int, default=DEFAULTS.holdout_every, help="hold out 1 document in N")
    p.add_argument("--eval-tokens", type=int, default=DEFAULTS.eval_tokens)
    p.add_argument("--long-phase", choices=("auto", "off"), default=DEFAULTS.long_phase)
    p.add_argument("--tokenizer", default=None, help="tokenizer.json for BPB bytes (default: the manifest's)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="also write the full summary (per-step losses included) as JSON")
    p.add_argument("--vision", choices=("auto", "off"), default=DEFAULTS.vision,
                   help="auto: a vision tower when the shards have image spans; off: text-only")
    p.add_argument("--images", default=DEFAULTS.images,
                   help="image store (a run folder, OUT/images or a folder of part-*.parquet; default: the run "
                        "holding the shards)")
    p.add_argument("--vit-d-model", type=int, default=DEFAULTS.vit_d_model)
    p.add_argument("--vit-layers", type=int, default=DEFAULTS.vit_layers)
    p.add_argument("--vit-heads", type=int, default=DEFAULTS.vit_heads)
    return p


def main(argv: list[str] | None = None) -> int:
    """The arguments after the word `train`; exit 2 with one line for the user's mistakes."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from pydantic import ValidationError

    from trainer.loop import train

    if not os.path.exists(args.shards):
        return _user_error(f"--shards {args.shards}: no such folder")
    try:
        config = TrainConfig(optimizer=args.optimizer, lr=args.lr, batch=args.batch, d_model=args.d_model,
                             n_layers=args.layers, n_heads=args.heads, d_ff=args.d_ff, seed=args.seed,
                             vocab=args.vocab, vocab_min_count=args.vocab_min_count, attention=args.attention,
                             holdout_every=args.holdout_every, eval_tokens=args.eval_tokens,
                             log_every=args.log_every, eval_every=args.eval_every, checkpoint_dir=args.checkpoint,
                             checkpoint_every=args.checkpoint_every, resume=args.resume,
                             long_phase=args.long_phase,
                             total_tokens=args.tokens, warmup_steps=args.warmup_steps, tokenizer=args.tokenizer,
                             threads=args.threads, vision=args.vision, images=args.images,
                             vit_d_model=args.vit_d_model, vit_layers=args.vit_layers, vit_heads=args.vit_heads)
    except ValidationError as err:
        return _user_error("; ".join(f"--{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))
    try:
        summary = train(args.shards, args.steps, args.device, config, log=lambda line: print(line, flush=True))
    except FileNotFoundError as err:  # no shards with sequences, no checkpoint, no image store
        return _user_error(str(err))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=1)
    heldout = summary["heldout"]
    print(json.dumps({
        "steps": summary["steps"], "tokens": summary["tokens"], "trained_tokens": summary["trained_tokens"],
        "tokens_per_s": round(summary["tokens_per_s"] or 0, 1), "train_seconds": round(summary["train_seconds"], 1),
        "initial_loss": summary["initial_loss"], "final_loss": summary["final_loss"],
        "heldout_bpb": heldout["bpb"], "heldout_loss": heldout["loss"], "heldout_tokens": heldout["tokens"],
        "heldout_bytes": heldout["bytes"], "heldout_unk_targets": heldout.get("unk_targets"),
        # the same targets under a uniform distribution and the training unigram, to read the loss by
        "heldout_uniform_loss": heldout["uniform_loss"], "heldout_unigram_loss": heldout["unigram_loss"],
        "heldout_in_vocab_loss": heldout["in_vocab_loss"], "images": summary["images"],
        "heldout_images": heldout["images"],
        "heldout_by_phase": {name: {k: part[k] for k in ("bpb", "loss", "tokens", "bytes", "unk_targets")}
                             for name, part in heldout.get("by_phase", {}).items()},
        "phase_switch_step": summary["phase_switch_step"],
        "optimizer": summary["optimizer"], "routing": summary["routing"], "vocab": summary["vocab"],
        "params": summary["model"]["params"], "device": summary["device"], "checkpoint": summary["checkpoint"],
    }), flush=True)
    return 0


def _user_error(message: str) -> int:
    print(f"curate train: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
