"""`ShardDataset`: the shard reader (packing/shards.py) as a PyTorch IterableDataset that splits the
sequences over distributed ranks and DataLoader workers."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from packing.shards import open_shards


class ShardDataset(IterableDataset):
    """A phase's packed sequences, split over distributed ranks and DataLoader workers.

    Sequence k of the phase goes to rank k % world_size; the j-th sequence of a rank goes to its
    DataLoader worker j % num_workers, so one pass over all ranks and workers reads every sequence
    exactly once. rank/world_size default to torch.distributed's when it is initialized, else 0/1.
    Yields input_ids (int64), cu_seqlens (int32, as flash-attention's varlen kernels take them) and
    position_ids (int64, reset at each segment), plus num_tokens, doc_ids, chunk_index and index.
    Use DataLoader(dataset, batch_size=None, num_workers=k), or collate packed sequences yourself."""

    def __init__(self, directory: str, rank: int | None = None, world_size: int | None = None,
                 padded: bool = False):
        super().__init__()
        dist = torch.distributed
        ready = dist.is_available() and dist.is_initialized()
        self.directory = directory
        self.rank = rank if rank is not None else (dist.get_rank() if ready else 0)
        self.world_size = world_size if world_size is not None else (dist.get_world_size() if ready else 1)
        self.padded = padded

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for item in open_shards(self.directory, self.rank, self.world_size, self.padded, worker, workers):
            yield {**item,
                   "input_ids": torch.from_numpy(item["input_ids"].astype(np.int64)),
                   "cu_seqlens": torch.from_numpy(item["cu_seqlens"].astype(np.int32)),
                   "position_ids": torch.from_numpy(item["position_ids"].astype(np.int64))}
