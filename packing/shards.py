"""Trainer-ready shard files, their manifest, and the reader: sequences are spread over the shards by a
seeded permutation, and the reader splits them over distributed ranks and DataLoader workers.

Layout: OUT/shards/<phase>/part-KKKKK-of-NNNNN.arrow + manifest.json.

A shard is an Arrow IPC *file* (uncompressed, so it memory-maps with zero copies), one row per
packed sequence, rows in training order:

    input_ids    fixed_size_list<int32>[seq_len]  token ids, real tokens first, then pad_id
    num_tokens   int32                            real tokens in the sequence (<= seq_len)
    cu_seqlens   list<int32>                      0, end of segment 1, ..., num_tokens
    doc_ids      list<string>                     provenance: document id of each segment
    chunk_index  list<int32>                      provenance: chunk index of each segment
    epoch        list<int32>                      which epoch copy of its document a segment is (0, 1, ...)
    modality     list<string>                     text, pair or interleaved, per segment
    images       list<struct<pos, tokens, sha256, height, width>>
                                                  image spans: the first visual token's position in the
                                                  sequence, the block's length, the image (its sha256 in
                                                  OUT/images/) and its resized height x width in pixels
    index        int64                            position of the sequence in the phase's order

A segment is one chunk of one document copy (chunk id = (doc id, epoch copy, chunk index)); an image's
visual tokens are `tokens` copies of the image placeholder id (the manifest's `image_token_id`) and never
cross a segment (packing/chunk.py never cuts inside one); sample-level attention
masking attends within segments only, and positions restart at 0 in each segment. Schema metadata
holds seq_len, pad_id and the phase name. The padding rate of a phase is
padding tokens / (sequences * seq_len).

Reader: `open_shards(dir, rank, world_size)` yields one dict per sequence; `packing.dataset.ShardDataset`
(packing/dataset.py) is the same as a PyTorch IterableDataset that splits sequences over distributed ranks and DataLoader
workers: sequence k (in the phase's order) goes to rank k % world_size, and among that rank's
sequences the j-th goes to worker j % num_workers. Every sequence is read exactly once per pass.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Iterator, NamedTuple

import numpy as np
import pyarrow as pa

MANIFEST = "manifest.json"
FORMAT = "curate-packed-shards/2"
BATCH_TOKENS = 1 << 24  # rows per Arrow record batch: about 16M tokens (64 MiB of ids)


IMAGE_SPAN = pa.struct([("pos", pa.int32()), ("tokens", pa.int32()), ("sha256", pa.string()),
                        ("height", pa.int32()), ("width", pa.int32())])


class Segment(NamedTuple):
    """One chunk of one document copy as the writer takes it; `images` holds (offset of the first visual
    token in the segment, tokens, sha256, height, width) per image block."""

    doc_id: str
    chunk: int
    ids: np.ndarray
    epoch: int = 0
    modality: str = "text"
    images: tuple = ()


def shard_name(shard: int, shards: int) -> str:
    return f"part-{shard:05d}-of-{shards:05d}.arrow"


def schema(seq_len: int, pad_id: int, phase: str) -> pa.Schema:
    return pa.schema([("input_ids", pa.list_(pa.int32(), seq_len)), ("num_tokens", pa.int32()),
                      ("cu_seqlens", pa.list_(pa.int32())), ("doc_ids", pa.list_(pa.string())),
                      ("chunk_index", pa.list_(pa.int32())), ("epoch", pa.list_(pa.int32())),
                      ("modality", pa.list_(pa.string())), ("images", pa.list_(IMAGE_SPAN)), ("index", pa.int64())],
                     metadata={"seq_len": str(seq_len), "pad_id": str(pad_id), "phase": phase})


def write_shard(sink, sequences: list[tuple[int, list[Segment]]], seq_len: int, pad_id: int, phase: str) -> dict:
    """Write one shard to the binary file object `sink`.

    `sequences`: (index, [Segment, ...]) in row order, segments in order. Same input -> same bytes.
    Returns the shard's counts."""
    sch = schema(seq_len, pad_id, phase)
    rows_per_batch = max(1, BATCH_TOKENS // seq_len)
    tokens = 0
    with pa.ipc.new_file(sink, sch) as writer:
        for b in range(0, len(sequences), rows_per_batch):
            part = sequences[b:b + rows_per_batch]
            ids = np.full((len(part), seq_len), pad_id, dtype=np.int32)
            num, cu, index, spans = [], [], [], []
            for row, (idx, segments) in enumerate(part):
                bounds, row_spans = [0], []
                for seg in segments:
                    at = bounds[-1]
                    if at + len(seg.ids) > seq_len:
                        raise ValueError(f"sequence {idx} holds more than seq_len={seq_len} tokens")
                    ids[row, at:at + len(seg.ids)] = seg.ids
                    row_spans += [{"pos": at + offset, "tokens": n, "sha256": sha, "height": h, "width": w}
                                  for offset, n, sha, h, w in seg.images]
                    bounds.append(at + len(seg.ids))
                num.append(bounds[-1])
                cu.append(bounds)
                spans.append(row_spans)
                index.append(idx)
            tokens += sum(num)
            column = lambda field: [[getattr(seg, field) for seg in segments] for _, segments in part]  # noqa: E731
            arrays = [pa.FixedSizeListArray.from_arrays(pa.array(ids.ravel(), pa.int32()), seq_len),
                      pa.array(num, pa.int32()), pa.array(cu, pa.list_(pa.int32())),
                      pa.array(column("doc_id"), pa.list_(pa.string())),
                      pa.array(column("chunk"), pa.list_(pa.int32())), pa.array(column("epoch"), pa.list_(pa.int32())),
                      pa.array(column("modality"), pa.list_(pa.string())), pa.array(spans, pa.list_(IMAGE_SPAN)),
                      pa.array(index, pa.int64())]
            writer.write_batch(pa.record_batch(arrays, schema=sch))
    return {"sequences": len(sequences), "tokens": tokens, "padding_tokens": len(sequences) * seq_len - tokens}


def manifest(phase: str, seq_len: int, chunk_tokens: int, tokenizer: dict, shards: list[dict], *,
             status: str, padding_target: float, chunks: int, documents: int, groups: int,
             min_group_tokens: int, max_group_padding_rate: float, groups_above_target: int, seed: int,
             allocation: dict | None = None, modalities: dict | None = None) -> dict:
    """manifest.json content; `shards` holds {"file", "sequences", "tokens", "padding_tokens"} each."""
    shards = sorted(shards, key=lambda s: s["file"])
    sequences = sum(s["sequences"] for s in shards)
    tokens = sum(s["tokens"] for s in shards)
    padding = sum(s["padding_tokens"] for s in shards)
    rate = padding / (sequences * seq_len) if sequences else 0.0
    detail, alloc = "", allocation or {}
    if status == "insufficient_tokens":
        detail = (f"budget of {alloc.get('budget_tokens', 0)} tokens < {alloc.get('needed_tokens', seq_len)} "
                  f"needed (min_sequences x seq_len); its share went to the phases that can be filled, if any")
    elif status == "ok" and not sequences:
        status, detail = "empty", "no documents allocated to this phase"
    elif status == "ok" and rate > padding_target and tokens < min_group_tokens:
        status = "insufficient_tokens"
        detail = (f"{tokens} tokens, fewer than the {min_group_tokens} a packing group needs to reach padding "
                  f"{padding_target:g}; packed anyway (padding {rate:.3g})")
    elif status == "ok" and rate > padding_target:
        status = "padding_above_target"
        detail = (f"{groups_above_target} of {groups} packing groups above the target with {tokens} tokens "
                  f"({min_group_tokens} per group)")
    return {"format": FORMAT, "phase": phase, "status": status, "status_detail": detail, "seq_len": seq_len,
            "chunk_tokens": chunk_tokens,
            "tokenizer": {k: tokenizer.get(k) for k in ("name", "sha256", "vocab_size", "bos_id", "eos_id", "pad_id",
                                                        "add_bos", "add_eos", "image_id")},
            "image_token_id": tokenizer.get("image_id"),
            **(modalities or {"tokens_by_modality": {"text": tokens, "multimodal": 0, "pair": 0, "interleaved": 0},
                              "text_to_multimodal_ratio": None, "images": 0, "visual_tokens": 0,
                              "epoch_multipliers": None}),
            "sequences": sequences, "tokens": tokens, "padding_tokens": padding, "padding_rate": rate,
            "padding_target": padding_target, "documents": documents, "chunks": chunks, "groups": groups,
            "min_group_tokens": min_group_tokens, "max_group_padding_rate": max_group_padding_rate,
            "groups_above_target": groups_above_target, "shuffle_seed": seed,
            "allocation": alloc, "shards": shards}


def manifest_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


# ----------------------------------------------------------------------------------------- reading
def read_manifest(directory: str) -> dict | None:
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def shard_files(directory: str) -> list[str]:
    """The phase's shard files in order: the manifest's list, else every *.arrow file sorted. A folder
    with neither is a mistake (a run's or the shards' folder instead of a phase's): FileNotFoundError
    naming the phase folders below it."""
    meta = read_manifest(directory)
    if meta and "shards" in meta:  # OUT/shards/manifest.json (the run's) lists phases, not shards
        return [os.path.join(directory, s["file"]) for s in meta["shards"]]
    names = sorted(f for f in os.listdir(directory) if f.endswith(".arrow")) if os.path.isdir(directory) else []
    if not names:
        below = sorted(os.path.relpath(os.path.dirname(m), directory)
                       for m in glob.glob(os.path.join(directory, "**", MANIFEST), recursive=True))
        hint = f"; phase folders below it: {', '.join(below)}" if below else ""
        raise FileNotFoundError(f"no shards in {directory} (a phase folder holds {MANIFEST} and *.arrow){hint}")
    return [os.path.join(directory, n) for n in names]


def _segments(cu: np.ndarray) -> np.ndarray:
    """position_ids restarting at 0 at each segment start."""
    n = int(cu[-1])
    starts = np.repeat(cu[:-1], np.diff(cu))
    return (np.arange(n, dtype=np.int32) - starts).astype(np.int32)


def open_shards(directory: str, rank: int = 0, world_size: int = 1, padded: bool = False,
                worker_id: int = 0, num_workers: int = 1, image_store=None) -> Iterator[dict]:
    """Yield this rank's (and worker's) sequences from the memory-mapped shards, in training order.

    Each item: input_ids (int32; the real tokens, or all seq_len with pad_id after them when
    `padded`), cu_seqlens (int32, over the real tokens: [0, ..., num_tokens]), position_ids (int32,
    reset to 0 at each segment; 0 on padding), num_tokens, doc_ids, chunk_index, epoch, modality,
    images (one dict per image span: pos, tokens, sha256, height, width; with `image_store`, a
    packing.images.ImageStore, also `pixels`: the image decoded and resized to height x width, uint8
    H x W x 3), index. input_ids and cu_seqlens are read-only views into the memory-mapped file."""
    if not (0 <= rank < world_size and 0 <= worker_id < num_workers):
        raise ValueError(f"bad rank/worker: rank={rank} world_size={world_size} "
                         f"worker_id={worker_id} num_workers={num_workers}")
    k = 0
    for path in shard_files(directory):
        source = pa.memory_map(path, "r")
        reader = pa.ipc.open_file(source)
        seq_len = int(reader.schema.metadata[b"seq_len"])
        for b in range(reader.num_record_batches):
            batch = reader.get_batch(b)
            rows = batch.num_rows
            mine = [r for r in range(rows)
                    if (k + r) % world_size == rank and ((k + r) // world_size) % num_workers == worker_id]
            k += rows
            if not mine:
                continue
            ids = batch.column("input_ids").values.to_numpy(zero_copy_only=True).reshape(rows, seq_len)
            num = batch.column("num_tokens").to_numpy()
            cu_col = batch.column("cu_seqlens")
            cu_values, cu_offsets = cu_col.values.to_numpy(), cu_col.offsets.to_numpy()
            docs, chunks, index = (batch.column("doc_ids").to_pylist(), batch.column("chunk_index").to_pylist(),
                                   batch.column("index").to_numpy())
            epochs, modality = batch.column("epoch").to_pylist(), batch.column("modality").to_pylist()
            images = batch.column("images").to_pylist()
            for r in mine:
                n = int(num[r])
                cu = cu_values[cu_offsets[r]:cu_offsets[r + 1]]
                pos = _segments(cu)
                if padded:
                    pos = np.concatenate([pos, np.zeros(seq_len - n, dtype=np.int32)])
                if image_store is not None:
                    for span in images[r]:
                        span["pixels"] = image_store.pixels(span["sha256"], span["height"], span["width"])
                yield {"input_ids": ids[r] if padded else ids[r, :n], "cu_seqlens": cu, "position_ids": pos,
                       "num_tokens": n, "doc_ids": docs[r], "chunk_index": chunks[r], "epoch": epochs[r],
                       "modality": modality[r], "images": images[r], "index": int(index[r])}

