"""The shard stage on text, interleaved and pair samples together (packing/transforms.py BuildShards):
twins replaced, the exact ratio, image spans that are whole and point at their images, every epoch
copy's tokens back exactly, byte-identical shards for 1 and 2 worker processes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest

from packing import open_shards
from packing.config import PackConfig
from packing.samples import encode_samples, sample_parts
from packing.tokenizer import DocTokenizer
from packing.transforms import BuildShards, ShardInputs
from packing.vision import VisionPolicy
from tests.test_packing_beam import files, run_pipeline
from tests.test_packing_chunk import real_docs

CFG = PackConfig.model_validate({
    "phases": {"pretrain": {"seq_len": 2048, "chunk_tokens": 1300}, "long": {"seq_len": 8192}},
    "shard_tokens": 8192, "chunk_window": 64, "seed": 1,
    "mix": {"epochs": {"text": 1.0, "interleaved": 1.0, "pair": 1.0}, "text_to_multimodal": 7.0}})
SIDES = [(544, 544), (800, 600), (1344, 700), (600, 1100)]


def corpus():
    """Real texts; four interleaved documents share a capture id with a text document (twins), one is
    the capture a text document's exact-dup cluster holds, one has no twin; three pairs."""
    texts = real_docs()
    text_docs = [{"id": d["id"], "url": f"http://t/{i}", "text": d["text"]} for i, d in enumerate(texts)]
    inter = []
    for k, d in enumerate(texts[:6]):
        paragraphs = [p for p in d["text"].split("\n") if p.strip()]
        nodes = []
        for j, para in enumerate(paragraphs):
            nodes.append({"type": "text", "text": para})
            if j in (0, len(paragraphs) // 2):
                w, h = SIDES[(k + j) % len(SIDES)]
                nodes.append({"type": "image", "text": None, "image_sha256": f"{k:02d}{j:062d}", "width": w, "height": h})
        doc_id = d["id"] if k < 4 else f"{k:032x}"  # 0-3 same capture; 4 a cluster member; 5 no twin
        inter.append({"id": doc_id, "url": f"http://i/{k}", "nodes": nodes})
    member_of = [{"id": inter[4]["id"], "detail": texts[10]["id"], "reason": "exact_duplicate"}]
    pairs = [{"id": f"p{k}", "page_url": "http://p", "img_url": f"http://p/{k}.jpg", "image_sha256": f"{k:064x}",
              "width": 500 + 100 * k, "height": 400, "alt": f"a photo of thing number {k} on a table"} for k in range(3)]
    return text_docs, inter, pairs, member_of


def build(out: Path, workers: int, cfg=CFG) -> dict:
    text, inter, pairs, members = corpus()

    def graph(p):
        extra = ShardInputs(p | "I" >> beam.Create(inter), p | "P" >> beam.Create(pairs),
                            (p | "M" >> beam.Create(members),))
        res = p | "T" >> beam.Create(text) | BuildShards(cfg, str(out / "shards"), extra)
        drops = res.dropped | beam.Map(lambda d: (f"drop/{d[2]}/{d[0]['id']}", d[3]))
        return (res.counters, drops | "AsCount" >> beam.MapTuple(lambda k, v: (f"{k}={v}", 1))) | beam.Flatten()
    return run_pipeline(graph, workers, out / "counters.json")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    one, two = tmp_path_factory.mktemp("mm1"), tmp_path_factory.mktemp("mm2")
    return (one, build(one, 1)), (two, build(two, 2))


def test_one_and_two_workers_write_byte_identical_multimodal_shards(runs):
    (one, c1), (two, c2) = runs
    f1, f2 = files(one / "shards"), files(two / "shards")
    assert f1 == f2 and c1 == c2 and any(name.endswith(".arrow") for name in f1)


def test_text_twins_are_replaced_by_their_multimodal_version(runs):
    (one, counters), _ = runs
    text, inter, _, _ = corpus()
    replaced = {k.split("/")[2].split("=")[0]: k.split("=", 1)[1] for k in counters
                if k.startswith("drop/replaced_by_multimodal/")}
    expected = {t["id"]: t["id"] for t in text[:4]} | {text[10]["id"]: inter[4]["id"]}
    assert replaced == expected
    assert counters["mix/replaced_by_multimodal"] == 5 and counters["mix/multimodal_with_twin"] == 5
    assert counters["tokenize/text/docs"] == len(text) and counters["tokenize/interleaved/docs"] == 6
    assert counters["mix/text/copies"] >= len(text) - 5


def test_the_run_manifest_holds_the_ratio_within_half_a_sample(runs):
    (one, counters), _ = runs
    run = json.loads((one / "shards" / "manifest.json").read_text())
    tokens, group = run["tokens_by_modality"], run["balanced_group"]
    assert run["status"] == "ok" and group == "text" and run["epoch_multipliers"]["text"] > 1
    assert tokens["multimodal"] == tokens["pair"] + tokens["interleaved"] > 0
    assert abs(tokens["text"] - 7 * tokens["multimodal"]) == abs(run["ratio_error_tokens"])
    assert abs(run["ratio_error_tokens"]) <= run["largest_sample_tokens"]["text"] / 2
    assert tokens["text"] == counters["mix/text/tokens"]
    phases = run["phases"].values()
    assert sum(p["tokens"] for p in phases) == tokens["text"] + tokens["multimodal"]  # budget null: all, once
    for name, p in run["phases"].items():
        meta = json.loads((one / "shards" / name / "manifest.json").read_text())
        assert meta["tokens_by_modality"] == p["tokens_by_modality"] and meta["image_token_id"] == 129279
        assert meta["epoch_multipliers"] == run["epoch_multipliers"]


def test_every_copy_reads_back_as_its_sample_with_whole_image_spans(runs):
    """Segments grouped by (document, epoch copy), chunks in order, give exactly tokens(sample); every
    image span lies inside one segment, holds only the placeholder id, and names the sample's image."""
    (one, _), _ = runs
    text, inter, pairs, _ = corpus()
    tok = DocTokenizer()
    image_id = tok.info.image_id
    samples = {d["id"]: sample_parts(d, "text", VisionPolicy()) for d in text}
    samples.update({d["id"]: sample_parts(d, "interleaved", VisionPolicy()) for d in inter})
    samples.update({d["id"]: sample_parts(d, "pair", VisionPolicy()) for d in pairs})
    pieces, spans = defaultdict(list), defaultdict(list)
    for phase in ("pretrain", "long"):
        chunk_limit = 1300 if phase == "pretrain" else 8192
        for item in open_shards(str(one / "shards" / phase)):
            cu, ids = item["cu_seqlens"], item["input_ids"]
            for span in item["images"]:
                a, b = span["pos"], span["pos"] + span["tokens"]
                seg = int(np.searchsorted(cu, a, side="right")) - 1
                assert b <= cu[seg + 1] and (ids[a:b] == image_id).all()
                assert span["tokens"] == (span["height"] // 28) * (span["width"] // 28)
                spans[(item["doc_ids"][seg], item["epoch"][seg])].append(span["sha256"])
            assert int((ids == image_id).sum()) == sum(s["tokens"] for s in item["images"])
            for k, (doc, chunk, epoch) in enumerate(zip(item["doc_ids"], item["chunk_index"], item["epoch"])):
                assert cu[k + 1] - cu[k] <= chunk_limit
                pieces[(doc, epoch)].append((chunk, ids[cu[k]:cu[k + 1]].tolist()))
    copies = defaultdict(int)
    for (doc, epoch), chunks in pieces.items():
        copies[doc] += 1
        enc = encode_samples(tok, [samples[doc]], image_id)[0]
        assert [c for c, _ in sorted(chunks)] == list(range(len(chunks)))
        assert sum((ids for _, ids in sorted(chunks)), []) == enc.ids.tolist(), doc
        assert sorted(spans[(doc, epoch)]) == sorted(sha for *_, sha, _, _ in enc.images)
    assert all(sorted(range(copies[d])) == sorted(e for dd, e in pieces if dd == d) for d in copies)
    assert any(n > 1 for n in copies.values())  # the text set was repeated to reach 7 : 1
    assert all(copies[d["id"]] == 1 for d in inter + pairs)


def test_a_short_multimodal_set_is_repeated_and_a_cap_is_reported(tmp_path):
    """At a 1 : 2 target the multimodal set needs more epochs than max_epochs allows: capped, counted,
    and the manifest says ratio_unreachable. (With 1,024-token chunks the 1,200-token image of one
    interleaved document cannot be placed: it is dropped, and its text twin stays.)"""
    cfg = PackConfig.model_validate({"phases": {"pretrain": {"seq_len": 1024}}, "shard_tokens": 8192,
                                     "mix": {"text_to_multimodal": 0.5, "max_epochs": 2.0}})
    counters = build(tmp_path, 1, cfg)
    run = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert run["status"] == "ratio_unreachable" and "max_epochs" in run["status_detail"]
    assert run["epoch_multipliers"] == {"text": 1.0, "multimodal": 2.0} and counters["mix/status:ratio_unreachable"] == 1
    too_long = {k.split("/")[2].split("=")[0] for k in counters if k.startswith("drop/image_block_too_long/")}
    survivors = {k.split("=", 1)[1] for k in counters if k.startswith("drop/replaced_by_multimodal/")}
    assert too_long and not too_long & survivors and len(too_long) + len(survivors) == 5  # 5 had a text twin
    assert counters["mix/interleaved/copies"] == 2 * (6 - len(too_long)) and counters["mix/pair/copies"] == 2 * 3


def test_a_multimodal_twin_takes_the_larger_epoch_count_rehydration_included(tmp_path):
    """No balancing; text 2 epochs, interleaved 1, and a cluster of 2 triples its survivor's epochs
    (rehydration): the same-capture twins go in twice, the twin of the clustered text document three
    times, the interleaved document without a twin once, every other text document twice."""
    cfg = PackConfig.model_validate({"phases": {"pretrain": {"seq_len": 2048}}, "shard_tokens": 1 << 16,
                                     "mix": {"epochs": {"text": 2.0, "interleaved": 1.0}, "rehydrate": {2: 1.5},
                                             "text_to_multimodal": None}})
    counters = build(tmp_path, 1, cfg)
    text, inter, pairs, _ = corpus()
    copies = defaultdict(set)
    for item in open_shards(str(tmp_path / "shards" / "pretrain")):
        for doc, epoch in zip(item["doc_ids"], item["epoch"]):
            copies[doc].add(epoch)
    assert {d["id"]: len(copies[d["id"]]) for d in inter} == {
        **{d["id"]: 2 for d in inter[:4]}, inter[4]["id"]: 3, inter[5]["id"]: 1}
    assert all(len(copies[d["id"]]) == 2 for d in text[4:] if d is not text[10]) and text[10]["id"] not in copies
    assert all(len(copies[p["id"]]) == 1 for p in pairs)
    run = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert run["status"] == "off" and run["epoch_multipliers"] == {"text": 1.0, "multimodal": 1.0}
    assert counters["mix/status:off"] == 1
