"""Interleaved documents from web pages: DOM linearisation on real pages (order, captions, lists,
tables, chrome), the URL rules of the interleaved branch, and the visual-token count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extract.images import ImageRef, check_image_url
from extract.interleaved import linearise
from packing.vision import VisionPolicy, fitted_size, visual_tokens

DATA = Path(__file__).parent / "data" / "interleaved"
PAGES = {p["file"]: p for p in json.loads((DATA / "labels.json").read_text())}


def page(name: str):
    p = PAGES[name]
    return linearise((DATA / name).read_text(encoding="utf-8"), p["url"]), p


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_img_is_a_node_or_chrome_in_labelled_dom_order(name):
    doc, label = page(name)
    kept = [n.image.url for n in doc.images]
    positions = sorted(n.image.position for n in doc.images) + [r.position for r in doc.chrome_images]
    assert sorted(positions) == list(range(len(label["image_urls"])))  # each <img> exactly once
    assert [n.image.position for n in doc.images] == sorted(n.image.position for n in doc.images)
    assert kept == [label["image_urls"][n.image.position] for n in doc.images]  # the labelled URLs, in order
    assert doc.nodes[0].type == "text" and all(n.text.strip() for n in doc.nodes if n.type == "text")
    assert not any(a.type == b.type == "text" for a, b in zip(doc.nodes, doc.nodes[1:]))  # an image splits text


def test_figures_keep_their_captions_and_the_text_around_them():
    doc, _ = page("qa-indic-graphemes.en.html")
    first = doc.images[0]
    assert first.image.url.endswith("qa-indic-graphemes-data/ra.png") and first.image.alt == "റ = ra"
    assert first.caption.startswith("The glyph used for the consonant 'r' in Malayalam")
    i = doc.nodes.index(first)
    before = doc.nodes[i - 1].text
    assert "the following:\n- line breaking & hyphenation\n- letter spacing & justification\n" in before
    assert before.endswith("there can be different sounds in different contexts.")
    assert doc.nodes[i + 1].text.startswith("The glyph used for the consonant 'r' in Malayalam")  # the caption text
    assert sum(1 for n in doc.images if n.caption) == 13


def test_lists_tables_and_side_notes_are_content():
    doc, _ = page("qa-html-dir.html")
    assert "- " in doc.text and " | " in doc.text  # list items and table cells survive as text
    icons = [n.image for n in doc.images if "/icons/" in n.image.url]  # the browser-support side note's
    assert [r.url.rsplit("/", 1)[-1] for r in icons] == [
        "firefox_16x16.png", "chrome_16x16.png", "safari_16x16.png", "edge_16x16.png", "ok.png"]
    assert {check_image_url(r, 150, chrome_words=True) for r in icons} == {"icon_or_sprite"}
    names, _ = page("qa-personal-names.en.html")
    assert [n.image.url.rsplit("/", 1)[-1] for n in names.images] == ["firstmlast.png", "circles.png"]  # <aside>
    wiki, _ = page("wikipedia-main-page-2012.html")
    assert [r.url.split("/")[-1] for r in wiki.chrome_images] == ["search-ltr.png?303-4"]  # the header's


def test_deep_nesting_does_not_recurse():
    html = "<div>" * 50_000 + "deep<img src='a.png' width=300 height=300>" + "</div>" * 50_000
    doc = linearise(html, "https://example.org/")
    assert [n.type for n in doc.nodes] == ["text", "image"] and doc.nodes[0].text == "deep"


def test_hidden_and_scripted_content_is_not_text():
    html = ("<p>kept</p><div hidden><img src=h.png>hidden text</div><p style='display: none'>gone</p>"
            "<script>var x = 1;</script><nav><img src=logo.png>Home</nav><p aria-hidden=true>no</p>")
    doc = linearise(html, "https://example.org/")
    assert doc.text == "kept" and [r.url.rsplit("/", 1)[-1] for r in doc.chrome_images] == ["h.png", "logo.png"]


def test_url_rules_need_no_pixels():
    def ref(url, w=None, h=None):
        return ImageRef("https://p.org/", url, "alt", w, h, 0, "", "")

    assert check_image_url(ref("data:image/png;base64,AAAA"), 150) == "data_uri"
    assert check_image_url(ref("https://p.org/px.gif", 1, 1), 150) == "tracking_pixel"
    assert check_image_url(ref("https://p.org/img/site-logo.png"), 150, chrome_words=True) == "banned_url"
    assert check_image_url(ref("https://p.org/img/site-logo.png"), 150) is None  # the pairs branch's rules
    assert check_image_url(ref("https://p.org/avatars/u1.jpg"), 150, chrome_words=True) == "banned_url"
    assert check_image_url(ref("https://p.org/commas_in_ad.png"), 150, chrome_words=True) is None  # a word, not "ads"
    assert check_image_url(ref("https://p.org/icons/x.png"), 150) == "icon_or_sprite"
    assert check_image_url(ref("https://p.org/fig.png", 100, 400), 150) == "declared_too_small"
    assert check_image_url(ref("https://p.org/fig.png", 400, 300), 150) is None


def test_url_rules_on_the_labelled_pages():
    """Icons the labels call logo_icon are mostly stopped by URL and declared size before any byte is
    fetched; photos and figures pass unless declared small."""
    stopped = {"logo_icon": 0, "other": 0}
    total = {"logo_icon": 0, "other": 0}
    for name, label in PAGES.items():
        doc, _ = page(name)
        for n in doc.images:
            kind = "logo_icon" if label["kinds"][n.image.position] == "logo_icon" else "other"
            total[kind] += 1
            stopped[kind] += check_image_url(n.image, 150, chrome_words=True) is not None
    assert stopped["logo_icon"] / total["logo_icon"] >= 0.6 and stopped["other"] / total["other"] <= 0.35, (
        stopped, total)


@pytest.mark.parametrize("w, h, size, tokens", [
    (1344, 1344, (1344, 1344), 48 * 48),
    (2688, 1344, (1344, 672), 48 * 24),     # scaled down: the longer side at max_side
    (100, 100, (532, 532), 19 * 19),        # scaled up to min_side 544, snapped to 28
    (300, 3000, (140, 1344), 5 * 48),       # extreme aspect: the longer side bounds the sequence
    (800, 600, (812, 588), 29 * 21),        # within the bounds: only snapped to multiples of 28
])
def test_visual_tokens_follow_the_vision_policy(w, h, size, tokens):
    assert fitted_size(w, h) == size and visual_tokens(w, h) == tokens


def test_visual_tokens_merge_is_configurable():
    assert visual_tokens(1344, 1344, VisionPolicy(merge=1)) == 96 * 96
    with pytest.raises(ValueError):
        visual_tokens(0, 10)


def test_frequent_image_urls_are_split_off_on_a_beam_run(tmp_path):
    """A URL on more than max_pages distinct documents is chrome; a page repeating an image counts once;
    every ref comes out exactly once, kept or frequent."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from dedup.image import SplitFrequentImageUrls

    refs = [(f"doc{d}", {"url": "https://s.org/logo.png", "position": 0}) for d in range(12)]
    refs += [("doc0", {"url": "https://s.org/fig.png", "position": p}) for p in (1, 2, 3)]  # 3 uses, 1 page
    refs += [(f"doc{d}", {"url": "https://s.org/shared.png", "position": 5}) for d in range(10)]  # exactly 10
    out = tmp_path / "out.json"

    def save(rows):
        out.write_text(json.dumps(rows, sort_keys=True))

    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        res = p | beam.Create(refs) | SplitFrequentImageUrls(max_pages=10)
        ((res.kept | "K" >> beam.Map(lambda r: ["kept", r[0], r[1]["url"], r[1]["position"], 0]),
          res.frequent | "F" >> beam.Map(lambda r: ["frequent", r[0][0], r[0][1]["url"], r[0][1]["position"], r[1]]))
         | beam.Flatten() | beam.combiners.ToList() | beam.Map(lambda rows: save(sorted(rows))))
    rows = json.loads(out.read_text())
    assert len(rows) == len(refs)
    assert {r[2] for r in rows if r[0] == "frequent"} == {"https://s.org/logo.png"}
    assert all(r[4] == 12 for r in rows if r[0] == "frequent") and sum(r[0] == "frequent" for r in rows) == 12
    assert sum(1 for r in rows if r[0] == "kept" and r[2].endswith("fig.png")) == 3


def _build(workers: int, out: Path, max_pages: int = 10, copies: tuple[str, ...] = ()) -> dict:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.interleaved import BuildInterleavedDocs, InterleavedConfig

    pages = [{"id": f"{i:032x}", "url": p["url"], "warc_file": "f.warc.gz", "warc_offset": i, "warc_date": "",
              "html": (DATA / name).read_text(encoding="utf-8")} for i, (name, p) in enumerate(sorted(PAGES.items()))]
    pages.append({"id": "f" * 32, "url": "https://example.org/", "warc_file": "f.warc.gz", "warc_offset": 99,
                  "warc_date": "", "html": "<p>Only text here.</p><img src='https://example.org/site-logo.png'>"})
    for i, name in enumerate(copies):  # the same page captured again (another record)
        pages.append({**next(p for p in pages if p["url"] == PAGES[name]["url"]), "id": f"c{i:031x}",
                      "warc_offset": 100 + i})
    args = ["--runner=FnApiRunner"]
    if workers > 1:
        args += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]

    def save(rows):
        out.write_text(json.dumps(sorted(rows, key=json.dumps), sort_keys=True))

    with beam.Pipeline(options=PipelineOptions(args)) as p:
        res = p | beam.Create(pages) | BuildInterleavedDocs(InterleavedConfig(max_pages_per_url=max_pages))
        drops = res.dropped | "Drops" >> beam.Flatten()
        ((res.docs | "D" >> beam.Map(lambda d: ["doc", d]), drops | "X" >> beam.Map(lambda d: ["drop", d]),
          res.counters | "C" >> beam.Map(lambda c: ["counter", c]))
         | beam.Flatten() | beam.combiners.ToList() | beam.Map(save))
    rows = json.loads(out.read_text())
    return {"docs": {d["url"]: d for kind, d in rows if kind == "doc"},
            "drops": [d for kind, d in rows if kind == "drop"],
            "counters": dict(c for kind, c in rows if kind == "counter"), "raw": out.read_bytes()}


def test_stage_one_documents_on_a_beam_run(tmp_path):
    """Real pages: image nodes in labelled DOM order, icons and chrome gone, a text-only page dropped as
    no_images, per-document and per-image accounting exact, 1 and 2 workers byte-identical."""
    one = _build(1, tmp_path / "one.json")
    two = _build(2, tmp_path / "two.json")
    assert one["raw"] == two["raw"]
    c = one["counters"]
    assert c["in"] == len(PAGES) + 1 == c["out"] + c.get("dropped/no_images", 0)
    assert [d["url"] for d in one["drops"]] == ["https://example.org/"] and one["drops"][0]["reason"] == "no_images"
    assert one["drops"][0]["text"] == ""  # no image passed the URL rules: its text is the text branch's only
    removed = sum(n for k, n in c.items() if k.startswith("images/") and k not in ("images/in", "images/kept"))
    assert c["images/in"] == c["images/kept"] + removed
    for name, label in PAGES.items():
        doc = one["docs"][label["url"]]
        urls = [n["image_url"] for n in doc["nodes"] if n["type"] == "image"]
        it = iter(label["image_urls"])
        assert all(u in it for u in urls), name  # a subsequence of the labelled DOM order
        kinds = {u: k for u, k in zip(label["image_urls"], label["kinds"])}
        assert all(kinds[u] != "logo_icon" or "thumb" in u for u in urls), (name, [u for u in urls
                                                                                 if kinds[u] == "logo_icon"])
        assert doc["kind"] == "web" and doc["nodes"][0]["type"] == "text"
    indic = one["docs"][PAGES["qa-indic-graphemes.en.html"]["url"]]
    assert sum(1 for n in indic["nodes"] if n["type"] == "image" and n["caption"]) == 13


def test_a_url_on_many_documents_is_chrome(tmp_path):
    """With max_pages_per_url 1, the images of a page captured twice are on two documents: removed from
    both, which are then text only (`no_images`); other pages keep theirs."""
    res = _build(1, tmp_path / "out.json", max_pages=1, copies=("qa-indic-graphemes.en.html",))
    c = res["counters"]
    assert c["images/frequent_url"] == 2 * 13 and c["dropped/no_images"] == 3
    # a page whose images were all frequent is dropped with its text, which the URL rule saw
    dropped = {d["url"]: d for d in res["drops"]}
    assert "Unicode code point" in dropped[PAGES["qa-indic-graphemes.en.html"]["url"]]["text"]
    assert PAGES["qa-indic-graphemes.en.html"]["url"] not in res["docs"] and len(res["docs"]) == len(PAGES) - 1


INTERLEAVED = ["interleaved", "interleaved_text", "interleaved_exact_dedup", "interleaved_near_dedup",
               "interleaved_images", "interleaved_dedup", "interleaved_vlm", "interleaved_write"]


def _run_branch(warc: Path, out: Path, workers: int, also: tuple[str, ...] = (), **sections) -> dict:
    from pipelines.config import load_config
    from pipelines.run import run

    tiny = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
    cfg = load_config(tiny, input=[str(warc)], output=str(out), workers=workers, **sections)
    # the branch reads the input itself
    summary = run(cfg.model_copy(update={"stages": INTERLEAVED + list(also)}), echo=False)
    stages = {s["stage"]: s for s in summary["stages"]}
    for a, b in zip(INTERLEAVED, INTERLEAVED[1:]):
        assert stages[b]["in"] == stages[a]["out"], b
    for name in INTERLEAVED + list(also):
        s = stages[name]
        assert s["in"] == s["out"] + sum(s["dropped"].values()), name
    return stages


def _rows(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return [row for path in sorted(folder.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def test_interleaved_stage_one_in_a_run(tmp_path):
    """The labelled pages as a WARC through `run` (the interleaved stages, one pipeline): `in` = the
    HTML pages; after stage 1 (text verdicts and dedup included), image nodes in labelled DOM order,
    no logo or icon; the WARC holds no image responses, so stage 2 drops every document as
    `no_images`, each image counted `not_in_warc`."""
    from tests.warc_factory import gz, response_record

    warc = tmp_path / "pages.warc.gz"
    records = [response_record(p["url"], (DATA / name).read_bytes()) for name, p in sorted(PAGES.items())]
    records.append(response_record("https://example.org/", b"<html><body><p>Only text here, nothing else.</p>"
                                                           b"<img src='https://example.org/site-logo.png'></body></html>"))
    warc.write_bytes(b"".join(gz(r) for r in records))
    stages = _run_branch(warc, tmp_path / "out", 1)
    assert stages["interleaved"]["in"] == len(records) and stages["interleaved"]["dropped"] == {"no_images": 1}
    docs = _rows(tmp_path / "out" / "interleaved_near_dedup")  # stage 1's documents, where stage 2 resumes
    assert len(docs) == stages["interleaved_near_dedup"]["out"] > 0
    by_url = {p["url"]: p for p in PAGES.values()}
    for doc in docs:
        label = by_url[doc["url"]]
        urls = [n["image_url"] for n in doc["nodes"] if n["type"] == "image"]
        it = iter(label["image_urls"])
        assert urls and all(u in it for u in urls), doc["url"]
        kinds = dict(zip(label["image_urls"], label["kinds"]))
        assert not [u for u in urls if kinds[u] == "logo_icon" and "thumb" not in u]
        assert doc["kind"] == "web" and doc["lang"] and dict(doc["scores"])["gopher_word_count"] > 0
    image_nodes = sum(1 for d in docs for n in d["nodes"] if n["type"] == "image")
    assert stages["interleaved_images"]["dropped"] == {"no_images": len(docs)}
    assert stages["interleaved_images"]["extra"]["images/not_in_warc"] == image_nodes
    dropped = _rows(tmp_path / "out" / "dropped" / "interleaved")
    assert [(d["url"], d["reason"]) for d in dropped] == [("https://example.org/", "no_images")]


def test_interleaved_images_from_the_warc(tmp_path):
    """A real capture with its image responses (Wikipedia's 2012 main page: 100 px thumbnails, a page of
    short lines, so min_side 64 and no FineWeb rules here): each kept image node carries the sha256
    of bytes in OUT/images/interleaved (decoded, both sides >= min_side, aspect <= 3), its size and
    the visual tokens of the vision policy; images/in adds up; 1 and 2 workers give the same bytes."""
    from packing.vision import visual_tokens
    from tests.warc_factory import DATA as FIXTURES

    warc = FIXTURES / "images" / "main-page.warc.gz"
    sections = {"interleaved": {"min_side": 64}, "quality": {"fineweb": False}}
    stages = _run_branch(warc, tmp_path / "one", 1, **sections)
    _run_branch(warc, tmp_path / "two", 2, **sections)
    for folder in ("docs/interleaved", "images/interleaved"):
        one = {p.name: p.read_bytes() for p in sorted((tmp_path / "one" / folder).glob("*.parquet"))}
        two = {p.name: p.read_bytes() for p in sorted((tmp_path / "two" / folder).glob("*.parquet"))}
        assert one == two and one, folder
    docs = _rows(tmp_path / "one" / "docs" / "interleaved")
    store = {r["sha256"]: r for r in _rows(tmp_path / "one" / "images" / "interleaved")}
    nodes = [n for d in docs for n in d["nodes"] if n["type"] == "image"]
    assert docs and nodes and len(nodes) == stages["interleaved_images"]["extra"]["images/kept"]
    for n in nodes:
        image = store[n["image_sha256"]]
        assert (n["width"], n["height"]) == (image["width"], image["height"])
        assert min(n["width"], n["height"]) >= 64 and max(n["width"], n["height"]) <= 3 * min(n["width"], n["height"])
        assert n["visual_tokens"] == visual_tokens(n["width"], n["height"]) > 0
    assert set(store) == {n["image_sha256"] for n in nodes}
    extra = stages["interleaved_images"]["extra"]
    removed = sum(v for k, v in extra.items() if k.startswith("images/") and k.count("/") == 1
                  and k not in ("images/in", "images/kept", "images/from_warc", "images/decoded",
                                "images/warc_records_unreferenced"))
    assert extra["images/in"] == extra["images/kept"] + removed  # no document dropped here
    vlm = stages["interleaved_vlm"]  # no model configured: counted, never a silent pass
    assert vlm["extra"]["vlm/skipped_no_model"] == vlm["in"] == vlm["out"] == len(docs)


def test_vlm_scores_drop_and_recycle_into_pairs(tmp_path):
    """Stage 4 with a tiny random Idefics3 saved by the test (no SmolVLM weights can be had here): every
    document gets an expected 1-5 rating from its real images; with min_score 5 every one is
    `vlm_low_score`, and its images become recycling candidates that the pairs branch turns into pairs
    (origin recycled, the drop named, a text from alt/figcaption/adjacent) through its own rules and
    dedup: no image is in the pairs twice, every recycled pair's image is in the store."""
    import io

    import numpy as np
    from PIL import Image

    from tests.test_images_clip import build_tiny_clip
    from tests.test_vlm import TINY_SIDE, build_tiny_vlm
    from tests.warc_factory import gz, response_record

    # two real pages with figures and captions (some images without alt), each image URL answered in
    # the WARC by a distinct noise JPEG (the pages' own image bytes were not captured)
    records, rng = [], np.random.default_rng(0)
    for name in ("qa-indic-graphemes.en.html", "qa-html-dir.html"):
        html = (DATA / name).read_text(encoding="utf-8")
        records.append(response_record(PAGES[name]["url"], html.encode()))
        for node in linearise(html, PAGES[name]["url"]).images:
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (180, 240, 3), dtype=np.uint8)).save(buf, "JPEG")
            records.append(response_record(node.image.url, buf.getvalue(), "image/jpeg"))
    warc = tmp_path / "pages.warc.gz"
    warc.write_bytes(b"".join(gz(r) for r in records))
    model = build_tiny_vlm(tmp_path / "vlm")
    clip = build_tiny_clip(tmp_path / "clip")  # stage 3's relevance, here with a threshold that keeps all
    sections = {"interleaved": {"chrome_words": False}, "quality": {"fineweb": False},
                "image_pairs": {"relevance": {"model": clip, "threshold": -1.0}},
                "interleaved_vlm": {"model": model, "max_side": TINY_SIDE, "min_score": 5.0, "batch_size": 3}}
    stages = _run_branch(warc, tmp_path / "out", 1, also=("image_pairs",), **sections)
    relevance = stages["interleaved_dedup"]["extra"]["images/relevance/scored"]
    assert relevance == sum(1 for d in _rows(tmp_path / "out" / "interleaved_dedup") for n in d["nodes"]
                            if n["type"] == "image") > 0
    vlm = stages["interleaved_vlm"]
    assert vlm["in"] > 0 and vlm["dropped"] == {"vlm_low_score": vlm["in"]} and vlm["extra"]["vlm/scored"] == vlm["in"]
    dropped = _rows(tmp_path / "out" / "dropped" / "interleaved_vlm")
    assert dropped and all(1.0 <= dict(d["scores"])["vlm"] < 5.0 for d in dropped)
    candidates = _rows(tmp_path / "out" / "recycle" / "interleaved_vlm")
    assert candidates and {c["recycled_from"] for c in candidates} == {"interleaved_vlm/vlm_low_score"}
    assert {c["page_id"] for c in candidates} == {d["id"] for d in dropped}
    pairs = _rows(tmp_path / "out" / "docs" / "pairs")
    recycled = [p for p in pairs if p["origin"] == "recycled"]
    assert recycled and {p["recycled_from"] for p in recycled} == {"interleaved_vlm/vlm_low_score"}
    assert "figcaption" in {p["text_source"] for p in recycled} <= {"alt", "figcaption", "adjacent"}
    assert all(p["alt"] for p in recycled)
    page_pairs = {(p["page_id"], p["position"]) for p in pairs if p["origin"] == "page"}
    assert not page_pairs & {(p["page_id"], p["position"]) for p in recycled}  # the page's own pair ranks first
    shas = [p["image_sha256"] for p in pairs]
    assert len(shas) == len(set(shas))
    store = {r["sha256"] for r in _rows(tmp_path / "out" / "images" / "pairs")}
    assert set(shas) == store
    extra = stages["image_pairs"]["extra"]
    assert extra["images/recycled/from/interleaved_vlm/vlm_low_score"] == len(candidates)


def test_a_recycled_image_takes_the_first_text_that_passes_the_pair_rules():
    """alt, then the figure caption, then the text block after or before it if caption-short; with none
    usable the candidate is dropped with its alt's reason."""
    import apache_beam as beam

    from pipelines.image_pairs import ImagePairsConfig, _RecycledRefs

    step = _RecycledRefs(ImagePairsConfig.model_validate({"recycle": {"adjacent_max_chars": 60}}))
    step.setup()
    step.start_bundle()
    base = {"page_id": "p" * 32, "page_url": "https://x.org/a", "warc_file": "f", "warc_date": "", "position": 3,
            "img_url": "https://x.org/figure.jpg", "recycled_from": "interleaved_vlm/vlm_low_score"}

    def outcome(**texts):
        cand = {**base, "alt": None, "caption": "", "text_before": "", "text_after": "", **texts}
        out = [o for o in step.process(cand) if not isinstance(o, beam.pvalue.TaggedOutput) or o.tag == "dropped"]
        (o,) = out
        if isinstance(o, beam.pvalue.TaggedOutput):
            return "dropped", o.value[1]
        return o[1]["text_source"], o[1]["alt"]

    assert outcome(alt="A heron standing in the reeds", caption="Fig. 2: a heron") == ("alt", "A heron standing in the reeds")
    assert outcome(alt="", caption="Fig. 2: a grey heron at dawn") == ("figcaption", "Fig. 2: a grey heron at dawn")
    assert outcome(text_after="The heron nest seen from the hide.") == ("adjacent", "The heron nest seen from the hide.")
    assert outcome(text_after="x" * 61, text_before="The bridge before the flood of 1998.") == (
        "adjacent", "The bridge before the flood of 1998.")
    assert outcome(alt="", text_after="y " * 40) == ("dropped", "empty_alt")


def test_images_below_the_relevance_threshold_leave_their_document(tmp_path):
    """Stage 3's relevance step on a tiny random CLIP: with the threshold between two images' cosines
    the lower one is removed (the text blocks around it joined), and a document whose images are all
    below it is `no_images`; every cosine is counted."""
    import io

    import apache_beam as beam
    from PIL import Image

    from pipelines.image_pairs import ImagePairsConfig
    from pipelines.interleaved import _ScoreRelevance
    from tests.test_images_clip import build_tiny_clip

    def jpeg(color):
        buf = io.BytesIO()
        Image.new("RGB", (200, 160), color).save(buf, "JPEG")
        return buf.getvalue()

    data = [jpeg((200, 30, 30)), jpeg((20, 20, 220))]
    nodes = [{"type": "text", "text": "intro"}, {"type": "image", "alt": "red square"},
             {"type": "text", "text": "middle"}, {"type": "image", "caption": "blue square"},
             {"type": "text", "text": "end"}]
    doc = {"id": "d" * 32, "url": "https://x.org/", "nodes": nodes, "scores": {}}
    relevance = ImagePairsConfig().relevance.model_copy(update={"model": build_tiny_clip(tmp_path / "clip")})
    step = _ScoreRelevance(relevance, ImagePairsConfig().decode_rules())
    step.setup()
    red, blue = step.scorer.score([Image.open(io.BytesIO(b)) for b in data], ["red square", "blue square"])

    def outcome(threshold):
        step.relevance = relevance.model_copy(update={"threshold": threshold})
        step.start_bundle()
        out = list(step.process([(doc, data)]))
        tagged = [o for o in out if isinstance(o, beam.pvalue.TaggedOutput)]
        counters = dict(o.value.value for o in step.finish_bundle() if o.tag == "counters")  # the bundle's tally
        assert counters["images/relevance/scored"] == 2
        return [o for o in out if not isinstance(o, beam.pvalue.TaggedOutput)], \
            [o.value for o in tagged if o.tag == "dropped"], counters

    kept, drops, counters = outcome((red + blue) / 2)
    (kept,) = kept
    assert not drops and counters["images/low_relevance"] == 1
    (image,) = [n for n in kept["nodes"] if n["type"] == "image"]
    assert image.get("alt" if red > blue else "caption")
    texts = [n["text"] for n in kept["nodes"] if n["type"] == "text"]
    assert texts == (["intro", "middle\n\nend"] if red > blue else ["intro\n\nmiddle", "end"])
    assert dict(kept["scores"])["clip_min"] == round(max(red, blue), 4)
    kept, drops, counters = outcome(2.0)
    assert not kept and [d["reason"] for d in drops] == ["no_images"] and counters["images/low_relevance"] == 2


PDF_FIXTURES = Path(__file__).resolve().parent / "data" / "pdf"


def _pdf_warc(path: Path) -> list[dict]:
    """The fixture PDFs (tests/data/pdf, real files) as the PDF responses of one WARC; their labels."""
    import json

    from tests.warc_factory import gz, response_record

    labels = [json.loads(line) for line in open(PDF_FIXTURES / "labels.jsonl")]
    path.write_bytes(b"".join(gz(response_record(lab["url"], (PDF_FIXTURES / Path(lab["path"]).name).read_bytes(),
                                                 "application/pdf")) for lab in labels))
    return labels


def test_pdfs_become_interleaved_documents_or_carry_their_reason(tmp_path):
    """Seven real PDFs through the interleaved stages (parsed in the sandbox's child processes): the
    encrypted, broken and scanned ones carry their reasons; the others are `kind = "pdf"` documents
    whose nodes hold every page in order, whose images (the labelled count, after the 150 px rule) are
    decoded from the PDF's own bytes into the image store, and become whole image spans in the shards;
    2 workers write the same bytes (documents, images, shards)."""
    from tests.warc_factory import DATA  # noqa: F401  (the fixtures' package)

    labels = _pdf_warc(tmp_path / "pdfs.warc.gz")
    # lorem ipsum (two of the files) is Latin at a low language-ID confidence, and fails the text rules
    sections = {"language": {"min_score": 0.1}, "interleaved": {"max_aspect": 10.0},
                "quality": {"c4": False, "fineweb": False, "gopher_quality": False, "gopher_repetition": False}}
    stages = _run_branch(tmp_path / "pdfs.warc.gz", tmp_path / "one", 1, also=("pack",), **sections)
    by_url = {lab["url"]: lab for lab in labels}
    reasons = {r["url"]: r["reason"] for r in _rows(tmp_path / "one" / "dropped" / "interleaved")}
    docs = {d["url"]: d for d in _rows(tmp_path / "one" / "docs" / "interleaved")}
    assert stages["interleaved"]["in"] == len(labels) and set(reasons) | set(docs) == set(by_url)
    for url, lab in by_url.items():
        expected = ("pdf_encrypted" if lab["encrypted"] else "pdf_broken" if lab["broken"]
                    else "pdf_no_text_layer" if lab["no_text_layer"] else None)
        assert reasons.get(url) == expected, url
        if expected is None:
            doc = docs[url]
            pages = [n["page"] for n in doc["nodes"]]
            assert doc["kind"] == "pdf" and pages == sorted(pages) and set(pages) == set(range(1, lab["pages"] + 1))
            assert sum(n["type"] == "image" for n in doc["nodes"]) == lab["embedded_images"]
    store = {r["sha256"] for r in _rows(tmp_path / "one" / "images" / "interleaved")}
    shas = [n["image_sha256"] for d in docs.values() for n in d["nodes"] if n["type"] == "image"]
    assert shas and set(shas) == store
    assert stages["interleaved"]["extra"]["pdf/in"] == len(labels)
    _check_image_spans(tmp_path / "one")
    _run_branch(tmp_path / "pdfs.warc.gz", tmp_path / "two", 2, also=("pack",), **sections)
    for folder in ("docs/interleaved", "images/interleaved", "shards"):
        one = {p.relative_to(tmp_path / "one"): p.read_bytes() for p in sorted((tmp_path / "one" / folder).rglob("*"))
               if p.is_file()}
        two = {p.relative_to(tmp_path / "two"): p.read_bytes() for p in sorted((tmp_path / "two" / folder).rglob("*"))
               if p.is_file()}
        assert one == two and one, folder


def _check_image_spans(out: Path) -> None:
    """Each span of the shards names an image of OUT/images/ (its sha256) at the size the vision policy
    gives that image and covers exactly `tokens` placeholder ids inside one segment; the run manifest's
    image count adds up to the spans'."""
    import json

    from packing.shards import open_shards
    from packing.vision import fitted_size, visual_tokens

    store = {r["sha256"]: r for folder in ("images/pairs", "images/interleaved") for r in _rows(out / folder)}
    run_meta = json.loads((out / "shards" / "manifest.json").read_text())
    spans = 0
    for phase in run_meta["phases"]:
        image_id = json.loads((out / "shards" / phase / "manifest.json").read_text())["image_token_id"]
        for item in open_shards(str(out / "shards" / phase)):
            ids, cu = item["input_ids"], item["cu_seqlens"]
            for span in item["images"]:
                image = store[span["sha256"]]
                assert (span["width"], span["height"]) == fitted_size(image["width"], image["height"])
                assert span["tokens"] == visual_tokens(image["width"], image["height"])
                a, b = span["pos"], span["pos"] + span["tokens"]
                assert (ids[a:b] == image_id).all() and any(cu[k] <= a and b <= cu[k + 1] for k in range(len(cu) - 1))
                spans += 1
            assert int((ids == image_id).sum()) == sum(s["tokens"] for s in item["images"])
    assert spans == sum(m["images"] for m in run_meta["phases"].values()) > 0


def test_a_page_that_cannot_hold_an_img_is_not_walked_and_image_tags_count_as_img(monkeypatch):
    """`<image>` start tags become <img> elements (the HTML parser renames them), so both branches look
    for either tag before they parse; a page with neither gives the stage the same document without the
    DOM walk."""
    import apache_beam as beam

    import extract.images
    from extract.images import extract_images, may_hold_images
    from pipelines.interleaved import InterleavedConfig, _Linearise

    assert not may_hold_images("<p>Text only, an <imgx> element and no image.</p>")
    assert may_hold_images("<P><IMG SRC=a.jpg>") and may_hold_images('<image src="a.jpg">')
    html = ('<html><body><p>Before the picture.</p><image src="https://example.org/cat.jpg" alt="A cat">'
            '<p>After the picture.</p></body></html>')
    assert [r.url for r in extract_images(html, "https://example.org/")] == ["https://example.org/cat.jpg"]
    assert [n.image.url for n in linearise(html, "https://example.org/").images] == ["https://example.org/cat.jpg"]

    page = {"id": "p", "url": "https://example.org/a", "warc_file": "f", "warc_offset": 0, "warc_date": None,
            "html": "<html><body><nav>Home | News</nav><h1>A title</h1><p>" + "Words of an article. " * 40
                    + "</p><footer>Contact</footer></body></html>"}
    stage = _Linearise(InterleavedConfig())

    def outputs():  # what the page gives, and the bundle's counters
        stage.start_bundle()
        out = [(o.tag, o.value) if isinstance(o, beam.pvalue.TaggedOutput) else o for o in stage.process(page)]
        return out + [(o.tag, o.value.value) for o in stage.finish_bundle()]

    skipped = outputs()
    monkeypatch.setattr(extract.images, "may_hold_images", lambda _html: True)  # force the DOM walk
    assert outputs() == skipped
    (drop,) = [value for tag, value in skipped if tag == "dropped"]
    assert (drop["id"], drop["reason"], drop["text"]) == ("p", "no_images", "")
    assert ("counters", ("dropped/no_images", 1)) in skipped


def test_bullets_and_blank_lines_are_tidied_as_the_regexes_do_in_linear_time():
    """extract.interleaved._clean's bullet and blank-line steps give what re.sub(r"^\\s*•\\s*", "- ", flags=re.M)
    and re.sub(r"[ \\t]*\\n(?:[ \\t]*\\n)+", "\\n") give (the oracle, on random strings of blanks, line breaks,
    bullets and letters), but without their quadratic cost on long runs of blank lines."""
    import random
    import re

    from extract.interleaved import _bullets_as_dashes, single_blank_lines

    bullet, blanks = re.compile(r"^\s*•\s*", re.M), re.compile(r"[ \t]*\n(?:[ \t]*\n)+")
    rnd = random.Random(7)
    alphabet = [" ", "\t", "\n", "•", "a", "\xa0", "\r", "\u3000", "\u2028"]
    for _ in range(20000):
        s = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14)))
        assert _bullets_as_dashes(s) == bullet.sub("- ", s), repr(s)
        assert single_blank_lines(s) == blanks.sub("\n", s), repr(s)
    # 400,000 blank lines and a bullet: the regexes took minutes here (12 s at 80,000)
    page = "text" + "\n \n" * 200000 + "• item\n" + " \t" * 200000
    assert _bullets_as_dashes(page) == "text\n- item\n" + " \t" * 200000
    assert single_blank_lines(page) == "text\n• item\n" + " \t" * 200000
