"""Shard format, manifest status, reader and IterableDataset (packing/shards.py, packing/dataset.py),
and the padding a packing group reaches once it holds enough tokens (packing/transforms.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from packing import ShardDataset, open_shards
from packing.config import PackConfig, phases
from packing.shards import MANIFEST, Segment, manifest, manifest_bytes, shard_name, write_shard
from packing.transforms import GROUPS, _PackGroup

SEQ_LEN, PAD = 64, 2
INFO = {"name": "t", "sha256": "0" * 64, "vocab_size": 100, "bos_id": 0, "eos_id": 1, "pad_id": PAD,
        "add_bos": True, "add_eos": True}


def synthetic_shards(tmp_path, n_shards=3, per_shard=7, seed=0):
    rng = np.random.default_rng(seed)
    expected, metas, index = [], [], 0
    for s in range(n_shards):
        sequences = []
        for _ in range(per_shard):
            segments, room = [], SEQ_LEN - int(rng.integers(0, 3))
            while room > 0:
                n = int(rng.integers(1, min(room, 30) + 1))
                ids = rng.integers(3, 100, n).astype(np.int32)
                segments.append(Segment(f"doc{index}-{len(segments)}", len(segments), ids, epoch=len(segments) % 2))
                room -= n
            sequences.append((index, segments))
            expected.append((index, segments))
            index += 1
        name = shard_name(s, n_shards)
        with open(tmp_path / name, "wb") as fh:
            metas.append({"file": name, **write_shard(fh, sequences, SEQ_LEN, PAD, "pretrain")})
    meta = manifest("pretrain", SEQ_LEN, SEQ_LEN, INFO, metas, status="ok", padding_target=1e-4, chunks=0,
                    documents=0, groups=1, min_group_tokens=0, max_group_padding_rate=0.0, groups_above_target=0,
                    seed=0)
    (tmp_path / MANIFEST).write_bytes(manifest_bytes(meta))
    return expected, meta


def test_round_trip_with_boundaries_positions_and_padding(tmp_path):
    expected, meta = synthetic_shards(tmp_path)
    got = list(open_shards(str(tmp_path)))
    assert [g["index"] for g in got] == [i for i, _ in expected]
    for item, (_, segments) in zip(got, expected):
        ids = np.concatenate([s.ids for s in segments])
        lengths = [len(s.ids) for s in segments]
        assert item["input_ids"].tolist() == ids.tolist() and item["num_tokens"] == len(ids)
        assert np.diff(item["cu_seqlens"]).tolist() == lengths and item["cu_seqlens"][0] == 0
        assert item["position_ids"].tolist() == [p for n in lengths for p in range(n)]
        assert item["doc_ids"] == [s.doc_id for s in segments] and item["chunk_index"] == [s.chunk for s in segments]
        assert item["epoch"] == [s.epoch for s in segments] and item["modality"] == ["text"] * len(segments)
        assert item["images"] == []
    padded = next(open_shards(str(tmp_path), padded=True))
    n = got[0]["num_tokens"]
    assert len(padded["input_ids"]) == len(padded["position_ids"]) == SEQ_LEN
    assert padded["input_ids"][n:].tolist() == [PAD] * (SEQ_LEN - n)
    tokens = sum(len(g["input_ids"]) for g in got)
    assert meta["tokens"] == tokens and meta["padding_tokens"] == len(got) * SEQ_LEN - tokens
    assert meta["padding_rate"] == meta["padding_tokens"] / (len(got) * SEQ_LEN)
    assert meta["status"] == ("ok" if meta["padding_rate"] <= 1e-4 else "padding_above_target")
    reader = pa.ipc.open_file(pa.memory_map(str(tmp_path / meta["shards"][0]["file"])))
    assert reader.schema.field("input_ids").type == pa.list_(pa.int32(), SEQ_LEN)
    assert reader.schema.metadata[b"seq_len"] == b"64"


def test_ranks_and_workers_split_every_sequence_exactly_once(tmp_path):
    synthetic_shards(tmp_path)
    everything = [g["index"] for g in open_shards(str(tmp_path))]
    parts = [[g["index"] for g in open_shards(str(tmp_path), r, 3, worker_id=w, num_workers=2)]
             for r in range(3) for w in range(2)]
    assert sorted(i for p in parts for i in p) == sorted(everything) and all(parts)
    with pytest.raises(ValueError):
        next(open_shards(str(tmp_path), rank=2, world_size=2))


def test_iterable_dataset_with_two_ranks_and_dataloader_workers(tmp_path):
    synthetic_shards(tmp_path)
    everything = sorted(g["index"] for g in open_shards(str(tmp_path)))
    seen = []
    for rank in range(2):
        ds = ShardDataset(str(tmp_path), rank=rank, world_size=2)
        items = list(ds)
        assert all(x["input_ids"].dtype == torch.int64 and x["cu_seqlens"].dtype == torch.int32 for x in items)
        assert all(int(x["cu_seqlens"][-1]) == len(x["input_ids"]) == len(x["position_ids"]) for x in items)
        via_workers = [x["index"] for x in DataLoader(ds, batch_size=None, num_workers=2)]
        assert sorted(via_workers) == sorted(x["index"] for x in items)
        seen += [x["index"] for x in items]
    assert sorted(seen) == everything


def test_manifest_reports_state():
    empty = manifest("long", 8, 8, INFO, [], status="ok", padding_target=1e-4, chunks=0, documents=0, groups=0,
                     min_group_tokens=1, max_group_padding_rate=0.0, groups_above_target=0, seed=0)
    assert (empty["status"], empty["padding_rate"], empty["sequences"]) == ("empty", 0.0, 0)
    skipped = manifest("long", 8, 8, INFO, [], status="insufficient_tokens", padding_target=1e-4, chunks=0,
                       documents=0, groups=0, min_group_tokens=1, max_group_padding_rate=0.0,
                       groups_above_target=0, seed=0)
    assert skipped["status"] == "insufficient_tokens"


@pytest.mark.parametrize("seq_len", [2048, 8192])
def test_a_group_with_enough_tokens_pads_at_most_1e_4(seq_len):
    """A group holding min_group_tokens (= ceil(2 / 1e-4) * seq_len) of chunked lognormal documents
    (median 900 tokens, sigma 1.2, as the real web-text sample; >= 3 tokens: BOS, text, EOS) reaches
    the padding target. (Below ~2K tokens per sequence it need not: 1-2-token gaps stay empty.)"""
    cfg = PackConfig.model_validate({"phases": {"pretrain": {"seq_len": seq_len}}})
    phase = next(p for p in phases(cfg) if p.name == "pretrain")
    rng = np.random.default_rng(seq_len)
    draws = int(phase.min_group_tokens / 1000)
    docs = np.maximum(3, np.rint(np.exp(rng.normal(np.log(900), 1.2, draws)) * (1 + 0.02 * rng.normal(size=draws))))
    docs = docs.astype(int)[: np.searchsorted(np.cumsum(docs), phase.min_group_tokens) + 1]
    items = [((f"{d:032x}", c), min(seq_len, n - start))
             for d, n in enumerate(docs.tolist()) for c, start in enumerate(range(0, n, seq_len))]
    total = int(docs.sum())
    assert total >= phase.min_group_tokens
    out = list(_PackGroup(seq_len).process((0, items[::-1])))
    (_, sequences, tokens), = [o.value for o in out if getattr(o, "tag", None) == GROUPS]
    packed = [o for o in out if getattr(o, "tag", None) != GROUPS]
    assert tokens == total and len(packed) == sequences
    assert sorted(c for _, _, chunks in packed for c in chunks) == sorted(k for k, _ in items)
    assert (sequences * seq_len - total) / (sequences * seq_len) <= 1e-4


def test_open_shards_on_a_folder_without_shards_says_where_they_are(tmp_path):
    """`open_shards("out/sample")` or `("out/sample/shards")` used to yield nothing; it names the phase
    folders instead. A phase whose manifest lists no shard (too few tokens) is empty, not an error."""
    from packing.shards import MANIFEST, open_shards

    phase = tmp_path / "shards" / "pretrain"
    phase.mkdir(parents=True)
    (phase / MANIFEST).write_text('{"shards": []}')
    assert list(open_shards(str(phase))) == []
    for wrong in (tmp_path, tmp_path / "shards"):
        with pytest.raises(FileNotFoundError, match="phase folders below it: .*pretrain"):
            list(open_shards(str(wrong)))
    with pytest.raises(FileNotFoundError, match="no shards in"):
        list(open_shards(str(tmp_path / "missing")))
