"""Interleaved image-text documents from web pages, in the report's increasing-cost order:

1. before any image is decoded: `interleaved` (each HTML page an ordered list of text and image nodes,
   extract/interleaved.py, each PDF the same from its text blocks and embedded images in reading order,
   extract/pdf.py in a child process; image nodes that fail the URL rules (no usable URL, `data:` URIs, tracking
   pixels, icons, chrome words, declared sizes below `min_side`), sit in page chrome, come from a page
   that opts out of AI use, or whose URL is on more than `max_pages_per_url` documents of the corpus
   (OBELICS's site-chrome rule, a Beam combine) are removed; a document left with no image is dropped
   as `no_images`, its text stays in the text branch), then `interleaved_text` (the text branch's
   language, quality and synthetic verdicts on the document's text), `interleaved_exact_dedup` and
   `interleaved_near_dedup` (the text branch's dedup, among documents with the same image URLs);
2. `interleaved_images`: each image fetched from the WARC (or the fetcher) and decoded once, stored,
   sized, counted in visual tokens;
3. `interleaved_dedup`: images on too many documents by pHash, near-duplicate documents on text and
   images together (dedup/multimodal.py);
4. `interleaved_vlm`: the SmolVLM scorer (filters/vlm.py), skipped and counted with no model;
5. recycling: the documents stages 3-4 drop (and optionally stage 1's text verdicts) leave their image
   nodes in OUT/recycle/<stage>, which the pairs branch turns into pairs (pipelines/image_pairs.py);
then `interleaved_write` (OUT/docs/interleaved, sorted shards).

Accounting of stage 1, per document: `in` = HTML pages + PDFs, `out` = documents kept, dropped =
`no_images`, `page_too_large`, `page_undecodable`, `page_timeout` and `page_error` (the page's DOM walk ran
past `timeout_ms` or its library failed on it; the detail names the step), `duplicate_record` (one id twice,
among the documents with an image),
and a PDF's reason (PDF_REASONS). Per image,
counters `images/in`, `images/kept`, `images/chrome`, `images/<URL rule reason>` and
`images/frequent_url` (in = kept + the others).
"""

from __future__ import annotations

import hashlib
import weakref
from typing import NamedTuple

import apache_beam as beam
import pyarrow as pa
from pydantic import Field, StrictBool, field_validator

from dedup.image import SplitFrequentImageUrls
from dedup.multimodal import DedupSameImages, ImageReach, image_set_key
from dedup.near import DUPLICATES, PARTITION, SURVIVOR_RULES
from extract.interleaved import CELL_SEPARATOR, recycle_candidates
from filters.image import DecodeRules
from filters.nodes import NodeRules, filter_text_nodes
from packing.vision import VisionPolicy
from pipelines import io
from pipelines.io import SCORES
from pipelines.image_pairs import ImagePairsConfig, PhashConfig, RelevanceConfig
from pipelines.stage import (COUNTERS, DROPPED, READS_INPUT, STAGES, Built, DocumentStage, DocumentStep, Drop, Section,
                             Stage, Tallying, drop_row, dropped, register, with_scores)
from pipelines.stages import (ApplyQualityRules, ExactDedupStage, IdentifyLanguage, NearDedupStage, ScoreSyntheticText,
                              WriteStage)

NODE = pa.struct([("type", pa.string()), ("text", pa.string()), ("image_url", pa.string()),
                  ("image_sha256", pa.string()), ("alt", pa.string()), ("caption", pa.string()),
                  ("width", pa.int32()), ("height", pa.int32()), ("visual_tokens", pa.int32()),
                  ("position", pa.int32()), ("phash", pa.string()), ("page", pa.int32())])
# One interleaved document. An image node's `position` is its <img> index on the page (as in the
# pairs branch), or its index in a PDF; `image_sha256`, `width`, `height`, `visual_tokens` and `phash`
# (64-bit pHash, hex) are filled when the images are fetched and decoded (stage 2), null before.
# `page`: the PDF page a node is on (1-based; null for web pages): where it changes, a page breaks.
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

    def policy(self) -> VisionPolicy:
        """The same settings as the packing library's VisionPolicy."""
        return VisionPolicy(patch=self.patch, min_side=self.min_side, max_side=self.max_side, merge=self.merge)


class InterleavedConfig(Section):
    max_html_bytes: int = Field(10 << 20, gt=0, description="bigger pages are not linearised (page_too_large)")
    timeout_ms: int = Field(5000, gt=0, description="wall-clock bound per page (page_timeout)")
    min_side: int = Field(150, ge=0, description="declared width or height below this drops the image (OBELICS "
                                                 "and the pairs branch: 150 px)")
    chrome_words: StrictBool = Field(True, description="drop image URLs naming site chrome (logo, avatar, banner, "
                                                       "ads, badge, button), as OBELICS's URL ban words")
    max_pages_per_url: int = Field(10, ge=1, description="an image URL on more documents than this is site chrome "
                                                         "(OBELICS: 10)")
    max_aspect: float = Field(3.0, gt=0, description="decoded: longer side / shorter side above this drops the image "
                                                     "(the pairs branch's 3: wide diagrams stay, banners from 3.9:1 "
                                                     "go); both sides must also reach min_side")
    max_images: int = Field(30, ge=1, description="a document with more images after decoding is too_many_images "
                                                  "(MINT-1T keeps 1-30)")
    pdf_timeout_ms: int = Field(60000, gt=0, description="wall-clock bound per PDF in the parser's child process "
                                                         "(pdf_timeout)")
    pdf_memory_mb: int = Field(2048, gt=0, description="address-space limit of the PDF parser's child process "
                                                       "(pdf_too_much_memory)")
    pdf_max_pages: int = Field(500, gt=0, description="longer PDFs are not parsed (pdf_too_many_pages)")
    vision: VisionConfig = Field(default_factory=VisionConfig)


PDF_REASONS = ("pdf_encrypted", "pdf_broken", "pdf_no_text_layer", "pdf_too_many_pages", "pdf_timeout",
               "pdf_parser_crashed", "pdf_too_much_memory")
# the embedded images of parsed PDFs, as the read stage's image records (stage 2 resolves them by URL)
PDF_IMAGE_SCHEMA = pa.schema([("id", pa.string()),  # hex of the URL: what the sorted writer shards by
                              ("url", pa.string()), ("payload", pa.binary()), ("content_type", pa.string()),
                              ("x_robots_tag", pa.string()), ("warc_date", pa.string())])


def needs_images(doc: dict) -> bool:
    """A web page without images is text only (it is in the text branch); a PDF's text is not, so a PDF
    document stays one without images."""
    return doc.get("kind") != "pdf"


def pdf_image_url(pdf_url: str, page: int, index: int) -> str:
    return f"{pdf_url}#page={page}&image={index}"


class _ParsePdf(Tallying):
    """A PDF response (OUT/docs/pdf row) -> its document (kind "pdf": text blocks and images in reading
    order, page numbers on the nodes; extract/pdf.py, run in a child process with a deadline and a
    memory limit: extract/sandbox.py) and its embedded images as image records (tag "images"); or a
    drop with the PDF's reason (PDF_REASONS). A scanned PDF (no text layer) is dropped, its page and
    image counts kept, so the stats show what OCR would recover."""

    def __init__(self, cfg: InterleavedConfig):
        self.cfg = cfg

    def process(self, pdf):
        from extract.sandbox import SandboxError, parse_pdf

        self.count("in")
        self.count("pdf/in")
        base = {k: pdf.get(k) for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
        try:
            parsed = parse_pdf(pdf["payload"], self.cfg.pdf_timeout_ms, self.cfg.pdf_memory_mb,
                               self.cfg.pdf_max_pages, self.cfg.min_side)
            reason, detail = parsed["reason"], parsed["detail"]
        except SandboxError as err:
            parsed, (reason, detail) = {"pages": 0, "nodes": []}, err.args
        images = [n for n in parsed["nodes"] if n["type"] == "image"]
        self.count("pdf/pages", parsed["pages"])
        if not reason:
            self.count("images/in", len(images))
        if reason:
            self.count(f"dropped/{reason}")
            if reason == "pdf_no_text_layer":
                self.count("pdf/no_text_layer_pages", parsed["pages"])
                self.count("pdf/no_text_layer_images", len(images))
            yield dropped(drop_row(base, "interleaved", reason, detail, text=""))
            return
        nodes = []
        for position, node in enumerate(parsed["nodes"]):
            if node["type"] == "text":
                nodes.append({"type": "text", "text": node["text"], "page": node["page"]})
                continue
            url = pdf_image_url(pdf["url"], node["page"], node["index"])
            nodes.append({"type": "image", "image_url": url, "caption": node.get("caption"), "position": position,
                          "page": node["page"]})
            yield beam.pvalue.TaggedOutput("images", {
                "id": hashlib.sha1(url.encode("utf-8")).hexdigest()[:32], "url": url, "payload": node["data"], "content_type": f"image/{node['format'].lower()}",
                "x_robots_tag": "", "warc_date": pdf.get("warc_date")})
        self.count("pdf/images", len(images))
        yield {**base, "kind": "pdf", "lang": "", "nodes": nodes, "scores": {}}


class _Linearise(Tallying):
    """Page -> its document (image nodes carry `position`), with the URL rules applied per image; a
    page that cannot be read, or with no image left, is one dropped document."""

    def __init__(self, cfg: InterleavedConfig):
        self.cfg = cfg

    def process(self, page):
        if page.get("source", "html") != "html":
            return
        self.count("in")
        doc, noai, failure, detail = self._linearise(page)
        base = {k: page.get(k) for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
        if failure:
            self.count(f"dropped/{failure}")
            yield dropped(drop_row(base, "interleaved", failure, detail, text=""))
            return
        from extract.images import check_image_url

        nodes = []
        images = len(doc.images) + len(doc.chrome_images)
        self.count("images/in", images)
        self.count("images/chrome", len(doc.chrome_images))
        for node in doc.nodes:
            if node.type == "text":
                nodes.append({"type": "text", "text": node.text})
                continue
            # a page that opts its images out of AI use (noai, noimageai) keeps none, as in the pairs branch
            reason = ("page_noai" if noai
                      else check_image_url(node.image, self.cfg.min_side, self.cfg.chrome_words))
            if reason:
                self.count(f"images/{reason}")
                continue
            nodes.append({"type": "image", "image_url": node.image.url, "alt": node.image.alt,
                          "caption": node.caption, "position": node.image.position})
        doc = {**base, "kind": "web", "lang": "", "nodes": nodes, "scores": {}}
        if not any(n["type"] == "image" for n in nodes):
            # no image passed the URL rules: `no_images` here (its text is the text branch's), not after
            # the join on ids that removes the frequent URLs, which 4 in 5 pages of mixed-dev would cross
            # for nothing
            self.count("dropped/no_images")
            yield dropped(drop_row({**doc, "nodes": []}, "interleaved", "no_images", text=""))
            return
        yield doc

    def _linearise(self, page):
        """extract.page_images.interleaved_view, made here unless the page carries it
        (`interleaved_view`, where a shared step made both image branches' views of it:
        pipelines/stages.py image_pages)."""
        from extract.page_images import interleaved_view

        return page["interleaved_view"] if "interleaved_view" in page else interleaved_view(page, self.cfg)


def _without_images(nodes: list[dict], removed) -> list[dict]:
    """The nodes without the image nodes `removed(node)` is true for, the text blocks that meet
    across a removed image joined (others stay apart: a PDF's blocks and pages)."""
    out, gap = [], False
    for node in nodes:
        if node["type"] == "image":
            if removed(node):
                gap = True
                continue
        elif gap and out and out[-1]["type"] == "text":
            out[-1] = {**out[-1], "text": out[-1]["text"] + "\n\n" + node["text"]}
            gap = False
            continue
        gap = False
        out.append(node)
    return out


class _Assemble(Tallying):
    """(doc id, {"doc0": [doc], "doc1": [], "frequent": [positions]}: the document, from the web pages
    or the PDFs) -> the document without those image nodes, adjacent text blocks joined; or a
    `no_images` drop when no image is left."""

    def process(self, element):
        _, group = element
        docs = [doc for tag, found in group.items() if tag != "frequent" for doc in found]
        doc, *repeats = sorted(docs, key=lambda d: (d["warc_file"] or "", d["warc_offset"] or 0))
        for repeat in repeats:  # one id read twice (a record copied into two files): one document
            self.count("dropped/duplicate_record")
            yield dropped(drop_row(repeat, "interleaved", "duplicate_record",
                                   f"{doc['warc_file']}@{doc['warc_offset']}", text=""))
        frequent = set(group["frequent"])
        if frequent:
            self.count("images/frequent_url", len(frequent))
        nodes = _without_images(doc["nodes"], lambda n: n["position"] in frequent)
        kept = sum(1 for n in nodes if n["type"] == "image")
        if kept == 0 and needs_images(doc):
            self.count("dropped/no_images")
            text = "\n\n".join(n["text"] for n in nodes)
            yield dropped(drop_row(doc, "interleaved", "no_images", text=text))
            return
        self.count("images/kept", kept)
        self.count("out")
        text = "\n\n".join(n["text"] for n in nodes if n["type"] == "text")  # what the text verdicts judge
        # the same text with other figures is another document: stage 1's dedup compares only documents
        # with the same image URLs (stage 3 compares the images themselves)
        partition = image_set_key(n["image_url"] for n in nodes if n["type"] == "image")
        yield {**doc, "nodes": [{name: n.get(name) for name in NODE.names} for n in nodes], "text": text,
               PARTITION: partition}


def _url_refs(doc: dict) -> list[tuple[str, dict]]:
    """(doc id, {url, position}) of each image node of a stage-1 document."""
    return [(doc["id"], {"url": n["image_url"], "position": n["position"]})
            for n in doc["nodes"] if n["type"] == "image"]


class InterleavedResult(NamedTuple):
    docs: beam.PCollection        # INTERLEAVED_SCHEMA rows
    dropped: tuple                # PCollections of drop rows (io.DROP_SCHEMA), one per step that drops
    counters: beam.PCollection    # (key, n), summed
    pdf_images: beam.PCollection  # the embedded images of the parsed PDFs (PDF_IMAGE_SCHEMA rows)


class BuildInterleavedDocs(beam.PTransform):
    """HTML pages (the read stage's documents) and `pdfs` (its PDF responses, optional) -> stage-1
    interleaved documents (module docstring)."""

    def __init__(self, cfg: InterleavedConfig = InterleavedConfig(), pdfs=None):
        super().__init__()
        self.cfg, self.pdfs = cfg, pdfs

    def expand(self, pages):
        web = pages | "Linearise" >> beam.ParDo(_Linearise(self.cfg)).with_outputs(DROPPED, COUNTERS, main="docs")
        parts = [web]
        if self.pdfs is not None:
            parts.append(self.pdfs | "ParsePdf" >> beam.ParDo(_ParsePdf(self.cfg)).with_outputs(
                DROPPED, COUNTERS, "images", main="docs"))
            pdf_images = parts[-1].images
        else:
            pdf_images = pages.pipeline | "NoPdfImages" >> beam.Create([])
        counts = [part[COUNTERS] for part in parts] | f"All {COUNTERS}" >> beam.Flatten()
        # Each part's documents are keyed, and their image references taken, where the part is made, and
        # the join takes each part's documents as an input of its own: a Flatten of the documents would
        # be a stage of its own that decodes every document again (in the runner process, on a local run).
        refs = tuple(part.docs | f"ImageRefs{k or ''}" >> beam.FlatMap(_url_refs) for k, part in enumerate(parts))
        split = refs | "FrequentUrls" >> SplitFrequentImageUrls(self.cfg.max_pages_per_url)
        frequent = split.frequent | "FrequentPositions" >> beam.Map(lambda r: (r[0][0], r[0][1]["position"]))
        keyed = {f"doc{k}": part.docs | f"KeyDocs{k or ''}" >> beam.Map(lambda d: (d["id"], d))
                 for k, part in enumerate(parts)}
        final = ({**keyed, "frequent": frequent}
                 | "JoinFrequent" >> beam.CoGroupByKey()
                 | "Assemble" >> beam.ParDo(_Assemble()).with_outputs(DROPPED, COUNTERS, main="docs"))
        counters = ((counts, final[COUNTERS]) | "AllCounters" >> beam.Flatten()
                    | "SumCounters" >> beam.CombinePerKey(sum))
        # Each step's drop rows are written where they are made: gathered by a Flatten they would be
        # decoded and written again by a stage of their own (in the runner process, on a local run).
        return InterleavedResult(final.docs, (*(part[DROPPED] for part in parts), final[DROPPED]), counters,
                                 pdf_images)


# -------------------------------------------------------------------------- stage 2: the images
def _url_outcomes(element):
    """(sha256, {"url": [urls], "image": [(IMG, row) | (FAIL, reason, "")]}) -> (url, outcome) for each
    URL whose bytes have that hash: ("ok", sha, width, height, phash) or ("fail", reason, detail)."""
    from pipelines.image_pairs import _FAIL

    sha, group = element
    (decoded,) = group["image"]
    outcome = ("fail", decoded[1], decoded[2]) if decoded[0] == _FAIL else (
        "ok", sha, decoded[1]["width"], decoded[1]["height"], decoded[1]["phash"])
    for url in group["url"]:
        yield url, outcome


class _AttachImages(Tallying):
    """(doc id, {"doc": [doc], "images": [(url, outcome)]}) -> the document with each image node's
    sha256, decoded size and visual tokens, the images that failed (counted by reason) or repeat an
    earlier node's bytes (`images/repeated_in_doc`) removed; dropped as `no_images` when none is left,
    `too_many_images` above `max_images`. Emits the sha256 of every image a kept document uses (tag
    "used"), for the image store."""

    def __init__(self, cfg: InterleavedConfig):
        self.cfg = cfg

    def process(self, element):
        from packing.vision import visual_tokens

        _, group = element
        (doc,) = group["doc"]
        outcomes = dict(group["images"])
        policy = self.cfg.vision.policy()
        seen, nodes = set(), []
        self.count("images/in", sum(1 for n in doc["nodes"] if n["type"] == "image"))
        for node in doc["nodes"]:
            if node["type"] == "image":
                outcome = outcomes[node["image_url"]]
                if outcome[0] == "fail":
                    self.count(f"images/{outcome[1]}")
                    node = None
                elif outcome[1] in seen:
                    self.count("images/repeated_in_doc")
                    node = None
                else:
                    _, sha, width, height, phash = outcome
                    seen.add(sha)
                    node = {**node, "image_sha256": sha, "width": width, "height": height, "phash": phash,
                            "visual_tokens": visual_tokens(width, height, policy)}
            nodes.append(node or {"type": "image", "removed": True})
        nodes = _without_images(nodes, lambda n: n.get("removed"))
        images = [n for n in nodes if n["type"] == "image"]
        doc = {**doc, "nodes": nodes}
        if not images and needs_images(doc):
            yield dropped(drop_row(doc, "interleaved_images", "no_images"))
            return
        if len(images) > self.cfg.max_images:
            yield dropped(drop_row(doc, "interleaved_images", "too_many_images", f"{len(images)} images"))
            return
        self.count("images/kept", len(images))
        self.count("visual_tokens", sum(n["visual_tokens"] for n in images))
        for n in images:
            yield beam.pvalue.TaggedOutput("used", (n["image_sha256"], True))
        yield doc


class AttachImages(beam.PTransform):
    """Stage 2 of the branch: (documents, image records: the read's image responses and the PDFs' images, a
    PCollection or a tuple of them) -> documents with their images (_AttachImages), the images they use
    (IMAGE_SCHEMA rows, one per sha256) and counters. Each image URL is resolved once: from the WARC's
    captures, else through the SSRF-safe fetcher when `image_pairs.fetch.enabled`, else `not_in_warc`; each
    distinct body is decoded once, with the pairs branch's defensive decoder and its limits, under this
    branch's size and aspect rules."""

    def __init__(self, cfg: InterleavedConfig, pairs_cfg: ImagePairsConfig):
        super().__init__()
        self.cfg, self.pairs_cfg = cfg, pairs_cfg

    def expand(self, pcolls):
        from pipelines.image_pairs import _IMG, ImageBytes

        docs, records = pcolls
        refs = docs | "Refs" >> beam.FlatMap(
            lambda d: sorted({(n["image_url"], d["id"]) for n in d["nodes"] if n["type"] == "image"}))
        needed = refs | "Urls" >> beam.Keys() | "DistinctUrls" >> beam.Distinct()
        got = (needed, records) | "ImageBytes" >> ImageBytes(self.pairs_cfg, decode_rules(self.cfg, self.pairs_cfg))
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


_STORE: "weakref.WeakKeyDictionary[beam.Pipeline, beam.PCollection]" = weakref.WeakKeyDictionary()


def image_store(p, root: str):
    """The interleaved image store (IMAGE_SCHEMA rows) for the stages after stage 2: its PCollection
    when stage 2 ran in this pipeline, else its files from an earlier run."""
    if p not in _STORE:
        _STORE[p] = io.read_parquet(p, io.join(root, "images", "interleaved"), "interleaved/ReadImageStore")
    return _STORE[p]


_INFO, _USE = "info", "use"


class _ImageToDocs(beam.DoFn):
    """(sha256, [(INFO, value)] + [(USE, doc id)...]) -> (doc id, (sha256, value)); two passes, so an
    image on a million documents is streamed, never held."""

    def process(self, element):
        sha, values = element
        info = next(v[1] for v in values if v[0] == _INFO)
        for v in values:
            if v[0] == _USE:
                yield v[1], (sha, info)


class JoinImagesToDocs(beam.PTransform):
    """(documents, (sha256, value) per image) -> (doc id, {"doc": [doc], "images": [(sha256, value)]}) for
    each document, with the value of each of its images: a two-pass join by sha256, then by document."""

    def expand(self, pcolls):
        docs, values = pcolls
        per_doc = ((values | "TagValues" >> beam.MapTuple(lambda sha, value: (sha, (_INFO, value))),
                    docs | "TagUses" >> beam.FlatMap(lambda d: [(n["image_sha256"], (_USE, d["id"]))
                                                                 for n in d["nodes"] if n["type"] == "image"]))
                   | "FlattenImages" >> beam.Flatten() | "GroupImages" >> beam.GroupByKey()
                   | "ToDocs" >> beam.ParDo(_ImageToDocs()))
        return ({"doc": docs | "KeyDocs" >> beam.Map(lambda d: (d["id"], d)), "images": per_doc}
                | "JoinDocs" >> beam.CoGroupByKey())


def _with_image_bytes(element):
    """(doc id, {"doc": [doc], "images": [(sha256, bytes)]}) -> (doc, its image bytes in node order)."""
    _, group = element
    (doc,) = group["doc"]
    data = dict(group["images"])
    return doc, [data[n["image_sha256"]] for n in doc["nodes"] if n["type"] == "image"]


class WithImageBytes(beam.PTransform):
    """(documents, image store rows) -> (doc, [image bytes in node order])."""

    def expand(self, pcolls):
        docs, images = pcolls
        return ((docs, images | "Bytes" >> beam.Map(lambda r: (r["sha256"], r["bytes"])))
                | "Join" >> JoinImagesToDocs() | "WithBytes" >> beam.Map(_with_image_bytes))


def decode_rules(interleaved: InterleavedConfig, pairs: ImagePairsConfig) -> DecodeRules:
    """The pairs branch's decoder limits under this branch's size and aspect rules."""
    return pairs.decode_rules()._replace(min_side=interleaved.min_side, max_aspect=interleaved.max_aspect)


# --------------------------------------------------------------- stage 3: image-aware filter and dedup
class InterleavedDedupConfig(Section):
    """Stage 3 (dedup/multimodal.py); the pHash distance and banding are the pairs branch's
    (`image_pairs.phash`), the survivor rule the text branch's (`near_dedup.survivor`)."""

    max_docs_per_image: int = Field(10, ge=1, description="an image (with its pHash neighbours) on more documents "
                                                          "than this is removed from all of them (OBELICS: 10)")
    text_threshold: float = Field(0.5, gt=0, le=1, description="word-set Jaccard at which two documents with the "
                                                               "same images are duplicates")
    max_reps: int = Field(32, gt=0, description="members of one image set (or pHash bucket) compared pairwise; "
                                                "the others are matched against these")


def _image_refs(doc):
    """(sha256, (documents, phash)) for each image node of a document (distinct within it: stage 2)."""
    return [(n["image_sha256"], (1, n["phash"])) for n in doc["nodes"] if n["type"] == "image"]


def _sum_uses(values):
    values = list(values)
    return sum(v[0] for v in values), min(v[1] for v in values)


class _RemoveFrequent(Tallying):
    """(doc id, {"doc": [doc], "images": [(sha256, (reach, identity))]}) -> the document without the
    images on more than `max_docs` documents and without later copies of an image it already shows
    (same identity: a resized or recompressed copy, `images/repeated_in_doc_near`; exact copies went
    in stage 2), with its joined `text` and `image_set` key; or a `no_images` drop."""

    def __init__(self, max_docs: int):
        self.max_docs = max_docs

    def process(self, element):
        _, group = element
        (doc,) = group["doc"]
        info = dict(group["images"])
        frequent = {sha for sha, (reach, _) in info.items() if reach > self.max_docs}
        shown, repeated = set(), set()
        for node in doc["nodes"]:
            if node["type"] == "image" and node["image_sha256"] not in frequent:
                identity = info[node["image_sha256"]][1]
                if identity in shown:
                    repeated.add(node["image_sha256"])
                else:
                    shown.add(identity)
        removed = frequent | repeated
        nodes = _without_images(doc["nodes"], lambda n: n["image_sha256"] in removed)
        if frequent:
            self.count("images/frequent_image", len(frequent))
        if repeated:
            self.count("images/repeated_in_doc_near", len(repeated))
        text = "\n\n".join(n["text"] for n in nodes if n["type"] == "text")
        images = [n["image_sha256"] for n in nodes if n["type"] == "image"]
        doc = {**doc, "nodes": nodes, "text": text}
        if not images and needs_images(doc):
            yield dropped(drop_row(doc, "interleaved_dedup", "no_images", "every image is on more than "
                                                                            f"{self.max_docs} documents"))
            return
        yield {**doc, "image_set": image_set_key(info[sha][1] for sha in images)}


def image_text(nodes: list[dict], i: int) -> str:
    """What image node `i` is judged against: its alt, else its figure caption, else the text block
    after it, else the one before it."""
    node = nodes[i]
    after = nodes[i + 1]["text"] if i + 1 < len(nodes) and nodes[i + 1]["type"] == "text" else ""
    before = nodes[i - 1]["text"] if i > 0 and nodes[i - 1]["type"] == "text" else ""
    return next((t.strip() for t in (node.get("alt"), node.get("caption"), after, before) if t and t.strip()), "")


class _ScoreRelevance(Tallying):
    """A batch of (doc, [image bytes]) -> each document without the images whose CLIP/SigLIP cosine
    with their text (image_text) is below `relevance.threshold` (`images/low_relevance`), its lowest
    kept cosine in scores.clip_min (rounded to 1e-4: batch composition never changes a byte); or
    `no_images` when none is left. The model (the pairs branch's `relevance` section) loads in setup()."""

    def __init__(self, relevance: RelevanceConfig, decode: DecodeRules):
        self.relevance, self.decode = relevance, decode
        self.scorer = None

    def setup(self):
        from filters.image import ClipScorer

        self.scorer = ClipScorer(self.relevance.model, self.relevance.device)

    def process(self, batch):
        from filters.image import open_image

        images, texts = [], []
        for doc, data in batch:
            images += [open_image(b, self.decode, 448)[0] for b in data]
            texts += [image_text(doc["nodes"], i) for i, n in enumerate(doc["nodes"]) if n["type"] == "image"]
        img, txt = self.scorer.encode(images, texts) if images else ([], [])
        cosines = iter([round(float(c), 4) for c in (img * txt).sum(axis=1)] if images else [])
        threshold = self.relevance.threshold
        for doc, _ in batch:
            score = {id(n): next(cosines) for n in doc["nodes"] if n["type"] == "image"}  # by node identity
            self.count("images/relevance/scored", len(score))
            low = {k for k, c in score.items() if c < threshold}
            if low:
                self.count("images/low_relevance", len(low))
            nodes = _without_images(doc["nodes"], lambda n: id(n) in low)
            kept = [c for k, c in score.items() if k not in low]
            doc = {**doc, "nodes": nodes}
            if not kept and needs_images(doc):
                yield dropped(drop_row(doc, "interleaved_dedup", "no_images",
                                       f"every image's relevance is below {threshold}"))
            else:
                yield with_scores(doc, clip_min=min(kept)) if kept else doc


class ImageAwareDedup(beam.PTransform):
    """Stage 3 (dedup/multimodal.py): documents -> (kept, duplicates (doc, survivor id, cluster size),
    drops, counters); with a relevance model, the kept documents' images are then scored against
    their text (_ScoreRelevance: `store` gives the bytes), else counted `images/relevance/skipped_no_model`."""

    def __init__(self, cfg: InterleavedDedupConfig, phash: PhashConfig, survivor: str,
                 relevance: RelevanceConfig | None = None, store=None, decode: DecodeRules | None = None):
        super().__init__()
        self.cfg, self.phash, self.rank = cfg, phash, SURVIVOR_RULES[survivor]
        self.relevance, self.store, self.decode = relevance, store, decode

    def expand(self, docs):
        ph, cfg = self.phash, self.cfg
        uses = docs | "Uses" >> beam.FlatMap(_image_refs)
        reach = (uses | "PerImage" >> beam.CombinePerKey(_sum_uses)
                 | "Swap" >> beam.MapTuple(lambda sha, n_phash: (sha, (n_phash[1], n_phash[0])))
                 | "Reach" >> ImageReach(ph.threshold, ph.bands, ph.key_bands, cfg.max_reps))
        filtered = ((docs, reach) | "JoinReach" >> JoinImagesToDocs()
                    | "RemoveFrequent" >> beam.ParDo(_RemoveFrequent(cfg.max_docs_per_image)).with_outputs(
                        DROPPED, COUNTERS, main="docs"))
        deduped = filtered.docs | "SameImages" >> DedupSameImages(self.rank, cfg.text_threshold, cfg.max_reps)
        counters, drops, kept = [filtered[COUNTERS], deduped[COUNTERS]], [filtered[DROPPED]], deduped.kept
        if self.relevance and self.relevance.model:
            scored = ((kept, self.store) | "ImageBytes" >> WithImageBytes()
                      | "Batch" >> beam.BatchElements(min_batch_size=1,
                                                      max_batch_size=max(1, self.relevance.batch_size // 4))
                      | "Relevance" >> beam.ParDo(_ScoreRelevance(self.relevance, self.decode)).with_outputs(
                          DROPPED, COUNTERS, main="docs"))
            kept = scored.docs
            counters.append(scored[COUNTERS])
            drops.append(scored[DROPPED])
        else:
            counters.append(kept | "RelevanceSkipped" >> beam.Map(
                lambda d: ("images/relevance/skipped_no_model", sum(n["type"] == "image" for n in d["nodes"]))))
        return (kept, deduped[DUPLICATES], drops | "Drops" >> beam.Flatten(),
                counters | "Counters" >> beam.Flatten())


# ------------------------------------------------------------------------------ stage 4: VLM scoring
class InterleavedVlmConfig(Section):
    """Stage 4: a SmolVLM-style model (transformers AutoModelForImageTextToText, e.g. Idefics3) rates
    each document 1-5 (filters/vlm.py). No such weights ship with this project or any package
    registry: with `model` null every document is counted `vlm/skipped_no_model` and passes unscored."""

    model: str | None = Field(None, description="local path or hub name of the VLM; null: not scored "
                                                "(vlm/skipped_no_model)")
    device: str = Field("cpu", description="torch device")
    max_side: int = Field(512, gt=0, description="images resized to this longest edge (512: ~67 tokens per image "
                                                 "on SmolVLM-256M)")
    max_text_chars: int = Field(2000, gt=0, description="document text shown to the model")
    batch_size: int = Field(8, gt=0, description="documents per forward pass")
    min_score: float = Field(3.0, ge=1, le=5, description="expected rating below this drops the document "
                                                          "(vlm_low_score); set it per model")


class _ScoreVlm(Tallying):
    """A batch of (doc, [image bytes in node order]) -> each document with scores.vlm (the expected
    rating, rounded to 1e-4 so that float noise from batch composition never changes a byte), or
    dropped as vlm_low_score (tag "recycle": the document, for its images). The model loads once per
    worker in setup()."""

    def __init__(self, cfg: InterleavedVlmConfig, decode: DecodeRules):
        self.cfg, self.decode = cfg, decode
        self.scorer = None

    def setup(self):
        from filters.vlm import VlmScorer

        c = self.cfg
        self.scorer = VlmScorer(c.model, c.device, c.max_side, c.max_text_chars)

    def process(self, batch):
        from filters.image import open_image

        inputs = [([open_image(b, self.decode, self.cfg.max_side)[0] for b in images],
                   "\n\n".join(n["text"] for n in doc["nodes"] if n["type"] == "text")) for doc, images in batch]
        for (doc, _), score in zip(batch, self.scorer.score(inputs)):
            doc = with_scores(doc, vlm=round(score, 4))
            self.count("vlm/scored")
            if doc["scores"]["vlm"] < self.cfg.min_score:
                yield dropped(drop_row(doc, "interleaved_vlm", "vlm_low_score",
                                       f"{doc['scores']['vlm']:.4f} < {self.cfg.min_score}"))
                yield beam.pvalue.TaggedOutput("recycle", doc)
            else:
                yield doc


class ScoreWithVlm(beam.PTransform):
    """(documents, image store rows) -> (kept, drops, recycle: dropped documents, counters): each document
    with the bytes of its images (a two-pass join by sha256, then by document), batched, scored."""

    def __init__(self, cfg: InterleavedVlmConfig, decode: DecodeRules):
        super().__init__()
        self.cfg, self.decode = cfg, decode

    def expand(self, pcolls):
        docs, images = pcolls
        split = docs | "HasImages" >> beam.Partition(
            lambda d, _: int(any(n["type"] == "image" for n in d["nodes"])), 2)
        scored = ((split[1], images) | "ImageBytes" >> WithImageBytes()
                  | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=self.cfg.batch_size)
                  | "Score" >> beam.ParDo(_ScoreVlm(self.cfg, self.decode)).with_outputs(
                      DROPPED, COUNTERS, "recycle", main="docs"))
        unscored = split[0] | "NoImages" >> beam.Map(lambda _: ("vlm/no_images", 1))  # a PDF without images
        kept = (scored.docs, split[0]) | "AllKept" >> beam.Flatten()
        return kept, scored[DROPPED], scored.recycle, (scored[COUNTERS], unscored) | "Counters" >> beam.Flatten()


# ------------------------------------------------------------------------------------------ stages
NODE_EXAMPLES = "node_examples"
EXAMPLES_PER_REASON = 3


def _example_key(example: dict) -> str:
    """A paragraph's place in the examples' order: a hash, so that the three shown are the same whatever
    the bundles (the smallest three), and spread over the run's pages."""
    return hashlib.sha1(f"{example['url']}\n{example['text']}".encode("utf-8")).hexdigest()


def write_node_examples(examples, root: str, stage: str):
    """("<kind>/<rule>", {url, text}) pairs -> OUT/<stage>/node_examples.json: {"<kind>/<rule>": three
    removed paragraphs}, for the report (a Beam combine per rule; the file holds at most 3 per rule)."""
    return (examples
            | f"{stage}/ExamplesPerRule" >> beam.combiners.Top.PerKey(EXAMPLES_PER_REASON, key=_example_key,
                                                                    reverse=True)
            | f"{stage}/AllExamples" >> beam.combiners.ToDict()
            | f"{stage}/WriteExamples" >> beam.Map(
                lambda found: io.write_json(io.join(root, stage, "node_examples.json"), found)))


# The quality settings that differ for interleaved documents, by kind, over the `quality` section: C4's
# curly-bracket and lorem-ipsum rules were written against JavaScript and template pages and drop the
# technical articles and papers this branch exists for (their code samples, their math, a paper that
# names the phrase); FineWeb's line rules judge the line format of a web page's main text, and the
# boilerplate model (fitted on news articles' main text) takes table rows and list items for menus and
# removes them from the copy the rules judge: the paragraph rules (filters/nodes.py) judge lines here,
# one paragraph at a time, as OBELICS does.
KIND_QUALITY = {"c4_filter_curly_bracket": False, "c4_filter_lorem_ipsum": False, "fineweb": False,
                "boilerplate_model": False}
# The paragraph rules that differ for PDFs, over `nodes`: a paper's or a textbook's prose carries inline
# math and dense citations ("(Le and Mikolov, 2014; Ganesh et al., 2016; ...)"), 0.30-0.40 of it not
# letters; number tables and equations on their own lie above (docs/design.md, "Interleaved documents").
PDF_NODES = {"max_special_characters": 0.4}


class InterleavedTextConfig(Section):
    """The interleaved branch's own text settings; the rest come from `language`, `quality` and `synthetic`."""

    nodes: NodeRules = Field(default_factory=NodeRules, description=(
        "paragraph rules before the document rules (OBELICS's node-level filtering; filters/nodes.py)"))
    pdf_nodes: dict = Field(default_factory=lambda: dict(PDF_NODES), description=(
        "`nodes` keys that differ for PDFs' text blocks"))
    web_quality: dict = Field(default_factory=lambda: dict(KIND_QUALITY), description=(
        "`quality` keys that differ for web pages' interleaved documents (the document rules after the "
        "paragraph rules)"))
    pdf_quality: dict = Field(default_factory=lambda: dict(KIND_QUALITY), description=(
        "`quality` keys that differ for PDFs' documents"))

    @field_validator("web_quality", "pdf_quality", "pdf_nodes")
    @classmethod
    def _override_keys(cls, value: dict, info) -> dict:
        """Overrides name keys of the section they override: `quality`, or `nodes` for `pdf_nodes`."""
        from filters.quality import QualityConfig

        section, model = ("nodes", NodeRules) if info.field_name == "pdf_nodes" else ("quality", QualityConfig)
        unknown = sorted(set(value) - set(model.model_fields))
        if unknown:
            raise ValueError(f"not keys of the {section} section: {', '.join(unknown)}")
        return value


def _kind(doc: dict) -> str:
    """The kind of document whose rules judge it: "pdf", or "web" (a web page's linearisation)."""
    return "pdf" if doc.get("kind") == "pdf" else "web"


class ScreenText(DocumentStep):
    """The text branch's language, quality and synthetic-text steps on a document's text (its text blocks
    joined), with the paragraph rules between language and quality: a page the text branch would reject
    is not worth fetching images for. Each paragraph (a web page's line, a PDF's text block) that fails
    a rule of filters/nodes.py is removed, then the document rules judge what is left, with the quality
    settings of its kind (`web_quality`, `pdf_quality` over the `quality` section), a web page's table
    rows without their cell separators (` | `, which Gopher's alphabetic-word rule would count as words
    without a letter). The document keeps its remaining nodes, images in place, and gains `lang` and
    every measured score. Counters `kind:<kind>/in` and `kind:<kind>/dropped:<reason>` (the document
    rules' cost per kind), `nodes/removed:<kind>/<rule>` and `nodes/docs_changed:<kind>/<rule>`; the removed
    paragraphs go out under NODE_EXAMPLES for the report's examples."""

    def __init__(self, stage: str, cfg: dict):
        from filters.quality import QualityConfig

        super().__init__(stage, cfg)
        own = cfg["interleaved_text"]
        self.language = IdentifyLanguage(stage, cfg["language"])
        self.quality = {kind: ApplyQualityRules(stage, QualityConfig.model_validate(
                            {**cfg["quality"].model_dump(), **getattr(own, f"{kind}_quality")}))
                        for kind in ("web", "pdf")}
        self.synthetic = ScoreSyntheticText(stage, cfg["synthetic"])
        self.nodes = {"web": own.nodes, "pdf": NodeRules.model_validate({**own.nodes.model_dump(), **own.pdf_nodes})}

    @property
    def steps(self):
        return [self.language, *self.quality.values(), self.synthetic]

    def setup(self):
        for sub in self.steps:
            sub.setup()

    def start_bundle(self):
        super().start_bundle()
        for sub in self.steps:
            sub._tally = self._tally  # their counters (the quality step's line steps) are this stage's

    def process(self, doc):
        self._removed = []
        for out in super().process(doc):
            yield out
            if isinstance(out, beam.pvalue.TaggedOutput) and out.tag == DROPPED:
                # its images, for the pairs branch when it recycles these (image_pairs.recycle)
                yield beam.pvalue.TaggedOutput("recycle", (doc, out.value["reason"]))
        for reason, paragraph in self._removed:  # set by step(): candidates for the report's examples
            yield beam.pvalue.TaggedOutput(NODE_EXAMPLES, (f"{_kind(doc)}/{reason}",
                                                           {"url": doc["url"], "text": paragraph[:300]}))

    def step(self, doc):
        kind = _kind(doc)
        self.count(f"kind:{kind}/in")
        judged = {**doc, "lang": "", "lang_score": 0.0}
        for sub in (self.language, self.quality[kind], self.synthetic):
            sub.prepare([judged])  # batched model calls (the LM head), one document at a time here
            out = sub.step(judged)
            if isinstance(out, Drop):
                self.count(f"kind:{kind}/dropped:{out.reason}")
                judged = out.doc or judged
                return Drop(out.reason, out.detail, self._verdict(doc, judged))
            judged = out
            if sub is self.language:  # the paragraphs are judged knowing the language, before the document
                judged = self._judge_paragraphs(judged, kind)
                if kind == "web":  # the document rules count a table's words, not its cell separators
                    judged = {**judged, "text": judged["text"].replace(CELL_SEPARATOR, " ")}
        return self._verdict(doc, judged)

    def _judge_paragraphs(self, doc: dict, kind: str) -> dict:
        nodes, removed = filter_text_nodes(doc["nodes"], self.nodes[kind], by_line=kind == "web")
        if not removed:
            return doc
        self._removed = removed
        for reason, _ in removed:
            self.count(f"nodes/removed:{kind}/{reason}")
        for reason in {reason for reason, _ in removed}:
            self.count(f"nodes/docs_changed:{kind}/{reason}")
        text = "\n\n".join(n["text"] for n in nodes if n["type"] == "text")
        return {**doc, "nodes": nodes, "text": text}

    @staticmethod
    def _verdict(doc: dict, judged: dict) -> dict:
        """The document with its remaining nodes and their text (the quality step's line filters judge a
        cleaned copy; the document's text stays its nodes'), the judged copy's language and scores."""
        nodes = judged.get("nodes", doc["nodes"])
        text = "\n\n".join(n["text"] for n in nodes if n["type"] == "text")
        return with_scores({**doc, "nodes": nodes, "text": text, "lang": judged["lang"],
                            "scores": judged.get("scores")}, lang_score=float(judged["lang_score"]))


@register
class InterleavedStage(Stage):
    """Interleaved image-text documents from the HTML pages and PDFs of the run's one read, stage 1 of
    the branch's increasing-cost order, before any image is decoded: DOM order linearisation
    (extract/interleaved.py), the image-URL rules, page-chrome images, and OBELICS's corpus-wide URL
    frequency rule (`max_pages_per_url`, a Beam combine); each PDF parsed by pypdfium2 in a child
    process with a deadline and a memory limit (extract/pdf.py, extract/sandbox.py): text blocks and
    embedded images (Form XObjects included) in column-aware XY-cut reading order, page numbers on
    the nodes, figure captions kept; its images' encoded bytes go to `OUT/images/pdf` for stage 2. A web
    document left with no image is `no_images` (its text stays in the text branch; where no image passed
    the URL rules its drop row leaves the text out); a PDF stays a document without images (its text is
    nowhere else). Its `in` counts HTML pages and PDFs; per image,
    `images/in` = `images/kept` + `images/chrome` + `images/<URL rule>` + `images/frequent_url`."""

    name, config, reads, starts_group = "interleaved", InterleavedConfig, READS_INPUT, True
    schema, settings_from, counts_itself = INTERLEAVED_SCHEMA, ("read", "write"), True
    outputs = ("images/pdf",)
    reasons = ("no_images", "page_too_large", "page_undecodable", "page_timeout", "page_error", "duplicate_record",
               *PDF_REASONS)

    def build(self, p, cfg, docs, root):
        from pipelines.stages import image_pages, read_warcs

        res = image_pages(p, cfg) | "interleaved/Build" >> BuildInterleavedDocs(getattr(cfg, self.name),
                                                                                 read_warcs(p, cfg).pdf)
        images = res.pdf_images | "interleaved/WritePdfImages" >> io.WriteSortedParquet(
            io.join(root, "images", "pdf"), PDF_IMAGE_SCHEMA, cfg.write.shards)
        return Built(res.docs, res.dropped, res.counters, (images,))


@register
class InterleavedTextStage(DocumentStage):
    """The text verdicts of the text branch (language, quality rules, synthetic-text scorers: the
    `language`, `quality` and `synthetic` sections and reasons) on each interleaved document's text, with
    OBELICS's paragraph rules first (filters/nodes.py: failing paragraphs removed, counted
    `nodes/removed:<kind>/<rule>`, three examples per rule in OUT/interleaved_text/node_examples.json)
    and the quality settings of the document's kind (`web_quality`,
    `pdf_quality`: C4's curly-bracket and lorem-ipsum rules, FineWeb's line rules and the boilerplate model
    off by default)."""

    name, step, schema, config = "interleaved_text", ScreenText, INTERLEAVED_SCHEMA, InterleavedTextConfig
    settings_from, outputs = ("language", "quality", "synthetic"), ("recycle/interleaved_text",)

    @property
    def reasons(self):
        return tuple(r for section in self.settings_from for r in STAGES[section].reasons)

    def build(self, p, cfg, docs, root):
        step = self.step(self.name, {section: getattr(cfg, section) for section in (*self.settings_from, self.name)})
        res = docs | self.name >> beam.ParDo(step).with_outputs(DROPPED, COUNTERS, "recycle", NODE_EXAMPLES,
                                                                 main="docs")
        candidates = res.recycle | f"{self.name}/Recycle" >> beam.FlatMapTuple(
            lambda doc, reason, stage=self.name: recycle_candidates(doc, f"{stage}/{reason}"))
        return Built(res.docs, res[DROPPED], res[COUNTERS], (write_recycle(candidates, root, self.name),
                                                             write_node_examples(res[NODE_EXAMPLES], root, self.name)))


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

        from pipelines.stage import writes_of

        pdf_images = (io.after(p, io.join(root, "images", "pdf", "part*.parquet"), writes_of(p, "interleaved"),
                               "interleaved_images/PdfImages")
                      | "interleaved_images/ReadPdfImages" >> beam.io.ReadAllFromParquet())
        records = (read_warcs(p, cfg).image, pdf_images)  # two inputs of the captures' join (ImageBytes)
        kept, images, drops, counters = (
            (docs, records) | "interleaved_images/Attach" >> AttachImages(cfg.interleaved, cfg.image_pairs))
        written = images | "interleaved_images/WriteImages" >> io.WriteSortedParquet(
            io.join(root, "images", "interleaved"), IMAGE_SCHEMA, cfg.write.shards)
        _STORE[p] = images  # the later stages' image bytes, in this pipeline
        return Built(kept, drops, counters, (written,))


def write_recycle(candidates, root: str, stage: str):
    """A stage's recycling candidates (extract.interleaved.recycle_candidates rows) -> OUT/recycle/<stage>,
    where the pairs branch reads them (pipelines/image_pairs.py)."""
    from pipelines.image_pairs import RECYCLE_SCHEMA

    return io.write_parquet(candidates, io.join(root, "recycle", stage), RECYCLE_SCHEMA, f"{stage}/WriteRecycle")


def _recycle(stage: str, reason: str):
    return lambda doc: recycle_candidates(doc, f"{stage}/{reason}")


@register
class InterleavedDedupStage(Stage):
    """Stage 3 (dedup/multimodal.py): images whose pHash neighbourhood is on more than
    `max_docs_per_image` documents leave every document (`images/frequent_image`) and a near copy of an
    image a document already shows leaves it (`images/repeated_in_doc_near`; a document left with no
    image is `no_images`), then near-duplicate documents judged on text and image set together
    (`multimodal_duplicate`, naming the survivor; the text branch's survivor rule), then, with the
    pairs branch's CLIP/SigLIP model configured (`image_pairs.relevance`), images whose cosine with
    their alt, caption or adjacent text is below its threshold (`images/low_relevance`; without a
    model, `images/relevance/skipped_no_model`). The dropped duplicates' images are recycling
    candidates for the pairs branch (OUT/recycle/interleaved_dedup)."""

    name, config, schema = "interleaved_dedup", InterleavedDedupConfig, INTERLEAVED_SCHEMA
    settings_from, outputs = ("interleaved", "image_pairs", "near_dedup"), ("recycle/interleaved_dedup",)
    reasons = ("no_images", "multimodal_duplicate")

    def build(self, p, cfg, docs, root):
        name = self.name
        relevance = cfg.image_pairs.relevance
        kept, dups, drops, counters = docs | f"{name}/Dedup" >> ImageAwareDedup(
            getattr(cfg, name), cfg.image_pairs.phash, cfg.near_dedup.survivor, relevance,
            image_store(p, root) if relevance.model else None, decode_rules(cfg.interleaved, cfg.image_pairs))
        dup_rows = dups | f"{name}/Drops" >> beam.MapTuple(
            lambda doc, survivor, size: drop_row(with_scores(doc, **{f"{name}_group_size": float(size)}), name,
                                                 "multimodal_duplicate", survivor))
        candidates = dups | f"{name}/Recycle" >> beam.FlatMapTuple(
            lambda doc, survivor, size, make=_recycle(name, "multimodal_duplicate"): make(doc))
        return Built(kept, (drops, dup_rows) | f"{name}/StageDrops" >> beam.Flatten(), counters,
                     (write_recycle(candidates, root, name),))


@register
class InterleavedVlmStage(Stage):
    """Stage 4, the costliest, on what stages 1-3 left: a SmolVLM-style model's expected 1-5 rating of
    each document from the rating tokens' probabilities (filters/vlm.py), images from
    OUT/images/interleaved resized to `max_side`; below `min_score` a document is `vlm_low_score` and its
    images are recycling candidates (OUT/recycle/interleaved_vlm). With no model configured every
    document passes unscored and is counted `vlm/skipped_no_model`: never a silent pass, never a fake score."""

    name, config, schema, starts_group = "interleaved_vlm", InterleavedVlmConfig, INTERLEAVED_SCHEMA, True
    settings_from, outputs = ("interleaved", "image_pairs"), ("recycle/interleaved_vlm",)
    reasons = ("vlm_low_score",)

    def build(self, p, cfg, docs, root):
        name, c = self.name, getattr(cfg, self.name)
        if not c.model:
            skipped = docs | f"{name}/Skipped" >> beam.Map(lambda _: ("vlm/skipped_no_model", 1))
            none = p | f"{name}/NoDrops" >> beam.Create([])
            zero = p | f"{name}/Zero" >> beam.Create([("vlm/skipped_no_model", 0)])
            counters = (skipped, zero) | f"{name}/Counters" >> beam.Flatten()
            return Built(docs, none, counters, (write_recycle(none, root, name),))
        kept, drops, rejected, counters = (
            (docs, image_store(p, root))
            | f"{name}/Score" >> ScoreWithVlm(c, decode_rules(cfg.interleaved, cfg.image_pairs)))
        candidates = rejected | f"{name}/Recycle" >> beam.FlatMap(_recycle(name, "vlm_low_score"))
        return Built(kept, drops, counters, (write_recycle(candidates, root, name),))


@register
class InterleavedWriteStage(WriteStage):
    """The interleaved documents, `OUT/docs/interleaved`: sharded and sorted by id as the text documents
    (`write.shards`), byte-identical whatever the worker count."""

    name, config, settings_from = "interleaved_write", Section, ("write",)
    outputs, folder, doc_schema = ("docs/interleaved",), "docs/interleaved", INTERLEAVED_SCHEMA

