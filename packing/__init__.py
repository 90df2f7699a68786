"""Trainer-ready shards (DeepSeek-V4.1 report §4.1, pretraining data): tokenize, chunk, allocate to phases,
best-fit pack, write, read.

Pure modules (no Beam): bfd (packing), tokenizer, chunk, phases, permute, shards (format, manifest,
reader), dataset (PyTorch). Beam transforms: packing.transforms. Config: packing.config.
"""

from packing.bfd import pack_lengths, pack_lengths_csr, padding_rate
from packing.shards import open_shards

__all__ = ["pack_lengths", "pack_lengths_csr", "padding_rate", "open_shards", "ShardDataset"]


def __getattr__(name: str):
    if name == "ShardDataset":  # imports torch: only on demand
        from packing.dataset import ShardDataset

        return ShardDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
