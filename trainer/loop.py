"""The pretraining loop: packed shards → small transformer → tiered optimizer, with BPB on held-out docs.

    summary = train("OUT/shards", steps=200, device="cpu", config={"optimizer": "tiered"})

One step: read `batch` packed sequences of the current phase (`long_phase`: "pretrain" until 34/45
of the token budget, then "long" when that phase has sequences), cut out held-out documents, set
the lr of every tier from the TokenSchedule (warmup by step, marks by tokens consumed before the
step), forward, mean next-token cross entropy over the batch's targets (trainer/data.py: within
documents only, EOS included, nothing across a boundary), backward, step. No gradient clipping.
On CUDA the forward runs under bf16 autocast (parameters, optimizer state and the loss in float32);
on CPU everything is float32.

Token budget: config total_tokens, else `plan_tokens(steps, ...)` from the manifests' mean real
tokens per sequence — the budget the run's steps consume. In the long phase a step reads
max(1, round(batch · seq_len_pretrain / seq_len_long)) sequences, so tokens per step stay the same
when the long sequences fit the batch, and a step takes one whole long sequence when they don't.

Held-out BPB = Σ cross entropy (nats) over the targets of the held-out segments
               / (ln 2 · Σ UTF-8 bytes of those target tokens)
with the losses in full-vocabulary nats (see VocabMap) and bytes from `token_byte_lengths`: BOS,
EOS and pad count 0 bytes, but predicting EOS stays in the loss (it is part of modelling the text's
end). A document's first token (BOS) is never a target, so its bytes (0) and loss do not enter.

Images: when a phase's manifest counts image spans ("images") and `vision` is "auto", the model gets a
trainer.vision.VisionTower (ViT patch 14 + 2x2 merge + MLP projector; vit_* settings) and every batch
its images' pixels from the run's image store (packing.images.ImageStore: `images`, else the run two
levels above the phase folder); every image of the shards must be in the store (checked before the
first step: FileNotFoundError naming the missing ones). Visual tokens are never targets, so the loss
and the held-out loss and BPB are over text tokens; the step line and the summary count the images
the training batches consumed. `vision` "off" trains text-only on such shards: the placeholders stay
ordinary input tokens and are still never targets.

Checkpoints (`checkpoint_dir`): step-XXXXXXXX.pt every `checkpoint_every` steps and at the end,
the last `keep_checkpoints` kept; each holds model, optimizer tiers, the data cursor of every
phase, step, tokens, history and the run config. `resume` (True: the newest checkpoint in
checkpoint_dir; or a file) continues from it with identical subsequent losses; the model,
optimizer, data and schedule settings come from the checkpoint.
"""

from __future__ import annotations

import glob
import math
import os
import re
import time
from typing import Callable, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from trainer.data import (IGNORE, PhaseStream, VocabMap, eval_rows, find_phases, image_digests, make_batch,
                          resolve_tokenizer, rows_to_batch, token_byte_lengths, token_counts, unigram_log_probs,
                          with_pixels)
from trainer.model import ModelConfig, Transformer
from trainer.optim import AdamWTier, TieredOptimizer, build_optimizer
from trainer.schedule import TokenSchedule, plan_tokens
from trainer.vision import VisionConfig

__all__ = ["TrainConfig", "train", "batch_losses", "evaluate", "build_model_optimizer"]

CHECKPOINT_FORMAT = "curate-trainer/1"
# On resume these come from the command, everything else from the checkpoint's config.
RUNTIME_KEYS = {"log_every", "eval_every", "checkpoint_dir", "checkpoint_every", "keep_checkpoints",
                "eval_tokens", "resume", "tokenizer", "attention", "threads", "images"}


class TrainConfig(BaseModel):
    """The pretraining stage's settings, validated like the run config (pydantic: unknown keys, types and
    ranges refused with the key named)."""

    model_config = ConfigDict(extra="forbid")

    optimizer: Literal["tiered", "adamw"] = Field(
        "tiered", description="tiered (trainer.optim.build_optimizer) or adamw (AdamWTier on every parameter)")
    lr: float = Field(3e-3, gt=0, description=(
        "peak lr of every tier: 3e-3 for the small demo model here (docs/design.md, \"The pretraining stage\"); "
        "the DeepSeek-V4.1 report's 2.6e-4 is its 552B model's"))
    batch: int = Field(1, gt=0, description="packed sequences of the pretrain phase per step")
    d_model: int = Field(256, gt=0)
    n_layers: int = Field(4, gt=0)
    n_heads: int = Field(4, gt=0)
    d_ff: int | None = Field(None, gt=0, description="null: 8/3 d_model rounded up to a multiple of 64")
    seed: int = 0
    vocab: Literal["full", "compact", "auto"] = Field("auto", description="auto: compact on CPU, full on CUDA")
    vocab_min_count: int = Field(2, ge=1, description="compact: keep training ids seen this often (and every held-out id)")
    attention: Literal["auto", "dense", "segments"] = Field("auto", description="trainer.model")
    holdout_every: int = Field(20, ge=0, description="hold out 1 document in N (by a hash of its id); 0: none")
    eval_tokens: int = Field(65536, gt=0, description="at most this many held-out tokens in the evaluation set")
    log_every: int = Field(10, gt=0)
    eval_every: int = Field(100, ge=0, description="0: only at the end")
    checkpoint_dir: str | None = None
    checkpoint_every: int = Field(100, ge=0, description="0: only at the end (when checkpoint_dir is set)")
    keep_checkpoints: int = Field(2, ge=1)
    resume: StrictBool | str = Field(False, description="true: newest checkpoint in checkpoint_dir; or a file")
    long_phase: Literal["auto", "off"] = Field("auto", description="auto: switch to the long phase at 34/45 of "
                                                                   "the tokens if present")
    total_tokens: float | None = Field(None, gt=0, description="null: plan_tokens(steps, ...)")
    warmup_steps: int = Field(2000, ge=0, description="scaled: min(this, max(1, ceil(1% of steps)))")
    tokenizer: str | None = Field(None, description="tokenizer.json for the bytes table; null: the manifest's")
    threads: int | None = Field(None, gt=0, description="torch CPU threads; null: torch's default")
    vision: Literal["auto", "off"] = Field("auto", description="auto: a vision tower when the shards have image "
                                                               "spans; off: train text-only on them")
    images: str | None = Field(None, description="image store: a run folder, OUT/images or a folder of "
                                                 "part-*.parquet; null: the run holding the shards")
    vit_d_model: int = Field(128, gt=0, description="ViT width (a multiple of 4 and of vit_heads)")
    vit_layers: int = Field(2, gt=0)
    vit_heads: int = Field(4, gt=0)

    @field_validator("vit_heads")
    @classmethod
    def _vit_heads_split_the_width(cls, heads: int, info: ValidationInfo) -> int:
        width = info.data.get("vit_d_model")  # absent when it failed its own check
        if width is not None and (width % heads or width % 4):
            raise ValueError(f"vit_d_model={width} must be a multiple of 4 and of vit_heads={heads}")
        return heads

    @classmethod
    def from_any(cls, config: "TrainConfig | dict | None") -> "TrainConfig":
        if isinstance(config, TrainConfig):
            return config
        return cls.model_validate(dict(config or {}))


def build_model_optimizer(model_config: ModelConfig, optimizer: str, lr: float,
                          device: torch.device) -> tuple[Transformer, TieredOptimizer]:
    """The model (initialised from torch's current RNG) and its optimizer: the three tiers, or
    AdamWTier (β = (0.9, 0.95), ε = 1e-20, λ = 0.1) on every parameter as one "adamw" tier."""
    model = Transformer(model_config).to(device)
    if optimizer == "tiered":
        opt = build_optimizer(model, {"lr": lr})
    elif optimizer == "adamw":
        opt = TieredOptimizer({"adamw": AdamWTier(model.parameters(), lr=lr)},
                              {name: "adamw" for name, _ in model.named_parameters()})
    else:
        raise ValueError(f"optimizer must be tiered or adamw, got {optimizer!r}")
    return model, opt


def batch_losses(model: Transformer, batch: dict, vocab: VocabMap, device: torch.device,
                 attention: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """(per-target cross entropy in full-vocabulary nats, target tokenizer ids), over the batch's
    labelled positions in row-major order. A model with a vision tower takes the batch's images (their
    "pixels": with_pixels); one without reads the placeholders as tokens."""
    input_ids = vocab.encode(batch["input_ids"]).to(device)
    segment_ids = batch["segment_ids"].to(device)
    position_ids = batch["position_ids"].to(device)
    labels = batch["labels"].to(device)
    valid = labels != IGNORE
    images = batch.get("images") if model.vision is not None else None
    if images and any("pixels" not in image for image in images):
        raise ValueError("the batch's images have no pixels (trainer.data.with_pixels)")
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        hidden = model.hidden(input_ids, segment_ids, position_ids, attention, images)
        logits = model.lm_head(hidden[valid])
    targets = labels[valid]
    classes = vocab.encode(targets)
    ce = F.cross_entropy(logits.float(), classes, reduction="none")
    if vocab.unk >= 0:  # UNK's mass is spread over the ids it stands for
        ce = ce + (classes == vocab.unk).float() * vocab.unk_log_count
    return ce, targets


@torch.no_grad()
def evaluate(model: Transformer, rows: list, vocab: VocabMap, byte_lengths: torch.Tensor | None,
             device: torch.device, attention: str = "auto", rows_per_batch: int = 1,
             unigram: torch.Tensor | None = None, image_store=None) -> dict:
    """Held-out loss (nats per target token) and bits per byte over `rows` (lists of segments), with
    the baselines on the same targets (_with_rates): uniform over the tokenizer's vocabulary, the
    training unigram (`unigram`: log p per id), and the loss on the targets a compact vocabulary keeps.
    Images of the rows get their pixels from `image_store` when the model has a vision tower; "images"
    counts those it saw."""
    was_training = model.training
    model.eval()
    sums = dict.fromkeys(("nats", "targets", "bytes", "unk_targets", "unigram_nats", "in_vocab_nats", "images"), 0.0)
    for i in range(0, len(rows), rows_per_batch):
        batch = rows_to_batch(rows[i:i + rows_per_batch])
        if model.vision is not None and "images" in batch:
            batch = with_pixels(batch, image_store)
            sums["images"] += len(batch["images"])
        ce, targets = batch_losses(model, batch, vocab, device, attention)
        unk = vocab.encode(targets) == vocab.unk if vocab.unk >= 0 else torch.zeros_like(targets, dtype=torch.bool)
        sums["nats"] += float(ce.double().sum())
        sums["in_vocab_nats"] += float(ce.double()[~unk].sum())
        sums["targets"] += targets.numel()
        sums["unk_targets"] += int(unk.sum())
        if unigram is not None:
            sums["unigram_nats"] -= float(unigram.to(targets.device)[targets].double().sum())
        if byte_lengths is not None:
            sums["bytes"] += int(byte_lengths.to(targets.device)[targets].sum())
    model.train(was_training)
    result = {**{k: int(v) if k in ("targets", "bytes", "unk_targets", "images") else v for k, v in sums.items()},
              "tokens": sum(len(s) for row in rows for s in row), "segments": sum(len(row) for row in rows),
              "vocab_size": vocab.vocab_size, "has_unigram": unigram is not None}
    if byte_lengths is None:
        result["bytes"] = None
    return _with_rates(result)


def _with_rates(r: dict) -> dict:
    """Per-target losses and bits per byte from the sums: `loss`, `bpb`, and on the same targets
    `uniform_loss` (ln V), `unigram_loss`, `in_vocab_loss` (targets the vocabulary keeps; `unk_targets`
    are the others)."""
    n, in_vocab = r["targets"], r["targets"] - r["unk_targets"]
    r["loss"] = r["nats"] / n if n else None
    r["bpb"] = r["nats"] / (math.log(2) * r["bytes"]) if r["bytes"] else None
    r["uniform_loss"] = math.log(r["vocab_size"]) if n else None
    r["unigram_loss"] = r["unigram_nats"] / n if n and r["has_unigram"] else None
    r["in_vocab_loss"] = r["in_vocab_nats"] / in_vocab if in_vocab else None
    return r


def combine_evals(parts: dict[str, dict]) -> dict:
    """The evaluation of the union of the parts' rows (sums of nats, targets, tokens, bytes), plus
    each part under "by_phase"."""
    keys = ("nats", "targets", "tokens", "segments", "unk_targets", "unigram_nats", "in_vocab_nats", "images")
    total = {k: sum(p[k] for p in parts.values()) for k in keys}
    has_bytes = all(p["bytes"] is not None for p in parts.values())
    total["bytes"] = sum(p["bytes"] for p in parts.values()) if has_bytes else None
    first = next(iter(parts.values()))
    total.update(vocab_size=first["vocab_size"], has_unigram=first["has_unigram"])
    total = _with_rates(total)
    total["by_phase"] = parts
    return total


def _checkpoint_files(directory: str) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, "step-*.pt")),
                  key=lambda p: int(re.search(r"step-(\d+)\.pt$", p).group(1)))


def _resolve_resume(resume: bool | str, checkpoint_dir: str | None) -> str:
    if isinstance(resume, str) and os.path.isfile(resume):
        return resume
    directory = resume if isinstance(resume, str) else checkpoint_dir
    if not directory:
        raise ValueError("resume needs checkpoint_dir or a checkpoint path")
    files = _checkpoint_files(directory)
    if not files:
        raise FileNotFoundError(f"no step-*.pt checkpoint in {directory}")
    return files[-1]


def _tier_lrs(opt: TieredOptimizer) -> dict[str, float]:
    return {tier: o.param_groups[0]["lr"] * o.param_groups[0].get("lr_mult", 1.0)
            for tier, o in opt.optimizers.items()}


def _routing_counts(opt: TieredOptimizer, model: Transformer) -> dict[str, dict]:
    """Tensors and parameters per route; with a vision tower, also how many of them are the tower's."""
    params = dict(model.named_parameters())
    out: dict[str, dict] = {}
    for name, route in opt.routing.items():
        entry = out.setdefault(route, {"tensors": 0, "params": 0, **({"vision_tensors": 0, "vision_params": 0}
                                                                   if model.vision is not None else {})})
        entry["tensors"] += 1
        entry["params"] += params[name].numel()
        if name.startswith("vision."):
            entry["vision_tensors"] += 1
            entry["vision_params"] += params[name].numel()
    return out


def _image_store(phases: list, cfg: TrainConfig, say: Callable[[str], None]):
    """The ImageStore of phases with image spans (None when there are none or vision is off), checked to
    hold every image they name; FileNotFoundError, worded for the command line, otherwise."""
    spans = {p.name: p.images for p in phases if p.images}
    if not spans:
        return None
    described = ", ".join(f"{name} {n:,}" for name, n in spans.items())
    if cfg.vision == "off":
        say(f"vision off: image spans ({described}) are read as placeholder tokens")
        return None
    from packing.images import ImageStore

    source = cfg.images or next(p.directory for p in phases if p.images)
    try:
        store = ImageStore(source)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"the shards have image spans ({described}) but {err}; pass --images DIR, or "
                                f"--vision off to train text-only") from None
    missing = store.missing(image_digests(phases))
    if missing:
        raise FileNotFoundError(f"{len(missing):,} images of the shards are not in the image store "
                                f"{', '.join(store.folders)} (first: {missing[0]})")
    say(f"images: {described} spans; store {', '.join(store.folders)} ({len(store):,} images)")
    return store


def train(shards_dir: str, steps: int, device: str = "cpu", config: TrainConfig | dict | None = None,
          log: Callable[[str], None] | None = print) -> dict:
    """Train for `steps` steps on the shards under `shards_dir`; return the summary and history.

    Returned keys: steps, tokens (consumed, held-out segments included), trained_tokens (model input),
    images (image spans the training batches fed the vision tower; 0 without one),
    tokens_per_s, train_seconds, initial_loss, final_loss (mean over the last log_every steps),
    losses (every step's mean training loss), heldout (final evaluation: loss, bpb, tokens, bytes,
    ...), evals, history (logged steps), schedule, model, vocab, optimizer, routing, device,
    phase_switch_step, checkpoint (last saved path) and config.
    """
    cfg = TrainConfig.from_any(config)
    say = log or (lambda _: None)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)

    checkpoint = None
    if cfg.resume:
        path = _resolve_resume(cfg.resume, cfg.checkpoint_dir)
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        if checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path} is not a {CHECKPOINT_FORMAT} checkpoint")
        saved = TrainConfig.from_any(checkpoint["config"])
        cfg = TrainConfig(**{name: getattr(cfg if name in RUNTIME_KEYS else saved, name)
                             for name in TrainConfig.model_fields})
        say(f"resuming from {path} at step {checkpoint['state']['step']}")

    phases = find_phases(shards_dir)
    pretrain = phases.get("pretrain") or next(iter(phases.values()))
    long = phases.get("long") if cfg.long_phase == "auto" and pretrain.name != "long" else None
    if cfg.long_phase not in ("auto", "off"):
        raise ValueError(f"long_phase must be auto or off, got {cfg.long_phase!r}")
    used = [pretrain] + ([long] if long else [])
    tok_info = pretrain.tokenizer
    full_vocab = int(tok_info["vocab_size"])
    store = _image_store(used, cfg, say)  # before any work: a missing store is the user's to fix
    # the placeholder matters only where a phase has image spans (a text-only manifest may still name it)
    image_id = next((p.image_token_id for p in used if p.images and p.image_token_id is not None), None)

    # ---- vocabulary, baselines and bytes table
    counts, held_counts = token_counts(used, cfg.holdout_every, full_vocab)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    if checkpoint is not None:
        vocab = VocabMap(checkpoint["vocab_size"], checkpoint["vocab_keep"])
    else:
        mode = cfg.vocab if cfg.vocab != "auto" else ("compact" if dev.type == "cpu" else "full")
        if mode == "compact":
            vocab = VocabMap.compact(counts, cfg.vocab_min_count, cover=held_counts,
                                     always=(tok_info.get("bos_id"), tok_info.get("eos_id"), image_id))
        elif mode == "full":
            vocab = VocabMap(full_vocab)
        else:
            raise ValueError(f"vocab must be auto, full or compact, got {cfg.vocab!r}")
    text_counts = counts.copy()
    if image_id is not None:
        text_counts[image_id] = 0  # the baseline is over text targets, as the loss (placeholders never are)
    unigram = torch.from_numpy(unigram_log_probs(text_counts, vocab))
    tokenizer_path, tokenizer_note = resolve_tokenizer(tok_info, cfg.tokenizer)
    byte_lengths, bytes_method = None, tokenizer_note
    if tokenizer_path is not None:
        table, bytes_method = token_byte_lengths(
            tokenizer_path, full_vocab,
            (tok_info.get("bos_id"), tok_info.get("eos_id"), tok_info.get("pad_id"), image_id))
        byte_lengths = torch.from_numpy(table)
        if tokenizer_note != "ok":
            bytes_method += f"; {tokenizer_note}"
    else:
        say(f"no bytes table: {tokenizer_note}; held-out BPB will be null")

    # ---- model, optimizer, schedule
    vision = (VisionConfig(d_vit=cfg.vit_d_model, n_layers=cfg.vit_layers, n_heads=cfg.vit_heads)
              if store is not None else None)
    model_config = ModelConfig(vocab_size=vocab.size, d_model=cfg.d_model, n_layers=cfg.n_layers,
                               n_heads=cfg.n_heads, d_ff=cfg.d_ff, vision=vision)
    model, opt = build_model_optimizer(model_config, cfg.optimizer, cfg.lr, dev)
    long_batch = max(1, round(cfg.batch * pretrain.seq_len / long.seq_len)) if long else 0
    total_tokens = cfg.total_tokens or plan_tokens(
        steps, cfg.batch * pretrain.tokens_per_sequence, long_batch * long.tokens_per_sequence if long else None)
    schedule = TokenSchedule(total_tokens, peak_lr=cfg.lr, warmup_steps=cfg.warmup_steps, total_steps=steps)

    state = {"step": 0, "tokens": 0, "trained_tokens": 0, "cursors": {}, "losses": [], "history": [],
             "evals": [], "phase_switch_step": None, "train_seconds": 0.0, "images": 0}
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        state.update(checkpoint["state"])
    streams = {p.name: PhaseStream(p, state["cursors"].get(p.name, 0)) for p in used}
    rows = eval_rows(used, cfg.holdout_every, cfg.eval_tokens)
    say(f"model {model.num_parameters():,} params ({model_config.n_layers} layers, d_model {model_config.d_model}, "
        f"{model_config.n_heads} heads, d_ff {model_config.d_ff}), vocab {vocab.mode} {vocab.size:,} of "
        f"{full_vocab:,}, optimizer {cfg.optimizer}, device {dev}")
    say(f"phases: {', '.join(f'{p.name} ({p.sequences} seq x {p.seq_len})' for p in used)}; token budget "
        f"{total_tokens:,.0f}, warmup {schedule.warmup_steps} steps, decay {schedule.marks['decay_start']:,.0f}"
        f"..{schedule.marks['decay_end']:,.0f}" + (f", long from {schedule.marks['long_switch']:,.0f}" if long else "")
        + "; held-out eval " + ", ".join(f"{name} {sum(len(s) for r in part for s in r):,}"
                                         for name, part in rows.items()) + " tokens")
    if vision is not None:
        say(f"vision tower {model.vision.num_parameters():,} params (ViT patch {vision.patch}, d {vision.d_vit}, "
            f"{vision.n_layers} layers, {vision.n_heads} heads; {vision.merge}x{vision.merge} merge; MLP projector "
            f"to d_model {model_config.d_model}); routing " + ", ".join(
                f"{route} {e['tensors']} tensors {e['params']:,} params (vision {e['vision_tensors']}, "
                f"{e['vision_params']:,})" for route, e in _routing_counts(opt, model).items()))

    def save_checkpoint() -> str | None:
        if not cfg.checkpoint_dir:
            return None
        os.makedirs(cfg.checkpoint_dir, exist_ok=True)
        state["cursors"] = {name: s.consumed for name, s in streams.items()}
        path = os.path.join(cfg.checkpoint_dir, f"step-{state['step']:08d}.pt")
        payload = {"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": opt.state_dict(),
                   "state": state, "config": cfg.model_dump(), "model_config": model_config.to_dict(),
                   "vocab_size": vocab.vocab_size, "vocab_keep": vocab.keep, "steps": steps,
                   "total_tokens": total_tokens}
        torch.save(payload, path + ".tmp")
        os.replace(path + ".tmp", path)
        for old in _checkpoint_files(cfg.checkpoint_dir)[:-max(1, cfg.keep_checkpoints)]:
            os.remove(old)
        return path

    def run_eval() -> dict:
        result = combine_evals({name: evaluate(model, part, vocab, byte_lengths, dev, cfg.attention,
                                               unigram=unigram, image_store=store) for name, part in rows.items()})
        result["step"] = state["step"]
        state["evals"].append(result)

        def fmt(r: dict) -> str:
            if r["loss"] is None:
                return "no held-out targets"
            bpb = f"{r['bpb']:.4f}" if r["bpb"] is not None else "n/a"
            text = (f"loss {r['loss']:.4f} nats/token (uniform over {r['vocab_size']:,} ids {r['uniform_loss']:.2f}, "
                    f"training unigram {r['unigram_loss']:.2f}), bpb {bpb}")
            if r["unk_targets"] and r["in_vocab_loss"] is not None:
                share = 1 - r["unk_targets"] / r["targets"]
                text += f", {share:.0%} of targets in the compact vocabulary: loss {r['in_vocab_loss']:.4f}"
            return text + f" ({r['tokens']:,} tokens, {r['bytes'] or 0:,} bytes" + (
                f", {r['images']:,} images)" if r["images"] else ")")

        by_phase = "".join(f"; {name}: {fmt(r)}" for name, r in result["by_phase"].items()) if len(rows) > 1 else ""
        say(f"eval step {state['step']}: held-out {fmt(result)}{by_phase}")
        return result

    model.train()
    last_checkpoint = None
    window_tokens, window_seconds = 0, 0.0
    while state["step"] < steps:
        step = state["step"]
        use_long = long is not None and schedule.phase(state["tokens"]) == "long"
        phase = long if use_long else pretrain
        if use_long and state["phase_switch_step"] is None:
            state["phase_switch_step"] = step
            say(f"step {step}: switching to phase {long.name} (seq_len {long.seq_len}) at {state['tokens']:,} tokens")
        start = time.perf_counter()
        batch, consumed = make_batch(streams[phase.name], long_batch if use_long else cfg.batch, cfg.holdout_every)
        if store is not None:
            batch = with_pixels(batch, store)
            state["images"] += len(batch.get("images", ()))
        lr = schedule(step, state["tokens"])
        opt.set_lr(lr)
        opt.zero_grad()
        ce, _ = batch_losses(model, batch, vocab, dev, cfg.attention)
        loss = ce.mean()
        loss.backward()
        opt.step()
        loss_value = loss.item()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        seconds = time.perf_counter() - start
        trained = int((batch["segment_ids"] >= 0).sum())
        state["step"] += 1
        state["tokens"] += consumed
        state["trained_tokens"] += trained
        state["train_seconds"] += seconds
        state["losses"].append(loss_value)
        window_tokens += trained
        window_seconds += seconds
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"step {state['step']}: loss is {loss_value}")

        done = state["step"] == steps
        if state["step"] % max(1, cfg.log_every) == 0 or done or state["step"] == 1:
            lrs = _tier_lrs(opt)
            entry = {"step": state["step"], "phase": phase.name, "tokens": state["tokens"], "loss": loss_value,
                     "images": state["images"], "lr": lrs,
                     "tokens_per_s": window_tokens / window_seconds if window_seconds else None}
            state["history"].append(entry)
            say(f"step {state['step']:>6}/{steps}  {phase.name:<8}  tokens {state['tokens']:>12,}  "
                f"loss {loss_value:8.4f}  lr " + " ".join(f"{t}={v:.3e}" for t, v in lrs.items())
                + f"  tok/s {entry['tokens_per_s']:,.0f}"
                + (f"  images {state['images']:,}" if store is not None else ""))
            window_tokens, window_seconds = 0, 0.0
        if cfg.eval_every and state["step"] % cfg.eval_every == 0 and not done:
            run_eval()
        if cfg.checkpoint_dir and cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0 and not done:
            last_checkpoint = save_checkpoint()

    final_eval = state["evals"][-1] if state["evals"] and state["evals"][-1]["step"] == state["step"] else run_eval()
    if cfg.checkpoint_dir:
        last_checkpoint = save_checkpoint()
    losses = state["losses"]
    tail = losses[-max(1, cfg.log_every):]
    return {
        "steps": state["step"],
        "tokens": state["tokens"],
        "trained_tokens": state["trained_tokens"],
        "tokens_per_s": state["trained_tokens"] / state["train_seconds"] if state["train_seconds"] else None,
        "train_seconds": state["train_seconds"],
        "initial_loss": losses[0] if losses else None,
        "final_loss": sum(tail) / len(tail) if tail else None,
        "last_loss": losses[-1] if losses else None,
        "losses": losses,
        "heldout": final_eval,
        "evals": state["evals"],
        "history": state["history"],
        "schedule": {"total_tokens": total_tokens, "peak_lr": cfg.lr, "warmup_steps": schedule.warmup_steps,
                     **schedule.marks},
        "phase_switch_step": state["phase_switch_step"],
        "images": state["images"],
        "model": {"params": model.num_parameters(), **model_config.to_dict()},
        "vocab": {"mode": vocab.mode, "size": vocab.size, "tokenizer_vocab": vocab.vocab_size,
                  "bytes": bytes_method},
        "optimizer": cfg.optimizer,
        "routing": _routing_counts(opt, model),
        "device": str(dev),
        "checkpoint": last_checkpoint,
        "config": cfg.model_dump(),
    }
