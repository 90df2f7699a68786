"""Stage 3 of the interleaved branch on Beam (dedup/multimodal.py): images whose pHash neighbourhood is
on many documents leave them all, and near-duplicate documents are judged on text and images together."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.image_pairs import PhashConfig
from pipelines.interleaved import ImageAwareDedup, InterleavedDedupConfig

WORDS = ("the river rose after three days of rain and the town council met on monday to decide whether the "
         "old bridge should close while engineers inspect its stone piers for damage caused by the flood").split()


def _phash(bits: int) -> str:
    return f"{bits:016x}"


def _doc(i: int, text: str, images: list[tuple[str, int]], date: str = "2024-01-01") -> dict:
    nodes = [{"type": "text", "text": text}]
    for sha, bits in images:
        nodes += [{"type": "image", "image_sha256": sha, "phash": _phash(bits), "image_url": f"https://x.org/{sha}"},
                  {"type": "text", "text": "caption"}]
    return {"id": f"{i:032x}", "url": f"https://x.org/{i}", "warc_date": date, "nodes": nodes}


def _run(docs: list[dict], tmp_path, max_docs: int = 10) -> dict:
    out = tmp_path / "out.json"

    def save(rows):
        out.write_text(json.dumps(sorted(rows, key=json.dumps)))

    cfg = InterleavedDedupConfig(max_docs_per_image=max_docs, text_threshold=0.5, max_reps=32)
    phash = PhashConfig(threshold=5, bands=8, key_bands=3)
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        kept, dups, drops, counters = p | beam.Create(docs) | ImageAwareDedup(cfg, phash, "earliest_capture")
        ((kept | "K" >> beam.Map(lambda d: ["kept", d["id"], [n.get("image_sha256") for n in d["nodes"]]]),
          dups | "D" >> beam.MapTuple(lambda d, survivor, size: ["dup", d["id"], survivor, size]),
          drops | "X" >> beam.Map(lambda d: ["drop", d["id"], d["reason"]]),
          counters | "S" >> beam.CombinePerKey(sum) | "C" >> beam.Map(lambda kv: ["counter", *kv]))
         | beam.Flatten() | beam.combiners.ToList() | beam.Map(save))
    rows = json.loads(out.read_text())
    return {"kept": {r[1]: [s for s in r[2] if s] for r in rows if r[0] == "kept"},
            "dups": {r[1]: r[2:] for r in rows if r[0] == "dup"},
            "drops": {r[1]: r[2] for r in rows if r[0] == "drop"},
            "counters": {r[1]: r[2] for r in rows if r[0] == "counter"}}


def test_same_figures_under_reworded_text_are_duplicates_and_other_figures_are_not(tmp_path):
    """doc 1 and its rewording with a recompressed copy of the figure (pHash 2 bits away, other sha256)
    are one document; the same text with another figure, and another text with the same figure, are
    not duplicates of it. The earliest capture survives."""
    text = " ".join(WORDS)
    reworded = " ".join(w if i % 4 else "a" for i, w in enumerate(WORDS))  # a quarter of the words changed
    other = "completely different words about cooking pasta with garlic olive oil and fresh basil leaves tonight"
    fig, fig_copy = ("a" * 64, 0x0F0F_0000_FFFF_1234), ("b" * 64, 0x0F0F_0000_FFFF_1237)
    other_fig = ("c" * 64, 0xFFFF_0000_0000_0000)
    docs = [_doc(1, text, [fig]), _doc(2, reworded, [fig_copy], date="2024-02-01"), _doc(3, text, [other_fig]),
            _doc(4, other, [fig])]
    res = _run(docs, tmp_path)
    assert res["dups"] == {f"{2:032x}": [f"{1:032x}", 2]}
    assert sorted(res["kept"]) == [f"{i:032x}" for i in (1, 3, 4)]
    assert res["counters"]["multimodal/clusters"] == 1 and not res["drops"]


def test_an_image_on_too_many_documents_leaves_them_all(tmp_path):
    """One picture (and a resized copy of it, pHash 1 bit away) on 11 documents, over the limit of 10: it
    is removed from every document; those left with no image are `no_images`, the one with another
    image keeps that one. A picture on exactly 10 documents stays."""
    banner, banner_copy = ("d" * 64, 0x1234_5678_9ABC_DEF0), ("e" * 64, 0x1234_5678_9ABC_DEF1)
    figure = ("f" * 64, 0x0000_FFFF_0000_FFFF)
    docs = [_doc(i, f"story {i} about topic{i} item{i} place{i} person{i}", [banner_copy if i == 5 else banner])
            for i in range(10)]  # different texts: no two are duplicates
    docs.append(_doc(10, "a story with a figure of its own " + " ".join(WORDS[20:]), [banner, figure]))
    res = _run(docs, tmp_path)
    assert res["drops"] == {f"{i:032x}": "no_images" for i in range(10)}
    assert res["kept"] == {f"{10:032x}": [figure[0]]}
    assert res["counters"]["images/frequent_image"] == 11  # one per document it left
    res = _run(docs[:10], tmp_path)
    assert not res["drops"] and len(res["kept"]) == 10


def test_a_near_copy_of_an_image_the_document_already_shows_is_removed(tmp_path):
    """A thumbnail of a figure (pHash 1 bit away, other bytes) after the figure on the same page: the
    later copy leaves, the text around it joins; a different image stays."""
    fig, thumb = ("a" * 64, 0x0F0F_0000_FFFF_1234), ("b" * 64, 0x0F0F_0000_FFFF_1235)
    other = ("c" * 64, 0xFFFF_0000_0000_0000)
    res = _run([_doc(1, " ".join(WORDS), [fig, thumb, other])], tmp_path)
    assert res["kept"] == {f"{1:032x}": [fig[0], other[0]]}
    assert res["counters"]["images/repeated_in_doc_near"] == 1
