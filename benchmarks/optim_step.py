"""Step time of the tiered optimizer (trainer.optim.build_optimizer) vs torch.optim.AdamW.

Parameters are those of the trainer's model, trainer.model.Transformer (default: 4 layers, d_model 256,
4 heads, SwiGLU hidden 1024, vocab 8192, untied embedding and head, ~8.4M parameters) with fixed
random gradients.
Prints one JSON object: per device the median step time over --steps steps after --warmup,
ratio = tiered / adamw, the tiered step split by tier, and the Newton–Schulz work of the Muon tier.

    python benchmarks/optim_step.py [--device cpu|cuda|all] [--steps 20]
"""

import argparse
import json
import statistics
import time

import torch
from torch import nn

from trainer.model import ModelConfig, Transformer
from trainer.optim import Muon, build_optimizer


def transformer_shaped(vocab: int, d_model: int, n_layers: int, n_heads: int, d_hidden: int) -> nn.Module:
    """The trainer's model (trainer.model.Transformer): untied embedding and head, per layer separate
    q/k/v/o projections (n_heads on the attention module), SwiGLU gate/up/down, RMSNorms."""
    return Transformer(ModelConfig(vocab_size=vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                                   d_ff=d_hidden))


def newton_schulz_gflop(muon: Muon) -> float:
    """GFLOP of one Muon step's Newton–Schulz: per wide r×c block and step, XXᵀ, A², AX = 4r²c + 2r³."""
    flop = 0
    for group in muon.param_groups:
        for p in group["params"]:
            r, c = sorted((p.size(0) // group["heads"], p.size(1)))
            flop += len(group["ns_steps"]) * group["heads"] * (4 * r * r * c + 2 * r**3)
    return flop / 1e9


def timed(fn, device: torch.device) -> float:
    """Seconds fn() takes, the device's queued work included."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def benchmark(device: torch.device, steps: int, warmup: int, shape: dict) -> dict:
    torch.manual_seed(0)
    model = transformer_shaped(**shape).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p)

    tiered = build_optimizer(model)
    tier_seconds = {tier: [] for tier in tiered.optimizers}
    for step in range(warmup + steps):
        for tier, optimizer in tiered.optimizers.items():
            seconds = timed(optimizer.step, device)
            if step >= warmup:
                tier_seconds[tier].append(seconds)
    tiered_seconds = [sum(per_tier) for per_tier in zip(*tier_seconds.values())]

    adamw = torch.optim.AdamW(model.parameters(), lr=2.6e-4, betas=(0.9, 0.95), eps=1e-20, weight_decay=0.1)
    adamw_seconds = [timed(adamw.step, device) for _ in range(warmup + steps)][warmup:]

    tiered_ms, adamw_ms = 1e3 * statistics.median(tiered_seconds), 1e3 * statistics.median(adamw_seconds)
    muon_gflop = newton_schulz_gflop(tiered.optimizers["muon"])
    return {
        "tiered_ms": round(tiered_ms, 3),
        "adamw_ms": round(adamw_ms, 3),
        "ratio": round(tiered_ms / adamw_ms, 2),
        "tier_ms": {tier: round(1e3 * statistics.median(s), 3) for tier, s in tier_seconds.items()},
        "muon_ns_gflop": round(muon_gflop, 2),
        "muon_gflop_per_s": round(muon_gflop / statistics.median(tier_seconds["muon"]), 1),
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--device", choices=("cpu", "cuda", "all"), default="all", help="all: cpu, plus cuda when available"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-hidden", type=int, default=1024)
    args = parser.parse_args()

    if args.device == "all":
        devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    else:
        devices = [args.device]
    shape = dict(
        vocab=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, d_hidden=args.d_hidden
    )
    params = sum(p.numel() for p in transformer_shaped(**shape).parameters())
    results = {device: benchmark(torch.device(device), args.steps, args.warmup, shape) for device in devices}
    print(json.dumps({"shape": shape, "params": params, "steps": args.steps, "torch": torch.__version__, **results}))


if __name__ == "__main__":
    main()
