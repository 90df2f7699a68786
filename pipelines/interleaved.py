"""Interleaved image-text documents from web pages, stage 1 of the branch's increasing-cost order:
everything that needs no image byte. Each HTML page becomes an ordered list of text and image nodes
(extract/interleaved.py); image nodes that fail the URL rules (no usable URL, `data:` URIs, tracking
pixels, icons, chrome words, declared sizes below `min_side`), sit in page chrome, or whose URL is on
more than `max_pages_per_url` documents of the corpus (OBELICS's site-chrome rule, a Beam combine) are
removed; a document left with no image is dropped as `no_images` (its text stays in the text branch).

Accounting, per document: `in` = HTML pages, `out` = documents kept, dropped = `no_images`,
`page_too_large`, `page_undecodable`, `page_timeout`, `duplicate_record` (one id twice). Per image, counters `images/in`, `images/kept`,
`images/chrome`, `images/<URL rule reason>` and `images/frequent_url` (in = kept + the others).
"""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam
import pyarrow as pa
from pydantic import Field, StrictBool

from dedup.image import SplitFrequentImageUrls
from pipelines.io import SCORES
from pipelines.stage import COUNTERS, DROPPED, Section, counter, drop_row, dropped

NODE = pa.struct([("type", pa.string()), ("text", pa.string()), ("image_url", pa.string()),
                  ("image_sha256", pa.string()), ("alt", pa.string()), ("caption", pa.string()),
                  ("width", pa.int32()), ("height", pa.int32()), ("visual_tokens", pa.int32())])
# One interleaved document; `image_sha256`, `width`, `height` and `visual_tokens` are filled when the
# images are fetched and decoded (stage 2), null before.
INTERLEAVED_SCHEMA = pa.schema([("id", pa.string()), ("url", pa.string()), ("warc_file", pa.string()),
                                ("warc_offset", pa.int64()), ("warc_date", pa.string()), ("kind", pa.string()),
                                ("lang", pa.string()), ("nodes", pa.list_(NODE)), ("scores", SCORES)])


class InterleavedConfig(Section):
    max_html_bytes: int = Field(10 << 20, gt=0, description="bigger pages are not linearised (page_too_large)")
    timeout_ms: int = Field(5000, gt=0, description="wall-clock bound per page (page_timeout)")
    min_side: int = Field(150, ge=0, description="declared width or height below this drops the image (OBELICS "
                                                 "and the pairs branch: 150 px)")
    chrome_words: StrictBool = Field(True, description="drop image URLs naming site chrome (logo, avatar, banner, "
                                                       "ads, badge, button), as OBELICS's URL ban words")
    max_pages_per_url: int = Field(10, ge=1, description="an image URL on more documents than this is site chrome "
                                                         "(OBELICS: 10)")


class _Linearise(beam.DoFn):
    """Page -> its document (image nodes carry `position`), with the URL rules applied per image; a
    page that cannot be read is one dropped document."""

    def __init__(self, cfg: dict):
        self.cfg = cfg

    def process(self, page):
        if page.get("source", "html") != "html":
            return
        yield counter("in")
        doc, failure = self._linearise(page)
        base = {k: page.get(k) for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
        if failure:
            yield counter(f"dropped/page_{failure}")
            yield dropped(drop_row(base, "interleaved", f"page_{failure}", text=""))
            return
        from extract.images import check_image_url

        nodes = []
        images = len(doc.images) + len(doc.chrome_images)
        yield counter("images/in", images)
        yield counter("images/chrome", len(doc.chrome_images))
        for node in doc.nodes:
            if node.type == "text":
                nodes.append({"type": "text", "text": node.text})
                continue
            reason = check_image_url(node.image, self.cfg["min_side"], self.cfg["chrome_words"])
            if reason:
                yield counter(f"images/{reason}")
                continue
            nodes.append({"type": "image", "image_url": node.image.url, "alt": node.image.alt,
                          "caption": node.caption, "position": node.image.position})
        yield {**base, "kind": "web", "lang": "", "nodes": nodes, "scores": {}}

    def _linearise(self, page):
        from extract.guard import DocumentTimeout, watchdog
        from extract.html import page_html
        from extract.interleaved import linearise

        html, failure = page_html(page, self.cfg["max_html_bytes"])
        if failure:
            return None, failure
        try:
            with watchdog().limit(self.cfg["timeout_ms"] / 1000):
                return linearise(html, page["url"]), ""
        except DocumentTimeout:
            return None, "timeout"


def _without_frequent(element):
    """(doc id, {"doc": [doc], "frequent": [positions]}) -> the document without those image nodes,
    adjacent text blocks joined; or a `no_images` drop when no image is left."""
    _, group = element
    doc, *repeats = sorted(group["doc"], key=lambda d: (d["warc_file"] or "", d["warc_offset"] or 0))
    for repeat in repeats:  # one id read twice (a record copied into two files): one document
        yield counter("dropped/duplicate_record")
        yield dropped(drop_row(repeat, "interleaved", "duplicate_record", f"{doc['warc_file']}@{doc['warc_offset']}",
                               text=""))
    frequent = set(group["frequent"])
    if frequent:
        yield counter("images/frequent_url", len(frequent))
    nodes = []
    for node in doc["nodes"]:
        if node["type"] == "image":
            if node["position"] in frequent:
                continue
            node = {k: v for k, v in node.items() if k != "position"}
        elif nodes and nodes[-1]["type"] == "text":  # the image between two text blocks was removed
            nodes[-1] = {**nodes[-1], "text": nodes[-1]["text"] + "\n\n" + node["text"]}
            continue
        nodes.append(node)
    kept = sum(1 for n in nodes if n["type"] == "image")
    if kept == 0:
        yield counter("dropped/no_images")
        text = "\n\n".join(n["text"] for n in nodes)
        yield dropped(drop_row(doc, "interleaved", "no_images", text=text))
        return
    yield counter("images/kept", kept)
    yield counter("out")
    yield {**doc, "nodes": [{name: n.get(name) for name in NODE.names} for n in nodes]}


class InterleavedResult(NamedTuple):
    docs: beam.PCollection      # INTERLEAVED_SCHEMA rows
    dropped: beam.PCollection   # drop rows (io.DROP_SCHEMA)
    counters: beam.PCollection  # (key, n), summed


class BuildInterleavedDocs(beam.PTransform):
    """HTML pages (the read stage's documents) -> stage-1 interleaved documents (module docstring)."""

    def __init__(self, cfg: dict | None = None):
        super().__init__()
        self.cfg = InterleavedConfig.model_validate(cfg or {}).model_dump()

    def expand(self, pages):
        docs = pages | "Linearise" >> beam.ParDo(_Linearise(self.cfg)).with_outputs(DROPPED, COUNTERS, main="docs")
        refs = docs.docs | "ImageRefs" >> beam.FlatMap(
            lambda doc: [(doc["id"], {"url": n["image_url"], "position": n["position"]})
                         for n in doc["nodes"] if n["type"] == "image"])
        split = refs | "FrequentUrls" >> SplitFrequentImageUrls(self.cfg["max_pages_per_url"])
        frequent = split.frequent | "FrequentPositions" >> beam.Map(lambda r: (r[0][0], r[0][1]["position"]))
        final = ({"doc": docs.docs | "KeyDocs" >> beam.Map(lambda d: (d["id"], d)), "frequent": frequent}
                 | "JoinFrequent" >> beam.CoGroupByKey()
                 | "Assemble" >> beam.FlatMap(_without_frequent).with_outputs(DROPPED, COUNTERS, main="docs"))
        counters = ((docs[COUNTERS], final[COUNTERS]) | "AllCounters" >> beam.Flatten()
                    | "SumCounters" >> beam.CombinePerKey(sum))
        return InterleavedResult(final.docs, (docs[DROPPED], final[DROPPED]) | "AllDrops" >> beam.Flatten(),
                                 counters)
