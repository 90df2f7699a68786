"""Interleaved image-text documents from web pages, stage 1 of the branch's increasing-cost order:
everything that needs no image byte. Registered as the stages `interleaved` (below), then
`interleaved_text` (the text branch's language, quality and synthetic verdicts on the document's text),
`interleaved_exact_dedup`, `interleaved_near_dedup` (the text branch's dedup on it) and
`interleaved_write` (OUT/docs/interleaved, sorted shards). Each HTML page becomes an ordered list of text and image nodes
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
from pipelines.stage import (COUNTERS, DROPPED, READS_INPUT, Built, DocumentStage, DocumentStep, Drop, Section, Stage,
                             counter, drop_row, dropped, register, with_scores)
from pipelines.stages import (ApplyQualityRules, ExactDedupStage, IdentifyLanguage, NearDedupStage,
                              ScoreSyntheticText, WriteStage)

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
    text = "\n\n".join(n["text"] for n in nodes if n["type"] == "text")  # what the text verdicts judge
    yield {**doc, "nodes": [{name: n.get(name) for name in NODE.names} for n in nodes], "text": text}


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


# ------------------------------------------------------------------------------------------ stages
class ScreenText(DocumentStep):
    """The text branch's language, quality and synthetic-text steps, with their settings and reasons,
    on a document's text (its text blocks joined): a page the text branch would reject is not worth
    fetching images for. The document keeps its nodes and gains `lang` and every measured score."""

    def __init__(self, stage: str, cfg: dict):
        super().__init__(stage, cfg)
        self.steps = [IdentifyLanguage(stage, cfg["language"]), ApplyQualityRules(stage, cfg["quality"]),
                      ScoreSyntheticText(stage, cfg["synthetic"])]

    def setup(self):
        for sub in self.steps:
            sub.setup()

    def step(self, doc):
        judged = {**doc, "lang": "", "lang_score": 0.0}
        for sub in self.steps:
            sub.prepare([judged])  # batched model calls (the LM head), one document at a time here
            out = sub.step(judged)
            if isinstance(out, Drop):
                judged = out.doc or judged
                return Drop(out.reason, out.detail, self._verdict(doc, judged))
            judged = out
        return self._verdict(doc, judged)

    @staticmethod
    def _verdict(doc: dict, judged: dict) -> dict:
        """The document with the judged copy's language and scores (its text, which the quality
        step's line filter may have cut, stays the document's own)."""
        return with_scores({**doc, "lang": judged["lang"], "scores": judged.get("scores")},
                           lang_score=float(judged["lang_score"]))


@register
class InterleavedStage(Stage):
    """Interleaved image-text documents from the HTML pages of the run's one read, stage 1 of the
    branch's increasing-cost order, before any image byte is touched: DOM order linearisation
    (extract/interleaved.py), the image-URL rules, page-chrome images, and OBELICS's corpus-wide URL
    frequency rule (`max_pages_per_url`, a Beam combine). A document left with no image is
    `no_images` (its text stays in the text branch). Its `in` counts HTML pages; per image,
    `images/in` = `images/kept` + `images/chrome` + `images/<URL rule>` + `images/frequent_url`."""

    name, config, reads, starts_group = "interleaved", InterleavedConfig, READS_INPUT, True
    schema, settings_from, counts_itself = INTERLEAVED_SCHEMA, ("read",), True
    reasons = ("no_images", "page_too_large", "page_undecodable", "page_timeout", "duplicate_record")

    def build(self, p, cfg, docs, root):
        from pipelines.stages import read_warcs

        res = read_warcs(p, cfg).docs | "interleaved/Build" >> BuildInterleavedDocs(cfg[self.name])
        return Built(res.docs, res.dropped, res.counters)


@register
class InterleavedTextStage(DocumentStage):
    """The text verdicts of the text branch (language, quality rules, synthetic-text scorers: the
    `language`, `quality` and `synthetic` sections and reasons) on each interleaved document's text."""

    name, step, schema = "interleaved_text", ScreenText, INTERLEAVED_SCHEMA
    settings_from = ("language", "quality", "synthetic")

    @property
    def reasons(self):
        from pipelines.stages import STAGES

        return tuple(r for section in self.settings_from for r in STAGES[section].reasons)

    def build(self, p, cfg, docs, root):
        step = self.step(self.name, {section: cfg[section] for section in self.settings_from})
        res = docs | self.name >> beam.ParDo(step).with_outputs(DROPPED, COUNTERS, main="docs")
        return Built(res.docs, res[DROPPED], res[COUNTERS])


@register
class InterleavedExactDedupStage(ExactDedupStage):
    """The text branch's exact dedup (the `exact_dedup` section) on the interleaved documents' text."""

    name, config, section, settings_from = "interleaved_exact_dedup", Section, "exact_dedup", ("exact_dedup",)
    starts_group, schema = False, INTERLEAVED_SCHEMA


@register
class InterleavedNearDedupStage(NearDedupStage):
    """The text branch's MinHash near dedup (the `near_dedup` section) on the interleaved documents'
    text."""

    name, config, section, settings_from = "interleaved_near_dedup", Section, "near_dedup", ("near_dedup",)
    schema = INTERLEAVED_SCHEMA


@register
class InterleavedWriteStage(WriteStage):
    """The interleaved documents, `OUT/docs/interleaved`: sharded and sorted by id as the text documents
    (`write.shards`), byte-identical whatever the worker count."""

    name, config, settings_from = "interleaved_write", Section, ("write",)
    outputs, folder, doc_schema = ("docs/interleaved",), "docs/interleaved", INTERLEAVED_SCHEMA
