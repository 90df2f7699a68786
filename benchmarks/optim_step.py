"""Step time of the tiered optimizer (trainer.optim.build_optimizer) vs torch.optim.AdamW.

Two same-seed copies of the trainer's model, trainer.model.Transformer (default: 4 layers, d_model
256, 4 heads, SwiGLU hidden 1024, vocab 8192, untied embedding and head, ~8.4M parameters), one
stepped by the tiered optimizer, one by torch.optim.AdamW (β = (0.9, 0.95), ε = 1e-20, λ = 0.1;
torch's default implementation for the device: foreach on CUDA and CPU; on CUDA a third copy with
fused=True gives train_step.ratio_vs_fused). Two figures per device,
each the median over --steps steps after --warmup, the two optimizers alternating step by step so
that drift of the machine's speed hits both alike:

* optimizer_step: optimizer.step() alone, on fixed random gradients; also split by tier, with the
  Newton–Schulz work of the Muon tier. Newton–Schulz is 10 × 3 matmuls per matrix, O(r²c) work where
  AdamW makes one O(rc) pass, so this ratio grows with the model and no implementation keeps it near 1.
* train_step: one training step as the trainer runs it: forward on --batch packed rows of --seq tokens
  (documents of random lengths, sample-level masking), cross entropy, backward, optimizer step,
  zero_grad; bf16 autocast on CUDA. The target (a tiered training step takes
  ≤ 1.5× an AdamW one) is read on this figure.

Prints one JSON object: per device both figures, ratio = tiered / adamw, and "targets".

    python benchmarks/optim_step.py [--device cpu|cuda|all] [--steps 20] [--batch B --seq T]
        [--vocab V --d-model D --layers L --heads H --d-hidden F]
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # repo root, not benchmarks/

from benchmarks.record import record  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainer.model import ModelConfig, Transformer  # noqa: E402
from trainer.optim import Muon, build_optimizer  # noqa: E402


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


def packed_batch(batch: int, seq: int, vocab: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Random token rows cut into documents of 64-1,024 tokens: input ids, segment ids, next-token labels."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(vocab, (batch, seq), generator=generator)
    segments = torch.empty(batch, seq, dtype=torch.long)
    for row in range(batch):
        start, segment = 0, 0
        while start < seq:
            end = min(seq, start + int(torch.randint(64, 1025, (1,), generator=generator)))
            segments[row, start:end] = segment
            start, segment = end, segment + 1
    labels = ids.roll(-1, dims=1)
    labels[segments != segments.roll(-1, dims=1)] = -100  # no target across a document boundary
    labels[:, -1] = -100
    return ids.to(device), segments.to(device), labels.to(device)


def train_step(model, optimizer, batch, device) -> None:
    ids, segments, labels = batch
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(ids, segments)
    loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def medians_ms(seconds: list[float]) -> float:
    return round(1e3 * statistics.median(seconds), 3)


def benchmark(device: torch.device, args, config: ModelConfig) -> dict:
    torch.manual_seed(0)
    tiered_model = Transformer(config).to(device)
    adamw_model = copy.deepcopy(tiered_model)
    tiered = build_optimizer(tiered_model)
    adamw = torch.optim.AdamW(adamw_model.parameters(), lr=2.6e-4, betas=(0.9, 0.95), eps=1e-20, weight_decay=0.1)
    fused = None
    if device.type == "cuda":  # torch's fastest AdamW, as a second baseline of the training step
        fused_model = copy.deepcopy(tiered_model)
        fused = (fused_model, torch.optim.AdamW(fused_model.parameters(), lr=2.6e-4, betas=(0.9, 0.95), eps=1e-20,
                                                weight_decay=0.1, fused=True))

    # optimizer.step() alone on fixed gradients
    for model in (tiered_model, adamw_model):
        torch.manual_seed(1)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
    tier_seconds = {tier: [] for tier in tiered.optimizers}
    step_seconds = {"tiered": [], "adamw": []}
    for step in range(args.warmup + args.steps):
        tiered_s, adamw_s = timed(tiered.step, device), timed(adamw.step, device)
        per_tier = {tier: timed(optimizer.step, device) for tier, optimizer in tiered.optimizers.items()}
        if step >= args.warmup:
            step_seconds["tiered"].append(tiered_s)
            step_seconds["adamw"].append(adamw_s)
            for tier, seconds in per_tier.items():
                tier_seconds[tier].append(seconds)
    muon_gflop = newton_schulz_gflop(tiered.optimizers["muon"])
    optimizer_step = {
        "tiered_ms": medians_ms(step_seconds["tiered"]),
        "adamw_ms": medians_ms(step_seconds["adamw"]),
        "ratio": round(statistics.median(step_seconds["tiered"]) / statistics.median(step_seconds["adamw"]), 2),
        "tier_ms": {tier: medians_ms(seconds) for tier, seconds in tier_seconds.items()},
        "muon_ns_gflop": round(muon_gflop, 2),
        "muon_gflop_per_s": round(muon_gflop / statistics.median(tier_seconds["muon"]), 1),
    }

    # a whole training step
    batch = packed_batch(args.batch, args.seq, config.vocab_size, device)
    train_seconds = {"tiered": [], "adamw": [], "adamw_fused": []}
    for step in range(args.warmup + args.train_steps):
        tiered_s = timed(lambda: train_step(tiered_model, tiered, batch, device), device)
        adamw_s = timed(lambda: train_step(adamw_model, adamw, batch, device), device)
        fused_s = timed(lambda: train_step(*fused, batch, device), device) if fused else None
        if step >= args.warmup:
            train_seconds["tiered"].append(tiered_s)
            train_seconds["adamw"].append(adamw_s)
            if fused:
                train_seconds["adamw_fused"].append(fused_s)
    tokens = args.batch * args.seq
    train = {
        "tokens_per_step": tokens,
        "tiered_ms": medians_ms(train_seconds["tiered"]),
        "adamw_ms": medians_ms(train_seconds["adamw"]),
        "ratio": round(statistics.median(train_seconds["tiered"]) / statistics.median(train_seconds["adamw"]), 3),
        "tiered_tokens_per_s": round(tokens / statistics.median(train_seconds["tiered"])),
        "adamw_tokens_per_s": round(tokens / statistics.median(train_seconds["adamw"])),
    }
    if fused:
        train["adamw_fused_ms"] = medians_ms(train_seconds["adamw_fused"])
        train["ratio_vs_fused"] = round(statistics.median(train_seconds["tiered"])
                                        / statistics.median(train_seconds["adamw_fused"]), 3)
    return {
        "optimizer_step": optimizer_step,
        "train_step": train,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--device", choices=("cpu", "cuda", "all"), default="all", help="all: cpu, plus cuda when available"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--train-steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=None, help="rows per training step (default: 1 on CPU, 16 on CUDA)")
    parser.add_argument("--seq", type=int, default=2048, help="tokens per row")
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
    config = ModelConfig(vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                         d_ff=args.d_hidden)
    results, batch_arg = {}, args.batch
    for device in devices:
        args.batch = batch_arg or (16 if device == "cuda" else 1)
        results[device] = benchmark(torch.device(device), args, config)
    targets = {f"{device}_train_step_le_1.5x_adamw": r["train_step"]["ratio"] <= 1.5 for device, r in results.items()}
    shape = dict(vocab=args.vocab, d_model=args.d_model, layers=args.layers, heads=args.heads, d_hidden=args.d_hidden)
    params = sum(p.numel() for p in Transformer(config).parameters())
    report = {"shape": shape, "params": params, "steps": args.steps, "torch": torch.__version__, **results,
              "targets": targets}
    print(json.dumps(report))
    headline = {"params": params}
    for device, r in results.items():
        where = r["name"] or f"CPU, {r['threads']} threads"
        headline[f"{where}: training step, tiered / AdamW"] = f"{r['train_step']['ratio']}x"
        headline[f"{where}: step() alone"] = f"{r['optimizer_step']['ratio']}x"
    record(__file__, headline, report)


if __name__ == "__main__":
    main()
