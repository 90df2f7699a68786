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
from pipelines import io
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


class VisionConfig(Section):
    """The trainer's vision policy, for the visual-token count of each image node (packing/vision.py)."""

    patch: int = Field(14, gt=0, description="ViT patch side, px")
    min_side: int = Field(544, gt=0, description="the shorter side is scaled up to at least this (the report's "
                                                 "autoregressive-stage resolution: sides in [544, 1344])")
    max_side: int = Field(1344, gt=0, description="the longer side is scaled down to at most this")
    merge: int = Field(2, gt=0, description="spatial merge per side: tokens = (H / (patch*merge)) * (W / (patch*merge))")


class InterleavedConfig(Section):
    max_html_bytes: int = Field(10 << 20, gt=0, description="bigger pages are not linearised (page_too_large)")
    timeout_ms: int = Field(5000, gt=0, description="wall-clock bound per page (page_timeout)")
    min_side: int = Field(150, ge=0, description="declared width or height below this drops the image (OBELICS "
                                                 "and the pairs branch: 150 px)")
    chrome_words: StrictBool = Field(True, description="drop image URLs naming site chrome (logo, avatar, banner, "
                                                       "ads, badge, button), as OBELICS's URL ban words")
    max_pages_per_url: int = Field(10, ge=1, description="an image URL on more documents than this is site chrome "
                                                         "(OBELICS: 10)")
    max_aspect: float = Field(2.0, gt=0, description="decoded: longer side / shorter side above this drops the image "
                                                     "(OBELICS: 2); both sides must also reach min_side")
    max_images: int = Field(30, ge=1, description="a document with more images after decoding is too_many_images "
                                                  "(MINT-1T keeps 1-30)")
    vision: VisionConfig = Field(default_factory=VisionConfig)


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


def _without_images(nodes: list[dict], removed) -> list[dict]:
    """The nodes without the image nodes `removed(node)` is true for, the text blocks that meet
    across a removed image joined."""
    out = []
    for node in nodes:
        if node["type"] == "image":
            if removed(node):
                continue
        elif out and out[-1]["type"] == "text":
            out[-1] = {**out[-1], "text": out[-1]["text"] + "\n\n" + node["text"]}
            continue
        out.append(node)
    return out


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
    nodes = [{k: v for k, v in n.items() if k != "position"}
             for n in _without_images(doc["nodes"], lambda n: n["position"] in frequent)]
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


# -------------------------------------------------------------------------- stage 2: the images
def _url_outcomes(element):
    """(sha256, {"url": [urls], "image": [(IMG, row) | (FAIL, reason, "")]}) -> (url, outcome) for each
    URL whose bytes have that hash: ("ok", sha, width, height) or ("fail", reason, detail)."""
    from pipelines.image_pairs import _FAIL

    sha, group = element
    (decoded,) = group["image"]
    outcome = ("fail", decoded[1], decoded[2]) if decoded[0] == _FAIL else (
        "ok", sha, decoded[1]["width"], decoded[1]["height"])
    for url in group["url"]:
        yield url, outcome


class _AttachImages(beam.DoFn):
    """(doc id, {"doc": [doc], "images": [(url, outcome)]}) -> the document with each image node's
    sha256, decoded size and visual tokens, the images that failed (counted by reason) or repeat an
    earlier node's bytes (`images/repeated_in_doc`) removed; dropped as `no_images` when none is left,
    `too_many_images` above `max_images`. Emits the sha256 of every image a kept document uses (tag
    "used"), for the image store."""

    def __init__(self, cfg: dict):
        self.cfg = cfg

    def process(self, element):
        from packing.vision import VisionPolicy, visual_tokens

        _, group = element
        (doc,) = group["doc"]
        outcomes = dict(group["images"])
        policy = VisionPolicy(**self.cfg["vision"])
        seen, nodes = set(), []
        yield counter("images/in", sum(1 for n in doc["nodes"] if n["type"] == "image"))
        for node in doc["nodes"]:
            if node["type"] == "image":
                outcome = outcomes[node["image_url"]]
                if outcome[0] == "fail":
                    yield counter(f"images/{outcome[1]}")
                    node = None
                elif outcome[1] in seen:
                    yield counter("images/repeated_in_doc")
                    node = None
                else:
                    _, sha, width, height = outcome
                    seen.add(sha)
                    node = {**node, "image_sha256": sha, "width": width, "height": height,
                            "visual_tokens": visual_tokens(width, height, policy)}
            nodes.append(node or {"type": "image", "removed": True})
        nodes = _without_images(nodes, lambda n: n.get("removed"))
        images = [n for n in nodes if n["type"] == "image"]
        doc = {**doc, "nodes": nodes}
        if not images:
            yield dropped(drop_row(doc, "interleaved_images", "no_images"))
            return
        if len(images) > self.cfg["max_images"]:
            yield dropped(drop_row(doc, "interleaved_images", "too_many_images", f"{len(images)} images"))
            return
        yield counter("images/kept", len(images))
        yield counter("visual_tokens", sum(n["visual_tokens"] for n in images))
        for n in images:
            yield beam.pvalue.TaggedOutput("used", (n["image_sha256"], True))
        yield doc


class AttachImages(beam.PTransform):
    """Stage 2 of the branch: (documents, the read's image responses) -> documents with their images
    (_AttachImages), the images they use (IMAGE_SCHEMA rows, one per sha256) and counters. Each image
    URL is resolved once: from the WARC's captures, else through the SSRF-safe fetcher when
    `image_pairs.fetch.enabled`, else `not_in_warc`; each distinct body is decoded once, with the pairs
    branch's defensive decoder and its limits, under this branch's size and aspect rules."""

    def __init__(self, cfg: dict, pairs_cfg: dict):
        super().__init__()
        self.cfg, self.pairs_cfg = cfg, pairs_cfg

    def expand(self, pcolls):
        from pipelines.image_pairs import _IMG, ImageBytes

        docs, records = pcolls
        refs = docs | "Refs" >> beam.FlatMap(
            lambda d: sorted({(n["image_url"], d["id"]) for n in d["nodes"] if n["type"] == "image"}))
        needed = refs | "Urls" >> beam.Keys() | "DistinctUrls" >> beam.Distinct()
        rules = {**self.pairs_cfg, "min_side": self.cfg["min_side"], "max_aspect": self.cfg["max_aspect"]}
        got = (needed, records) | "ImageBytes" >> ImageBytes(self.pairs_cfg, rules)
        counters = [got.counters]
        outcomes = ({"url": got.url_sha | "BySha" >> beam.MapTuple(lambda url, tagged: (tagged[1], url)),
                     "image": got.decoded}
                    | "JoinDecoded" >> beam.CoGroupByKey() | "UrlOutcome" >> beam.FlatMap(_url_outcomes))
        refused = (got.failed
                   | "FailOutcome" >> beam.MapTuple(lambda url, reason, detail: (url, ("fail", reason, detail))))
        by_doc = ({"doc_ids": refs, "outcome": (outcomes, refused) | "AllOutcomes" >> beam.Flatten()}
                  | "JoinUrl" >> beam.CoGroupByKey()
                  | "ToDocs" >> beam.FlatMap(lambda e: [(d, (e[0], e[1]["outcome"][0])) for d in e[1]["doc_ids"]]))
        attached = ({"doc": docs | "KeyDocs" >> beam.Map(lambda d: (d["id"], d)), "images": by_doc}
                    | "JoinDocs" >> beam.CoGroupByKey()
                    | "Attach" >> beam.ParDo(_AttachImages(self.cfg)).with_outputs(DROPPED, COUNTERS, "used",
                                                                                   main="docs"))
        counters.append(attached[COUNTERS])
        images = ({"used": attached.used | "DistinctUsed" >> beam.Distinct(),
                   "image": got.decoded | "KeepDecoded" >> beam.Filter(lambda e: e[1][0] == _IMG)}
                  | "JoinUsed" >> beam.CoGroupByKey()
                  | "UsedImages" >> beam.FlatMap(lambda e: [e[1]["image"][0][1]] if e[1]["used"] else []))
        return attached.docs, images, attached[DROPPED], counters | "AllCounters" >> beam.Flatten()


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
class InterleavedImagesStage(Stage):
    """Stage 2: the images of the surviving documents, each URL once, from the WARC's image
    responses of the run's one read (else the fetcher when `image_pairs.fetch.enabled`), decoded once
    per body with the pairs branch's defensive decoder and limits under this branch's `min_side` and
    `max_aspect`, content-addressed into `OUT/images/interleaved/`; each image node gets its sha256,
    size and visual tokens (`interleaved.vision`); failed and repeated images are removed (counted per
    reason under `images/`: `images/in` = `images/kept` + the reasons + `images/repeated_in_doc`, plus
    the nodes of dropped documents) and documents keep 1 to `max_images` images."""

    name, starts_group, schema = "interleaved_images", True, INTERLEAVED_SCHEMA
    settings_from, outputs = ("interleaved", "image_pairs", "write"), ("images/interleaved",)
    reasons = ("no_images", "too_many_images")

    def build(self, p, cfg, docs, root):
        from pipelines.image_pairs import IMAGE_SCHEMA
        from pipelines.stages import read_warcs

        kept, images, drops, counters = ((docs, read_warcs(p, cfg).image)
                                         | "interleaved_images/Attach" >> AttachImages(cfg["interleaved"],
                                                                                       cfg["image_pairs"]))
        written = images | "interleaved_images/WriteImages" >> io.WriteSortedParquet(
            io.join(root, "images", "interleaved"), IMAGE_SCHEMA, cfg["write"]["shards"])
        return Built(kept, drops, counters, (written,))


@register
class InterleavedWriteStage(WriteStage):
    """The interleaved documents, `OUT/docs/interleaved`: sharded and sorted by id as the text documents
    (`write.shards`), byte-identical whatever the worker count."""

    name, config, settings_from = "interleaved_write", Section, ("write",)
    outputs, folder, doc_schema = ("docs/interleaved",), "docs/interleaved", INTERLEAVED_SCHEMA
