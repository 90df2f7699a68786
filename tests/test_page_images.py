"""Both image branches' views of a page, and the text branch's with them, from one decoding and one parse
(extract/page_images.py, extract.interleaved.image_views and text_and_image_view_rows): the same text,
references, documents and failures as each branch's own steps, on real pages and through a whole run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from extract import page_images
from extract.images import extract_images
from extract.interleaved import image_views, image_views_bounded, linearise, text_and_image_views_bounded
from extract.page_images import all_page_views, interleaved_view, page_views, pairs_view, text_view
from extract.sandbox import SandboxError
from pipelines.config import load_config

DATA = Path(__file__).parent / "data"
PAGES = {p["file"]: p for p in json.loads((DATA / "interleaved" / "labels.json").read_text())}
CFG = load_config(None)
PAIRS, INTERLEAVED, EXTRACT = CFG.image_pairs, CFG.interleaved, CFG.extract


def real_pages() -> list[tuple[str, str]]:
    pages = [((DATA / "interleaved" / name).read_text(encoding="utf-8"), p["url"]) for name, p in sorted(PAGES.items())]
    pages += [(gzip.decompress(f.read_bytes()).decode("utf-8"), "https://example.com/news/a.html")
              for f in sorted((DATA / "boilerplate").glob("*.html.gz"))]
    return pages


def as_page(html: str, url: str, **extra) -> dict:
    return {"id": url, "url": url, "source": "html", "payload": html.encode("utf-8"), "http_charset": "utf-8", **extra}


def test_one_parse_gives_what_each_branch_s_own_walk_gives():
    pages = real_pages()
    assert len(pages) >= 10
    for html, url in pages:
        refs, doc = image_views(html, url, 200)
        assert refs == extract_images(html, url, 200)
        assert doc == linearise(html, url)
    assert sum(len(doc.images) for _, doc in (image_views(h, u, 200) for h, u in pages)) > 20


def test_page_views_are_each_branch_s_own_views():
    for html, url in real_pages():
        page = as_page(html, url)
        assert repr(page_views(page, PAIRS, INTERLEAVED)) == repr((pairs_view(page, PAIRS),
                                                                    interleaved_view(page, INTERLEAVED)))
    no_img = as_page("<html><body><p>text only</p></body></html>", "https://example.com/t")
    assert repr(page_views(no_img, PAIRS, INTERLEAVED)) == repr((pairs_view(no_img, PAIRS),
                                                                  interleaved_view(no_img, INTERLEAVED)))
    html, url = real_pages()[0]
    big = as_page(html, url)
    small = PAIRS.model_copy(update={"max_html_bytes": 1000})
    for pairs, interleaved in ((small, INTERLEAVED.model_copy(update={"max_html_bytes": 1000})), (small, INTERLEAVED)):
        views = page_views(big, pairs, interleaved)
        assert repr(views) == repr((pairs_view(big, pairs), interleaved_view(big, interleaved)))
        assert views[0][2] == "page_too_large"


def separate_views(page, text=EXTRACT, pairs=PAIRS, interleaved=INTERLEAVED) -> str:
    return repr((text_view(page, text), pairs_view(page, pairs), interleaved_view(page, interleaved)))


def test_the_text_view_made_with_the_image_views_is_the_text_branch_s_own(monkeypatch):
    shared, call = [], page_images.text_and_image_views_bounded
    monkeypatch.setattr(page_images, "text_and_image_views_bounded", lambda *a: shared.append(call(*a)) or shared[-1])
    pages = [as_page(html, url) for html, url in real_pages()]
    pages += [as_page('<html><body><h1>A post</h1><blockquote class="twitter-tweet"><p>' + "Quoted words. " * 30
                      + '</p></blockquote><p>' + "Article words here. " * 40 + '</p><img src="/a.jpg" alt="An owl">'
                      "</body></html>", "https://example.com/tweet"),
              as_page("<html><body><p>" + "Marker \ue000 lookalike words. " * 40 + '</p><img src="/b.jpg" alt="A fox">'
                      "</body></html>", "https://example.com/marker"),
              as_page("<html><body><p>text only</p></body></html>", "https://example.com/t"),
              as_page("<p>" + "Short page words. " * 20 + '<img src="c.png" alt="A small cat"></p>', "https://e.org/s")]
    texts = 0
    for page in pages:
        views = all_page_views(page, EXTRACT, PAIRS, INTERLEAVED)
        assert repr(views) == separate_views(page)
        texts += bool(views[0][0])
    assert texts == len(pages)
    assert len(shared) >= len(real_pages())  # the real pages, each with an <img>, took the shared call
    html, url = real_pages()[0]
    big = as_page(html, url)
    for text, pairs in ((EXTRACT.model_copy(update={"max_html_bytes": 1000}), PAIRS),
                        (EXTRACT, PAIRS.model_copy(update={"max_html_bytes": 1000})),
                        (EXTRACT.model_copy(update={"engine": "trafilatura"}), PAIRS)):
        assert repr(all_page_views(big, text, pairs, INTERLEAVED)) == separate_views(big, text, pairs)


def test_a_shared_call_that_fails_or_runs_past_the_text_s_deadline_makes_each_view_alone(monkeypatch):
    html, url = real_pages()[0]
    with pytest.raises(SandboxError) as err:
        text_and_image_views_bounded(html, url, 200, 1e-6, 5000, 5000)  # the text took longer than its deadline
    assert err.value.reason == "page_timeout"
    calls = []

    def failing(*args):
        calls.append(args)
        raise SandboxError("page_error", "text_and_image_views: a panic")

    monkeypatch.setattr(page_images, "text_and_image_views_bounded", failing)
    page = as_page(html, url)
    views = all_page_views(page, EXTRACT, PAIRS, INTERLEAVED)
    assert calls and views[0][0] and views[1][2] == views[2][2] == ""  # each made again alone, each fine
    assert repr(views) == separate_views(page)


def test_a_view_past_its_own_deadline_is_a_timeout_and_the_views_are_made_alone(monkeypatch):
    html, url = real_pages()[0]
    with pytest.raises(SandboxError) as err:
        image_views_bounded(html, url, 200, 1e-6, 5000)  # the references took longer than their own deadline
    assert err.value.reason == "page_timeout"
    calls = []

    def failing(*args):
        calls.append(args)
        raise SandboxError("page_error", "image_views: a panic")

    monkeypatch.setattr(page_images, "image_views_bounded", failing)
    page = as_page(html, url)
    views = page_views(page, PAIRS, INTERLEAVED)
    assert calls and views[0][2] == views[1][2] == ""  # each made again alone, each fine on its own
    assert repr(views) == repr((pairs_view(page, PAIRS), interleaved_view(page, INTERLEAVED)))


def test_a_run_shares_the_views_and_writes_what_separate_views_write(tmp_path, monkeypatch):
    """Every branch over the bundled sample's real pages and images (sample/interleaved-dev-slice): once
    with the shared step (the text branch's extraction in it), once with each branch making its own views;
    the same documents, texts, pairs, images and drops."""
    import apache_beam as beam
    import pyarrow.parquet as pq

    from pipelines import stages
    from pipelines.run import run
    warc = Path(__file__).resolve().parents[1] / "sample" / "interleaved-dev-slice.warc.gz"
    tiny = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
    labels, real_apply = [], beam.Pipeline.apply

    def labelled(self, transform, pvalueish=None, label=None):
        labels.append(label or getattr(transform, "label", ""))
        return real_apply(self, transform, pvalueish, label)

    outputs = {}
    for shared in (True, False):
        out = tmp_path / ("shared" if shared else "separate")
        with monkeypatch.context() as patch:
            patch.setattr(beam.Pipeline, "apply", labelled)
            if not shared:
                patch.setattr(stages, "image_pages", lambda p, cfg: stages.read_warcs(p, cfg).docs)
            labels.clear()
            run(load_config(tiny, input=[str(warc)], output=str(out), workers=1), echo=False)
            assert ("Page views" in labels) == shared
        outputs[shared] = {folder: sorted(map(repr, (row for f in sorted((out / folder).glob("*.parquet"))
                                                     for row in pq.read_table(f).to_pylist())))
                           for folder in ("docs/pairs", "docs/interleaved", "dropped/image_pairs",
                                          "dropped/interleaved", "images/pairs", "docs/text", "dropped/extract",
                                          "extract")}
    assert outputs[True] == outputs[False]
    assert outputs[True]["docs/interleaved"] and outputs[True]["dropped/image_pairs"]
