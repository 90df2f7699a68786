"""Held-out BPB of the tiered optimizers vs all-AdamW at equal tokens (bits-per-byte on held-out text:
the base-model evaluation of the DeepSeek-V4.1 report, §4.3).

Trains the same model (trainer.model.Transformer, same seed, so the same initial weights) on the same
shards in the same order, once with the tiered optimizers (trainer.optim.build_optimizer: Muon /
head-wise Muon / AdamW / Sinkhorn) and once with AdamWTier (β = (0.9, 0.95), ε = 1e-20, λ = 0.1)
on every parameter, for the same number of steps — the same sequences, so the same tokens — and the
same lr schedule (trainer.schedule.TokenSchedule, peak --lr). Prints one JSON object per peak lr:
per optimizer the held-out BPB and loss, the initial and final training loss (mean of the last
log-every steps), tokens, wall time and tokens/s; plus the model and data figures.

    python benchmarks/train_compare.py [SHARDS] [--steps 300] [--lrs 2.6e-4,1e-3] [--device cpu]

SHARDS defaults to /tmp/trainer_sample/shards (from `curate run --output /tmp/trainer_sample`).
"""

import argparse
import json
import os
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # repo root, not benchmarks/ (its packing.py would shadow the package)

from benchmarks.record import record  # noqa: E402

from trainer.loop import train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shards", nargs="?", default="/tmp/trainer_sample/shards")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lrs", default="2.6e-4", help="comma-separated peak lrs; each gets both optimizers")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long-phase", choices=("auto", "off"), default="auto")
    parser.add_argument("--log", action="store_true", help="print the trainer's log lines")
    args = parser.parse_args()
    if not os.path.isdir(args.shards):
        raise SystemExit(f"{args.shards} not found: run `curate run --output /tmp/trainer_sample` first")

    runs = []
    for lr in (float(x) for x in args.lrs.split(",")):
        result = {"shards": args.shards, "steps": args.steps, "peak_lr": lr, "device": args.device}
        for optimizer in ("tiered", "adamw"):
            config = {"optimizer": optimizer, "lr": lr, "batch": args.batch, "d_model": args.d_model,
                      "n_layers": args.layers, "n_heads": args.heads, "seed": args.seed, "eval_every": 0,
                      "long_phase": args.long_phase, "log_every": 10}
            start = time.perf_counter()
            out = train(args.shards, args.steps, args.device, config, log=print if args.log else None)
            wall = time.perf_counter() - start
            held = out["heldout"]
            result[optimizer] = {
                "heldout_bpb": held["bpb"], "heldout_loss": held["loss"],
                "heldout_bpb_by_phase": {name: part["bpb"] for name, part in held["by_phase"].items()},
                "initial_loss": out["initial_loss"],
                "final_loss": out["final_loss"], "tokens": out["tokens"], "trained_tokens": out["trained_tokens"],
                "wall_s": round(wall, 1), "train_s": round(out["train_seconds"], 1),
                "tokens_per_s": round(out["tokens_per_s"], 1),
                "loss_curve": [round(x, 4) for x in out["losses"][::max(1, args.steps // 20)]],
            }
            result.setdefault("heldout_tokens", held["tokens"])
            result.setdefault("heldout_bytes", held["bytes"])
            result.setdefault("heldout_targets", held["targets"])
            result.setdefault("heldout_unk_targets", held["unk_targets"])
            counts = ("tokens", "targets", "bytes", "unk_targets")
            result.setdefault("heldout_by_phase", {name: {k: part[k] for k in counts}
                                                   for name, part in held["by_phase"].items()})
            result.setdefault("params", out["model"]["params"])
            result.setdefault("vocab", out["vocab"])
            result.setdefault("phase_switch_step", out["phase_switch_step"])
        result["bpb_tiered_minus_adamw"] = result["tiered"]["heldout_bpb"] - result["adamw"]["heldout_bpb"]
        print(json.dumps(result), flush=True)
        runs.append(result)
    record(__file__, {f"held-out BPB at lr {r['peak_lr']:g}, {args.steps} steps on {args.device}, tiered vs AdamW":
                      f"{r['tiered']['heldout_bpb']:.3f} vs {r['adamw']['heldout_bpb']:.3f}" for r in runs}, {"runs": runs})


if __name__ == "__main__":
    main()
