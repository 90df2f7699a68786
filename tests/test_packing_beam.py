"""The shard stage as Beam pipelines (packing/transforms.py) on real documents: exact tokens back from
the reader, boundaries, no chunk twice per phase, reported states, byte-identical shards for 1 and 2
worker processes, and the padding target reached once groups hold enough tokens."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from packing import ShardDataset, open_shards
from packing.config import PackConfig, phases
from packing.tokenizer import DocTokenizer
from packing.transforms import BuildShards, PackAndWrite
from pipelines.config import config_model
from tests.test_packing_chunk import real_docs

# A 1M phase the 17k-token corpus cannot fill sits next to two small ones: it must be reported, not crash.
CFG = PackConfig.model_validate({"phases": {"pretrain": {"seq_len": 256}, "long": {"seq_len": 1024},
                                            "huge": {"seq_len": 1 << 20, "share": 5}},
                                 "shard_tokens": 2048, "seed": 3})


def write_counters(pairs, path: str) -> None:
    Path(path).write_text(json.dumps(dict(pairs), sort_keys=True))


def run_pipeline(build, workers: int, counters: Path) -> dict:
    """Run `build(p)` (-> counters) on FnApiRunner, in-process or in `workers` processes."""
    args = ["--runner=FnApiRunner"]
    if workers > 1:
        args += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        (build(p) | "Sum" >> beam.CombinePerKey(sum) | "All" >> beam.combiners.ToList()
         | "Keep" >> beam.Map(write_counters, str(counters)))
    return json.loads(counters.read_text())


def build_shards(out: Path, workers: int, docs: list[dict]) -> dict:
    return run_pipeline(lambda p: (p | beam.Create(docs) | BuildShards(CFG, str(out / "shards"))).counters, workers,
                        out / "counters.json")


@pytest.fixture(scope="module")
def docs():
    return real_docs()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, docs):
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    return (one / "shards", build_shards(one, 1, docs)), (two / "shards", build_shards(two, 2, docs))


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_one_and_two_workers_write_byte_identical_shards(runs):
    (one, c1), (two, c2) = runs
    f1, f2 = files(one), files(two)
    assert sorted(f1) == sorted(f2) and f1 == f2 and c1 == c2
    assert sum(name.endswith(".arrow") for name in f1) >= 4
    assert {name.split("/")[0] for name in f1} == {"pretrain", "long", "huge", "manifest.json"}
    run = json.loads(f1["manifest.json"])
    assert run["status"] == "no_multimodal" and run["tokens_by_modality"]["multimodal"] == 0
    assert run["tokens_by_modality"]["text"] == sum(run["phases"][p]["tokens"] for p in run["phases"])


def test_reader_returns_exactly_the_tokens_of_every_document(runs, docs):
    (out, _), _ = runs
    tok = DocTokenizer()
    by_id = {d["id"]: d["text"] for d in docs}
    seen_docs: dict[str, str] = {}
    for phase in ("pretrain", "long"):
        pieces = defaultdict(dict)
        for item in open_shards(str(out / phase)):
            cu = item["cu_seqlens"]
            assert cu[0] == 0 and cu[-1] == item["num_tokens"] == len(item["input_ids"]) <= 1024
            assert len(cu) == len(item["doc_ids"]) + 1 == len(item["chunk_index"]) + 1
            for k, (doc, index) in enumerate(zip(item["doc_ids"], item["chunk_index"])):
                assert index not in pieces[doc], f"chunk {(doc, index)} twice in phase {phase}"
                pieces[doc][index] = item["input_ids"][cu[k]:cu[k + 1]].tolist()
                assert item["position_ids"][cu[k]:cu[k + 1]].tolist() == list(range(cu[k + 1] - cu[k]))
        for doc, chunks in pieces.items():
            assert sorted(chunks) == list(range(len(chunks)))
            joined = [t for i in range(len(chunks)) for t in chunks[i]]
            assert joined == tok.encode(by_id[doc]).tolist()  # [BOS] + text tokens + [EOS]
            assert all(len(c) <= (256 if phase == "pretrain" else 1024) for c in chunks.values())
            assert doc not in seen_docs  # default allocation: each document in exactly one phase
            seen_docs[doc] = phase
    assert set(seen_docs) == set(by_id)
    assert any(len(p) > 1 for p in pieces.values())  # over-long documents were chunked


def test_manifests_and_counters_report_every_phase(runs, docs):
    (out, counters), _ = runs
    for phase in ("pretrain", "long"):
        meta = json.loads((out / phase / "manifest.json").read_text())
        items = list(open_shards(str(out / phase)))
        tokens = sum(len(i["input_ids"]) for i in items)
        assert meta["sequences"] == len(items) == counters[f"pack/{phase}/sequences"]
        assert meta["tokens"] == tokens == counters[f"pack/{phase}/tokens"] == counters[f"phase/{phase}/tokens"]
        assert meta["padding_tokens"] == len(items) * meta["seq_len"] - tokens
        assert meta["padding_rate"] == pytest.approx(meta["padding_tokens"] / (len(items) * meta["seq_len"]))
        assert meta["groups"] == 1 and meta["status"] == ("ok" if meta["padding_rate"] <= 1e-4 else "insufficient_tokens")
        assert meta["tokenizer"]["name"] == "deepseek-v3" and len(meta["tokenizer"]["sha256"]) == 64
        counts = [s["sequences"] for s in meta["shards"]]
        assert sum(counts) == len(items) and max(counts) - min(counts) <= 1
        assert sorted(i["index"] for i in items) == list(range(len(items)))
        assert [i["index"] for i in items] == sorted(i["index"] for i in items)  # rows in training order
        assert meta["allocation"]["shared_docs"] == 0 and meta["allocation"]["corpus_docs"] == len(docs)
    total = counters["tokenize/tokens"]
    assert counters["phase/long/tokens"] / total == pytest.approx(11 / 45, abs=0.1)
    assert counters["tokenize/docs"] == len(docs)
    huge = json.loads((out / "huge" / "manifest.json").read_text())
    assert huge["status"] == "insufficient_tokens" and huge["sequences"] == 0 and huge["shards"] == []
    assert "needed" in huge["status_detail"] and huge["allocation"]["needed_tokens"] == 1 << 20
    assert counters["pack/huge/status:insufficient_tokens"] == 1


def test_iterable_dataset_with_two_ranks_covers_every_sequence_once(runs):
    (out, _), _ = runs
    everything = [i["index"] for i in open_shards(str(out / "pretrain"))]
    ranks = [[int(x["index"]) for x in ShardDataset(str(out / "pretrain"), rank=r, world_size=2)] for r in range(2)]
    assert sorted(ranks[0] + ranks[1]) == sorted(everything) and abs(len(ranks[0]) - len(ranks[1])) <= 1


def test_groups_with_enough_tokens_reach_the_padding_target(tmp_path):
    """Synthetic chunks at seq_len 16 and a 2e-3 target (min_group_tokens = 1000 * 16): the total is
    counted by a Combine, split into groups of >= min_group_tokens, and every group meets the target."""
    target = 2e-3
    cfg = PackConfig.model_validate({"phases": {"pretrain": {"seq_len": 16}}, "padding_target": target,
                                     "shard_tokens": 1 << 13})
    phase = next(p for p in phases(cfg) if p.name == "pretrain")
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(np.exp(rng.normal(1.6, 0.8, 6500))), 1, 16).astype(int)
    assert lengths.sum() >= 2 * phase.min_group_tokens
    chunks = [{"doc_id": f"{i:032x}", "epoch": 0, "chunk": 0, "length": int(n), "modality": "text", "images": (),
               "ids": np.arange(n, dtype="<u4").tobytes()} for i, n in enumerate(lengths)]
    info = {"name": "t", "sha256": "0" * 64, "vocab_size": 16, "bos_id": 0, "eos_id": 1, "pad_id": 2,
            "add_bos": False, "add_eos": False}
    counters = run_pipeline(lambda p: (p | beam.Create(chunks) | PackAndWrite(cfg, str(tmp_path / "s"), phase, info)).counters,
                            1, tmp_path / "counters.json")
    assert counters["pack/pretrain/groups"] == lengths.sum() // phase.min_group_tokens >= 2
    assert counters["pack/pretrain/groups_above_target"] == 0
    assert counters["pack/pretrain/max_group_padding_rate"] <= target
    assert counters["pack/pretrain/tokens"] == lengths.sum() and counters["pack/pretrain/status:ok"] == 1
    meta = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert meta["padding_rate"] <= target and len(meta["shards"]) > 1


def test_pack_stage_writes_a_drop_row_for_a_document_without_tokens(tmp_path):
    """The pack stage's `no_tokens` drops are rows of OUT/dropped/pack like every stage's, and its
    `out` counts the documents that went into the shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import io
    from pipelines.registry import STAGES

    docs = [{"id": "0" * 32, "url": "u", "warc_file": "f", "warc_offset": 0, "warc_date": "", "text": "",
             "scores": {}},
            {"id": "1" * 32, "url": "v", "warc_file": "f", "warc_offset": 1, "warc_date": "",
             "text": "A sentence with some tokens in it.", "scores": {}}]
    cfg = config_model()(pack={"phases": {"pretrain": {"seq_len": 64}}}, stages=["write", "pack"], write_dropped=False)
    out = tmp_path / "out.json"
    text = tmp_path / "docs" / "text"
    text.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{**d, "charset": "utf-8", "lang": "en", "lang_score": 1.0, "scores": []}
                                         for d in docs], schema=io.DOC_SCHEMA), text / "part-0.parquet")

    def collect(rows):
        out.write_text(json.dumps(rows, sort_keys=True, default=str))

    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        built = STAGES["pack"].build(p, cfg, None, str(tmp_path))
        drops, counters = built.drops, built.counters
        sums = counters | beam.CombinePerKey(sum) | "Dict" >> beam.combiners.ToDict()
        ((drops | "Drops" >> beam.combiners.ToList(), sums) | beam.Flatten() | "Both" >> beam.combiners.ToList()
         | beam.Map(collect))
    drops_list, sums = sorted(json.loads(out.read_text()), key=lambda v: isinstance(v, dict))
    assert [(d["id"], d["stage"], d["reason"]) for d in drops_list] == [("0" * 32, "pack", "no_tokens")]
    assert sums["out"] == 1 and sums["tokenize/docs"] == 1
