"""No page can fail a run: the DOM walks of the pairs and interleaved branches (the image references with
their alt texts and context, the linearisation) are linear in the page, and a page that still runs long
(resiliparse's own cost grows with the nesting depth) or that the library fails on becomes a reason-coded
drop naming the step, while a bug in our code fails loudly. Pages from tests/hostile_pages.py; the time
they take is benchmarks/hostile_pages.py's to measure."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from extract import sandbox
from extract.images import extract_images, extract_images_bounded, image_ref_rows
from extract.interleaved import linearise, linearise_bounded, linearise_rows, text_and_image_view_rows
from extract.sandbox import PageStepError, SandboxError
from tests import hostile_pages
from tests.warc_factory import gz, response_record

URL = "https://example.org/gallery/page.html"
FIXTURES = sorted((Path(__file__).parent / "data" / "interleaved").glob("*.html"))


def _accounted(doc, images: int) -> list[int]:
    """The image nodes' positions, after checking that every <img> is a node or chrome exactly once."""
    positions = [n.image.position for n in doc.nodes if n.type == "image"]
    assert sorted(positions + [r.position for r in doc.chrome_images]) == list(range(images))
    return positions


def test_a_long_gallery_is_read_whole_within_the_default_limit():
    """5,000 paragraphs and images (the page that failed a run): every image in DOM order, with its
    alt text, under the branches' default 5 s limit (the walk was quadratic: over 5 s at 2,000)."""
    html = hostile_pages.gallery(5_000)
    doc = linearise_bounded(html, URL, 5000)
    assert _accounted(doc, 5_000) == list(range(5_000))
    assert doc.nodes[0].text == "Photo 0 of the gallery, taken on the second day of the trip."
    refs = extract_images_bounded(html, URL, 200, 5000)
    assert [r.position for r in refs] == list(range(5_000))
    assert refs[4_999].alt == "The harbour seen from the north pier, photo 4999"
    assert refs[4_999].url == "https://example.org/gallery/4999.jpg"
    assert refs[4_999].context_before.endswith("taken on the second day of the trip.")


HOSTILE = {"bare_images_20k": lambda: hostile_pages.bare_images(20_000),
           "nested_figures_20k": lambda: hostile_pages.nested_figures(20_000),
           "nested_figures_60k": lambda: hostile_pages.nested_figures(60_000),
           "wide_table": lambda: hostile_pages.wide_table(2_000, 200)}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_page_is_read_or_dropped_naming_the_step(name):
    """Each step either reads every <img> of the page or ends in page_timeout with the step named,
    at its limit (the child is killed there), never with another exception."""
    html = HOSTILE[name]()
    images = html.count("<img")
    for step, call in (("linearise", lambda: _accounted(linearise_bounded(html, URL, 1000), images)),
                       ("image_refs", lambda: [r.position for r in extract_images_bounded(html, URL, 200, 1000)])):
        try:
            positions = call()
        except SandboxError as err:
            assert err.reason == "page_timeout" and err.detail == f"{step}: >1000 ms (killed)", (name, err)
            continue
        assert positions == sorted(positions) and len(set(positions)) == len(positions)


def test_the_deep_figure_page_times_out_in_the_child_not_the_worker():
    """20,000 figures nested in each other's captions: resiliparse's extraction grows with the depth,
    so the page goes to the child, which is killed at the limit; the next page is read as usual."""
    with pytest.raises(SandboxError) as err:
        linearise_bounded(hostile_pages.nested_figures(20_000), URL, 500)
    assert (err.value.reason, err.value.detail) == ("page_timeout", "linearise: >500 ms (killed)")
    assert _accounted(linearise_bounded(hostile_pages.gallery(300), URL, 5000), 300) == list(range(300))


def test_a_figure_takes_the_caption_that_is_its_own():
    """The innermost figure's caption; a figcaption that holds a figure is no caption (so the captions
    read never nest, which keeps reading them linear)."""
    html = ("<figure><img src=outer.jpg><figcaption>Outer caption</figcaption>"
            "<figure><img src=inner.jpg><figcaption>Inner <b>caption</b></figcaption></figure></figure>"
            "<figure><img src=lone.jpg></figure><img src=free.jpg>")
    captions = [n.caption for n in linearise(html, URL).images]
    assert captions == ["Outer caption", "Inner caption", "", ""]
    chained = linearise(hostile_pages.nested_figures(3), URL)
    assert [n.caption for n in chained.images] == ["", "", "Caption"]  # each caption holds the next figure


def test_marker_lookalikes_on_the_page_cannot_move_an_image():
    html = "<p>text \ue0001\ue001 that looks like a marker</p><img src=a.jpg alt='first image'><p>mid</p><img src=b.jpg>"
    doc = linearise(html, URL)
    assert [n.image.position for n in doc.images] == [0, 1]
    refs = extract_images(html, URL)
    assert refs[0].context_after.startswith("mid") and refs[1].context_before.endswith("mid")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_child_gives_what_the_worker_computes(path):
    html = path.read_text()
    pool = sandbox._pool()
    assert pool.page_step("linearise", html, (URL,), 10_000) == linearise_rows(html, URL)
    assert pool.page_step("image_refs", html, (URL, 200), 10_000) == image_ref_rows(html, URL, 200)
    shared = pool.page_step("text_and_image_views", html, (URL, 200), 10_000)
    assert shared[:4] == text_and_image_view_rows(html, URL, 200)[:4]  # the text and the views; then seconds


def test_a_library_panic_costs_the_page_and_a_bug_fails_loudly(monkeypatch):
    PanicException = type("PanicException", (BaseException,), {})  # what PyO3 raises for a Rust panic

    def panics(html, url):
        raise PanicException("called `Result::unwrap()` on an `Err` value")

    small = hostile_pages.gallery(3)
    monkeypatch.setitem(sandbox._STEP_FUNCTIONS, "linearise", panics)
    with pytest.raises(SandboxError) as err:
        linearise_bounded(small, URL, 5000)
    assert err.value.reason == "page_error" and err.value.detail.startswith("linearise: PanicException(")
    monkeypatch.setitem(sandbox._STEP_FUNCTIONS, "linearise", lambda html, url: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        linearise_bounded(small, URL, 5000)
    with pytest.raises(PageStepError, match="TypeError"):  # in the child: the step called wrongly is a bug
        sandbox._pool().page_step("linearise", small, (URL, "one argument too many"), 5000)


def _dropped(out: Path, stage: str) -> dict[str, tuple[str, str]]:
    rows = [r for f in sorted((out / "dropped" / stage).glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return {r["url"] or r["detail"].rsplit(" on ", 1)[-1].split(" at ")[0]: (r["reason"], r["detail"])
            for r in rows if r["reason"].startswith(("page_", "extract_"))}


def test_hostile_pages_in_a_run_end_as_documents_or_reasoned_drops(tmp_path):
    """The pages through a run of both image branches and the text branch's extraction, limits at 1 s:
    the run completes, every stage's in = out + dropped, and the deep page is dropped by each step that
    reads it, with the step named."""
    from pipelines.config import load_config
    from pipelines.run import run

    pages = {"gallery": hostile_pages.gallery(5_000), "bare": hostile_pages.bare_images(5_000),
             "nested": hostile_pages.nested_figures(20_000), "table": hostile_pages.wide_table(2_000, 50)}
    warc = tmp_path / "hostile.warc.gz"
    warc.write_bytes(b"".join(gz(response_record(f"https://hostile.example/{k}", v.encode())) for k, v in pages.items()))
    tiny = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
    out = tmp_path / "out"
    limit = {"timeout_ms": 1000}
    cfg = load_config(tiny, input=[str(warc)], output=str(out), workers=1, extract=limit, interleaved=limit,
                      image_pairs={**limit, "fetch": {"enabled": False}})
    stages = ["read", "extract", "interleaved", "interleaved_text", "interleaved_exact_dedup", "interleaved_near_dedup",
              "interleaved_images", "interleaved_dedup", "interleaved_vlm", "interleaved_write", "image_pairs"]
    summary = run(cfg.model_copy(update={"stages": stages}), echo=False)
    by_stage = {s["stage"]: s for s in summary["stages"]}
    for name in stages:
        s = by_stage[name]
        assert s["in"] == s["out"] + sum(s["dropped"].values()), name
    assert by_stage["interleaved"]["in"] == len(pages)
    assert by_stage["image_pairs"]["in"] == 5_000 + 5_000 + 1 + 1  # the nested page is one unit: unread
    nested = "https://hostile.example/nested"
    assert _dropped(out, "interleaved") == {nested: ("page_timeout", "linearise: >1000 ms (killed)")}
    assert _dropped(out, "image_pairs") == {  # an image drop's detail says where the image is
        nested: ("page_timeout", f"image_refs: >1000 ms (killed); on {nested} at -1")}
    assert _dropped(out, "extract")[nested] == ("extract_timeout", ">1000 ms (killed)")
