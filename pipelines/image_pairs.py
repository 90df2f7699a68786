"""The image–alt-text branch on Beam (the DeepSeek-V4.1 report's image-text pairs): pages and WARC
image records in, deduplicated image–text pairs and a content-addressed image store out. Cheap steps
run first, so that bytes are read, fetched and decoded only for references that survived the text-side
filters (the increasing-cost order of the report's interleaved branch, and img2dataset's "filter URLs
before downloading").

  pages --ExtractRefs--> refs (img tags) --check_image_ref--> drops: no_src, empty_alt, tracking_pixel, ...
  refs' distinct URLs  x  WARC image records, CoGroupByKey by URL (a key holds one URL marker and its
      few captures, so the Python SDK's per-key lists stay small) -> bytes, else fetch (SafeFetcher,
      DoFn with the fetcher and a thread pool built in setup()), else not_in_warc
  bytes --sha256--> one copy per sha256 (CombinePerKey) --decode_image--> size, format, pHash | reason
  refs ⋈ url->sha256 (GroupByKey by URL) ⋈ sha256->image (GroupByKey by sha256): the exact-duplicate
      group itself; one use survives per sha256, the others are image_exact_dup
  pHash near-duplicates (dedup/image.py: NearDupClusters, connected components from dedup.near): image_near_dup
  CLIP/SigLIP relevance (optional): low_relevance; embedding near-duplicates (optional): image_semantic_dup
  -> pairs (one per surviving image) and image rows (OUT/images/pairs: bytes, width, height, format, phash)

Joins that can be hot (a logo on a million pages: one URL, one sha256, a million refs) are a Flatten +
GroupByKey read in two passes, as in dedup/near.py: the first pass finds the one special value (the
URL's sha256, the image, the best-ranked use), the second streams the members out.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import xxhash
from pydantic import Field, StrictBool, model_validator

from dedup.image import (CosineAtLeast, DedupPairs, HammingWithin, NearDupClusters, embedding_node,
                         phash_node, public_row, rank_first_use, rank_largest, rank_most_relevant)
from dedup.near import COUNTERS
from filters.image import DEFAULT_FORMATS, DecodeRules
from pipelines.stage import Section, Tallying

DROPPED = "dropped"
PREFIX = "images/"
_REF, _SHA, _FAIL, _IMG = "ref", "sha", "fail", "image"  # tags of the URL and sha256 joins


class FetchConfig(Section):
    """Images not in the input WARCs (extract/fetch.py). Off unless a config turns it on: the run then
    makes HTTP requests to hosts that pages name."""

    enabled: StrictBool = Field(False, description="fetch images missing from the WARCs (the SSRF-safe fetcher)")
    user_agent: str = Field("curate-imagebot/0.1", description="User-Agent, also the robots.txt agent name")
    max_bytes: int = Field(10 << 20, gt=0, description="larger responses are abandoned (too_large)")
    timeout_s: float = Field(10.0, gt=0, description="per URL, redirects, retries and robots.txt included")
    min_bytes_per_s: float = Field(1024, ge=0, description="a slower response (after its first second) is "
                                                           "abandoned: too_slow")
    retries: int = Field(2, ge=0, description="retries of a transient failure (connection, 429, 5xx)")
    backoff_s: float = Field(1.0, ge=0, description="first retry delay, doubled per retry")
    allow_private: StrictBool = Field(False, description="true only for tests against 127.0.0.1: never fetch "
                                                         "loopback/private/link-local/metadata addresses")
    respect_robots: StrictBool = Field(True, description="obey the host's robots.txt for user_agent")
    threads: int = Field(16, gt=0, description="concurrent fetches per worker")
    batch_size: int = Field(64, gt=0, description="URLs handed to one worker's thread pool at a time")


class PhashConfig(Section):
    """pHash near-duplicate images by multi-index hashing (module docstring)."""

    threshold: int = Field(5, ge=0, le=64, description="Hamming distance of near-duplicate 64-bit pHashes")
    bands: int = Field(8, gt=0, description="bands the 64-bit hash is cut into")
    key_bands: int = Field(3, gt=0, description="bands per bucket key; <= bands - threshold keeps every pair")
    max_reps: int = Field(32, gt=0, description="members of a bucket compared pairwise")
    max_rounds: int = Field(10, gt=0, description="connected-components rounds (dedup/near.py)")

    @model_validator(mode="after")
    def _no_lost_pairs(self):
        if self.key_bands > self.bands - self.threshold:
            raise ValueError("key_bands > bands - threshold loses pairs at the threshold distance")
        return self


class RelevanceConfig(Section):
    model: str | None = Field(None, description="CLIPModel/SiglipModel path or hub name; null skips relevance "
                                                "(counted as skipped_no_model)")
    threshold: float = Field(0.28, description="LAION-5B's CLIP ViT-B/32 cosine cut; set it per model")
    device: str = Field("cpu", description="torch device")
    batch_size: int = Field(32, gt=0, description="pairs per model call")


class EmbeddingDedupConfig(Section):
    """Semantic near-duplicates: SimHash of the relevance model's image embeddings, exact cosine check."""

    enabled: StrictBool = Field(False, description="needs relevance.model")
    threshold: float = Field(0.95, ge=-1, le=1, description="cosine similarity of duplicates")
    bits: int = Field(128, gt=0, description="SimHash bits (random hyperplanes, Charikar 2002)")
    bands: int = Field(16, gt=0, description="bands the SimHash is cut into")
    key_bands: int = Field(2, gt=0, description="bands per bucket key")
    seed: int = Field(1, description="hyperplane seed")
    max_reps: int = Field(32, gt=0, description="members of a bucket compared pairwise")
    max_rounds: int = Field(10, gt=0, description="connected-components rounds")


class RecycleConfig(Section):
    """Images of interleaved documents that later stages dropped, recycled into pairs (the report's
    "rejected documents recycled into pairs"): the first of the image's alt, its `<figure>` caption and
    the text block right after or before it (only up to `adjacent_max_chars`: a caption, not body
    text) that passes this branch's alt rules is its text; then the same bytes, decoding and dedup as
    every pair (a recycled copy of an image ranks after the page's own use)."""

    from_stages: list[Literal["interleaved_text", "interleaved_dedup", "interleaved_vlm"]] = Field(
        ["interleaved_dedup", "interleaved_vlm"],
        description="stages whose dropped documents are recycled; add interleaved_text for pages the text "
                    "verdicts dropped; [] = none")
    adjacent_max_chars: int = Field(300, ge=0, description="a text block next to the image is its caption only up to "
                                                           "this length (CC3M captions average ~10 words)")


class ImagePairsConfig(Section):
    """Image-alt-text pairs: references and alt text (extract/images.py), decoding (filters/image.py),
    fetching, exact/near/semantic dedup and relevance."""

    context_chars: int = Field(200, ge=0, description="page text kept on each side of an image")
    max_html_bytes: int = Field(10 << 20, gt=0, description="bigger pages are not parsed for images (counted)")
    timeout_ms: int = Field(5000, gt=0, description="wall-clock bound per page on reading its `<img>` tags (page_timeout)")
    min_alt_chars: int = Field(5, ge=0, description="LAION-5B's minimum; CJK characters count double")
    max_alt_chars: int = Field(1000, gt=0, description="longer alt text is not a caption")
    alt_languages: list[str] | None = Field(None, description="e.g. [en, de]: fastText lid.176 on the alt text; "
                                                              "null = any language")
    alt_lang_min_score: float = Field(0.5, ge=0, le=1, description="lid.176 probability the alt language needs")
    min_side: int = Field(150, ge=0, description="px, both sides; also the width/height-attribute rule")
    max_aspect: float = Field(3.0, gt=0, description="longer side / shorter side")
    max_pixels: int = Field(89_478_485, gt=0, description="decompression-bomb limit: Pillow's own "
                                                          "Image.MAX_IMAGE_PIXELS")
    max_image_bytes: int = Field(20 << 20, gt=0, description="larger image bodies are not decoded")
    formats: list[str] = Field(list(DEFAULT_FORMATS), description="Pillow formats decoded")
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    phash: PhashConfig = Field(default_factory=PhashConfig)
    relevance: RelevanceConfig = Field(default_factory=RelevanceConfig)
    embedding_dedup: EmbeddingDedupConfig = Field(default_factory=EmbeddingDedupConfig)
    recycle: RecycleConfig = Field(default_factory=RecycleConfig)

    @model_validator(mode="after")
    def _embeddings_need_model(self):
        if self.embedding_dedup.enabled and not self.relevance.model:
            raise ValueError("embedding_dedup needs relevance.model")
        return self

    def decode_rules(self) -> DecodeRules:
        """This branch's decoding limits (filters/image.py)."""
        return DecodeRules(self.min_side, self.max_aspect, self.max_pixels, self.max_image_bytes, tuple(self.formats))


PAIR_SCHEMA = pa.schema([
    ("id", pa.string()), ("page_id", pa.string()), ("page_url", pa.string()), ("warc_file", pa.string()),
    ("warc_date", pa.string()), ("img_url", pa.string()), ("position", pa.int64()), ("alt", pa.string()),
    ("context_before", pa.string()), ("context_after", pa.string()), ("image_sha256", pa.string()),
    ("width", pa.int64()), ("height", pa.int64()), ("format", pa.string()), ("phash", pa.string()),
    ("scores", pa.map_(pa.string(), pa.float64())),
    # "page": an <img> and its alt; "recycled": an image of an interleaved document a later stage
    # dropped (`recycled_from`: "<stage>/<reason>"), its text from `text_source` (alt, figcaption, adjacent)
    ("origin", pa.string()), ("text_source", pa.string()), ("recycled_from", pa.string())])
# A recycling candidate: an image node of a dropped interleaved document (extract.interleaved.recycle_candidates).
RECYCLE_SCHEMA = pa.schema([
    ("page_id", pa.string()), ("page_url", pa.string()), ("warc_file", pa.string()), ("warc_date", pa.string()),
    ("img_url", pa.string()), ("position", pa.int64()), ("alt", pa.string()), ("caption", pa.string()),
    ("text_before", pa.string()), ("text_after", pa.string()), ("recycled_from", pa.string())])
IMAGE_SCHEMA = pa.schema([
    ("id", pa.string()), ("sha256", pa.string()), ("bytes", pa.binary()), ("width", pa.int64()),
    ("height", pa.int64()), ("format", pa.string()), ("frames", pa.int64()), ("phash", pa.string())])


def _drop(row: dict, reason: str, detail: str = "") -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(DROPPED, (public_row(row), reason, detail))


# ---------------------------------------------------------------------------------- references
class _WithAltRules(Tallying):
    """Base of the DoFns that apply check_image_ref: the language identifier for `alt_languages`
    loads once per worker."""

    def __init__(self, cfg: ImagePairsConfig):
        self.cfg = cfg
        self.lid = None

    def setup(self):
        if self.cfg.alt_languages:
            from filters.language import LanguageIdentifier

            self.lid = LanguageIdentifier()


class _ExtractRefs(_WithAltRules):
    """Page -> (img URL, ref row) for each <img> that passes check_image_ref; the rest as drops. A page
    whose tags cannot be read (too large, undecodable, timed out, failed) is one unit of `in`, dropped as
    `page_<why>`, so no page disappears from the stage's accounting.
    A page is {"id", "url", "warc_file", "warc_date"?, and "html" (str) or "payload" (bytes) with
    "http_charset"}; read-stage rows with a non-HTML "source" (WET text) are skipped."""

    def process(self, page):
        from extract.images import check_image_ref

        if page.get("source", "html") != "html":
            return
        self.count(PREFIX + "pages")
        refs, noai, failure, detail = self._refs(page)
        if failure:  # its <img> tags cannot be known: the page itself is one unit of `in`, dropped
            self.count(PREFIX + f"pages_{failure.removeprefix('page_')}")
            self.count("in", 1)
            row = {"id": xxhash.xxh3_128_hexdigest(f"{page['id']}/page".encode()), "page_id": page["id"],
                   "page_url": page["url"], "warc_file": page.get("warc_file", ""),
                   "warc_date": page.get("warc_date", ""), "img_url": "", "position": -1, "alt": ""}
            yield _drop(row, failure, detail)
            return
        if refs:
            self.count(PREFIX + "pages_with_img")
            self.count("in", len(refs))
        for ref in refs:
            row = {"id": xxhash.xxh3_128_hexdigest(f"{page['id']}/{ref.position}".encode()), "page_id": page["id"],
                   "page_url": page["url"], "warc_file": page.get("warc_file", ""),
                   "warc_date": page.get("warc_date", ""), "img_url": ref.url, "position": ref.position,
                   "alt": ref.alt, "context_before": ref.context_before, "context_after": ref.context_after,
                   "declared_width": ref.width, "declared_height": ref.height, "origin": "page", "text_source": "alt",
                   "recycled_from": ""}
            reason = "page_noai" if noai else check_image_ref(ref, self.cfg, self.lid)
            if reason:
                yield _drop(row, reason)
            else:
                yield ref.url, row


    def _refs(self, page):
        """extract.page_images.pairs_view, made here unless the page carries it (`pairs_view`, where a
        shared step made both image branches' views of it: pipelines/stages.py image_pages)."""
        from extract.page_images import pairs_view

        return page["pairs_view"] if "pairs_view" in page else pairs_view(page, self.cfg)


class _RecycledRefs(_WithAltRules):
    """A recycling candidate (RECYCLE_SCHEMA) -> (img URL, ref row) with the first of its texts that
    passes check_image_ref (RecycleConfig), or a drop with the reason its alt failed. Each candidate
    is one unit of the stage's `in`."""

    def process(self, cand):
        from extract.images import ImageRef, check_image_ref

        self.count("in", 1)
        self.count(PREFIX + f"recycled/from/{cand['recycled_from']}")
        chars, limit = self.cfg.context_chars, self.cfg.recycle.adjacent_max_chars
        before, after = (cand["text_before"] or "")[-chars:], (cand["text_after"] or "")[:chars]
        row = {"id": xxhash.xxh3_128_hexdigest(f"{cand['page_id']}/{cand['position']}/recycled".encode()),
               **{k: cand[k] for k in ("page_id", "page_url", "warc_file", "warc_date", "img_url", "position")},
               "alt": cand["alt"], "context_before": before, "context_after": after, "origin": "recycled",
               "recycled_from": cand["recycled_from"]}
        texts = [("alt", cand["alt"]), ("figcaption", cand["caption"] or None)]
        texts += [("adjacent", t) for t in (cand["text_after"], cand["text_before"]) if t and len(t) <= limit]
        first_failure = None
        for source, text in texts:
            if text is None and source != "alt":
                continue
            ref = ImageRef(cand["page_url"], cand["img_url"], text, None, None, cand["position"], before, after)
            reason = check_image_ref(ref, self.cfg, self.lid)
            if reason is None:
                self.count(PREFIX + f"recycled/{source}")
                yield cand["img_url"], {**row, "alt": text, "text_source": source}
                return
            first_failure = first_failure or reason
        yield _drop({**row, "text_source": ""}, first_failure)


# ------------------------------------------------------------------------------------ image bytes
class _PickCapture(Tallying):
    """(url, {"need": [...], "stored": [image records], "stored1": [...], ...}) -> (url, bytes) from the
    capture with the smallest sha256 (deterministic when a URL was captured more than once), a (url,
    reason, detail) refusal when the capture opted out of AI use, or the url under "missing"."""

    def __init__(self, agent: str):
        self.agent = agent

    def process(self, element):
        from extract.fetch import robots_tag_disallows_ai

        url, groups = element
        stored = [record for tag in sorted(groups) if tag.startswith("stored") for record in groups[tag]]
        if not list(groups["need"]):
            if stored:
                self.count(PREFIX + "warc_records_unreferenced", len(stored))
            return
        if not stored:
            yield beam.pvalue.TaggedOutput("missing", url)
            return
        record = min(stored, key=lambda r: hashlib.sha256(r["payload"]).digest())
        if robots_tag_disallows_ai(record.get("x_robots_tag") or "", self.agent):
            yield beam.pvalue.TaggedOutput("failed", (url, "robots_noai", record["x_robots_tag"]))
            return
        self.count(PREFIX + "from_warc")
        yield url, record["payload"]


class _Fetch(Tallying):
    """A batch of URLs -> (url, bytes) or (url, reason, detail) under "failed", fetched concurrently
    by one SafeFetcher per worker."""

    def __init__(self, cfg: FetchConfig):
        self.cfg = cfg
        self.fetcher = self.pool = None

    def setup(self):
        from extract.fetch import SafeFetcher

        c = self.cfg
        self.fetcher = SafeFetcher(c.user_agent, c.max_bytes, c.timeout_s, c.retries, c.backoff_s,
                                   allow_private=c.allow_private, respect_robots=c.respect_robots,
                                   min_bytes_per_s=c.min_bytes_per_s)
        self.pool = ThreadPoolExecutor(max_workers=c.threads)

    def teardown(self):
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def process(self, urls):
        for url, result in zip(urls, self.pool.map(self.fetcher.fetch, urls)):
            if result.reason:
                self.count(PREFIX + f"fetch/{result.reason}")
                yield beam.pvalue.TaggedOutput("failed", (url, result.reason, result.detail))
            else:
                self.count(PREFIX + "fetch/ok")
                yield url, result.bytes


def _hash_bytes(url_payload):
    url, payload = url_payload
    sha = hashlib.sha256(payload).hexdigest()
    yield url, (_SHA, sha)
    yield beam.pvalue.TaggedOutput("by_sha", (sha, payload))


def _any(values):
    """One of identical values (same sha256, same bytes)."""
    return next(iter(values))


class _Decode(Tallying):
    """(sha256, bytes) -> (sha256, (IMG, image row)) or (sha256, (FAIL, reason, ""))."""

    def __init__(self, rules: DecodeRules):
        self.rules = rules

    def process(self, element):
        from filters.image import decode_image

        sha, payload = element
        decoded = decode_image(payload, self.rules)
        if isinstance(decoded, str):
            self.count(PREFIX + f"rejected/{decoded}")
            yield sha, (_FAIL, decoded, "")
            return
        self.count(PREFIX + "decoded")
        yield sha, (_IMG, {"id": sha, "sha256": sha, "bytes": payload, "width": decoded.width,
                           "height": decoded.height, "format": decoded.format, "frames": decoded.frames,
                           "phash": f"{decoded.phash:016x}"})


# ------------------------------------------------------------------------------------------ joins
class _ResolveUrl(beam.DoFn):
    """(url, [(SHA, sha) | (FAIL, reason, detail)] + [(REF, row)...]) -> (sha, (REF, row)), or every
    ref dropped with the URL's reason. Two passes: the URL's outcome, then the refs."""

    def process(self, element):
        url, values = element
        outcome = next((v for v in values if v[0] in (_SHA, _FAIL)), None)
        if outcome is None:
            raise RuntimeError(f"image url {url!r} has neither bytes nor a failure reason")
        for v in values:
            if v[0] == _REF:
                if outcome[0] == _FAIL:
                    yield _drop(v[1], outcome[1], outcome[2])
                else:
                    yield outcome[1], (_REF, v[1])


class _AttachImage(Tallying):
    """(sha, [(IMG, image) | (FAIL, reason, detail)] + [(REF, row)...]): the exact-duplicate group.
    The first pass finds the image and the best-ranked use; the second emits that use as a pair
    (carrying the image) and drops the other uses as image_exact_dup."""

    def process(self, element):
        sha, values = element
        image = failure = best = None
        uses = 0
        for v in values:
            if v[0] == _IMG:
                image = v[1]
            elif v[0] == _FAIL:
                failure = v
            else:
                uses += 1
                key = (rank_first_use(v[1]), v[1]["id"])
                if best is None or key < best:
                    best = key
        for v in values:
            if v[0] != _REF:
                continue
            row = v[1]
            if failure is not None:
                yield _drop(row, failure[1], failure[2])
            elif row["id"] != best[1]:
                yield _drop(row, "image_exact_dup", best[1])
            else:
                yield {**public_row(row), "image_sha256": sha, "width": image["width"], "height": image["height"],
                       "format": image["format"], "phash": image["phash"], "scores": {}, "image": image}
        if uses > 1 and failure is None:
            self.count(PREFIX + "exact/clusters")


# -------------------------------------------------------------------------------------- relevance
class _Score(Tallying):
    """A batch of pairs -> each with scores.clip (cosine of image and alt embeddings), or dropped as
    low_relevance. With embedding dedup on, the pair also carries its unit image embedding and its
    SimHash. The model loads once per worker in setup()."""

    def __init__(self, cfg: ImagePairsConfig):
        self.cfg, self.rules = cfg, cfg.decode_rules()
        self.scorer = self.planes = None

    def setup(self):
        from filters.image import ClipScorer

        self.scorer = ClipScorer(self.cfg.relevance.model, self.cfg.relevance.device)

    def _simhash(self, vectors: np.ndarray) -> list[str]:
        """SimHash bits of each row, as hex (see _BucketEdges)."""
        emb = self.cfg.embedding_dedup
        if self.planes is None:
            self.planes = np.random.default_rng(emb.seed).standard_normal((emb.bits, vectors.shape[1]))
        signs = (vectors @ self.planes.T) > 0
        return [f"{int(''.join('1' if s else '0' for s in row), 2):0{len(row) // 4}x}" for row in signs]

    def process(self, batch):
        from filters.image import open_image

        images = [open_image(p["image"]["bytes"], self.rules, 448)[0] for p in batch]
        img, txt = self.scorer.encode(images, [p["alt"] for p in batch])
        scores = (img * txt).sum(axis=1)
        dedup = self.cfg.embedding_dedup.enabled
        hashes = self._simhash(img) if dedup else [None] * len(batch)
        threshold = self.cfg.relevance.threshold
        for pair, vector, score, bits in zip(batch, img, scores, hashes):
            score = round(float(score), 6)
            pair = {**pair, "scores": dict(sorted({**dict(pair["scores"]), "clip": score}.items()))}
            self.count(PREFIX + "relevance/scored")
            if score < threshold:
                yield _drop(pair, "low_relevance", f"{score:.4f} < {threshold}")
            elif dedup:
                yield {**pair, "embedding": vector.astype(np.float32).tobytes(), "simhash": bits}
            else:
                yield pair


# --------------------------------------------------------------------------------------- transform
class ImageBytesResult(NamedTuple):
    url_sha: beam.PCollection   # (url, (SHA, sha256)) for each URL that has bytes
    decoded: beam.PCollection   # (sha256, (IMG, image row) | (FAIL, reason, "")), one per distinct body
    failed: beam.PCollection    # (url, reason, detail) for each URL without bytes
    counters: beam.PCollection  # (key, n)


class ImageBytes(beam.PTransform):
    """(distinct image URLs, the read's image records: a PCollection or a tuple of them) -> ImageBytesResult:
    each URL's bytes once, from its WARC capture (_PickCapture), else through the SSRF-safe fetcher when
    `fetch.enabled`, else `not_in_warc`; each distinct body decoded once under `decode` (default: `cfg`'s
    own limits). The pairs and interleaved branches share it."""

    def __init__(self, cfg: ImagePairsConfig, decode: DecodeRules | None = None):
        super().__init__()
        self.cfg, self.decode = cfg, decode or cfg.decode_rules()

    def expand(self, pcolls):
        needed, records = pcolls
        cfg = self.cfg
        # Several PCollections of records are each keyed where they are made and joined as inputs of their
        # own: a Flatten of them would be a stage of its own that decodes every image's bytes again.
        stored = {f"stored{k or ''}": part | f"KeyRecords{k or ''}" >> beam.Map(lambda r: (r["url"], r))
                  for k, part in enumerate(records if isinstance(records, tuple) else (records,))}
        captures = ({"need": needed | "NeedMarker" >> beam.Map(lambda u: (u, True)), **stored}
                    | "JoinCaptures" >> beam.CoGroupByKey()
                    | "PickCapture" >> beam.ParDo(_PickCapture(_agent(cfg))).with_outputs(
                        "missing", "failed", COUNTERS, main="bytes"))
        counters, failed, by_url = [captures[COUNTERS]], [captures.failed], [captures.bytes]
        if cfg.fetch.enabled:
            fetched = (captures.missing
                       | "BatchUrls" >> beam.BatchElements(min_batch_size=1, max_batch_size=cfg.fetch.batch_size)
                       | "Fetch" >> beam.ParDo(_Fetch(cfg.fetch)).with_outputs("failed", COUNTERS, main="bytes"))
            by_url.append(fetched.bytes)
            failed.append(fetched.failed)
            counters.append(fetched[COUNTERS])
        else:
            failed.append(captures.missing | "NotInWarc" >> beam.Map(lambda u: (u, "not_in_warc", "fetch disabled")))
        hashed = (by_url | "AllBytes" >> beam.Flatten()
                  | "Hash" >> beam.FlatMap(_hash_bytes).with_outputs("by_sha", main="url_sha"))
        decoded = (hashed.by_sha | "OneCopy" >> beam.CombinePerKey(_any)
                   | "Decode" >> beam.ParDo(_Decode(self.decode)).with_outputs(COUNTERS, main="images"))
        counters.append(decoded[COUNTERS])
        return ImageBytesResult(hashed.url_sha, decoded.images, failed | "AllFailed" >> beam.Flatten(),
                                counters | "AllCounters" >> beam.Flatten())


class ImagePairsResult(NamedTuple):
    pairs: beam.PCollection     # PAIR_SCHEMA rows, one per kept image
    images: beam.PCollection    # IMAGE_SCHEMA rows (id = sha256), one per kept pair's image
    dropped: tuple              # PCollections of (ref row, reason, detail), one per dropped <img>: one per
                                # step that drops, so that each step's drops are written where it runs
    counters: beam.PCollection  # (key, n) summed; "in" = <img> tags, "out" = pairs


def _pair_row(pair: dict) -> dict:
    return {name: pair.get(name) for name in PAIR_SCHEMA.names}


class ImagePairs(beam.PTransform):
    """(pages, image records[, recycling candidates]) -> ImagePairsResult. Every <img> tag of every
    page and every candidate ends as exactly one pair or one drop, so `in` = `out` + Σ dropped. Pages:
    see _ExtractRefs; image records: {"url", "payload", "content_type", "x_robots_tag"}
    (extract.images.image_record); candidates: RECYCLE_SCHEMA rows (_RecycledRefs)."""

    def __init__(self, config: ImagePairsConfig = ImagePairsConfig()):
        super().__init__()
        self.cfg = config

    def expand(self, pcolls):
        pages, records, *recycled = pcolls
        cfg = self.cfg
        p = pages.pipeline
        counters, drops = [], []

        refs = pages | "ExtractRefs" >> beam.ParDo(_ExtractRefs(cfg)).with_outputs(DROPPED, COUNTERS, main="refs")
        counters.append(refs[COUNTERS])
        drops.append(refs[DROPPED])
        ref_parts = [refs.refs]
        if recycled:
            again = recycled[0] | "RecycledRefs" >> beam.ParDo(_RecycledRefs(cfg)).with_outputs(
                DROPPED, COUNTERS, main="refs")
            counters.append(again[COUNTERS])
            drops.append(again[DROPPED])
            ref_parts.append(again.refs)

        # Each part's references are taken apart where the part is made, and only their URLs flattened:
        # a Flatten of the references themselves would be a stage of its own that decodes every one again
        # (in the runner process, on a local run).
        needed = ([part | f"Urls{k or ''}" >> beam.Keys() for k, part in enumerate(ref_parts)]
                  | "AllUrls" >> beam.Flatten() | "DistinctUrls" >> beam.Distinct())
        got = (needed, records) | "ImageBytes" >> ImageBytes(cfg)
        counters.append(got.counters)

        # refs -> sha256 (by URL), then the exact-duplicate group (by sha256)
        resolved = ((*(part | f"TagRefs{k or ''}" >> beam.MapTuple(lambda url, row: (url, (_REF, row)))
                       for k, part in enumerate(ref_parts)),
                     got.url_sha,
                     got.failed | "TagFailed" >> beam.MapTuple(lambda url, reason, detail: (url, (_FAIL, reason, detail))))
                    | "FlattenUrl" >> beam.Flatten() | "GroupUrl" >> beam.GroupByKey()
                    | "ResolveUrl" >> beam.ParDo(_ResolveUrl()).with_outputs(DROPPED, main="refs"))
        drops.append(resolved[DROPPED])
        exact = ((resolved.refs, got.decoded) | "FlattenSha" >> beam.Flatten()
                 | "GroupSha" >> beam.GroupByKey()
                 | "AttachImage" >> beam.ParDo(_AttachImage()).with_outputs(DROPPED, COUNTERS, main="pairs"))
        drops.append(exact[DROPPED])
        counters.append(exact[COUNTERS])

        ph = cfg.phash
        pairs, near_drops, near_counters = exact.pairs | "PhashDedup" >> DedupPairs(
            NearDupClusters(HammingWithin(ph.threshold), 64, ph.bands, ph.key_bands, ph.max_reps, ph.max_rounds,
                            PREFIX + "near/"),
            phash_node, rank_largest, "image_near_dup")
        drops.append(near_drops)
        counters.append(near_counters)

        if cfg.relevance.model:
            scored = (pairs | "BatchPairs" >> beam.BatchElements(min_batch_size=1,
                                                                 max_batch_size=cfg.relevance.batch_size)
                      | "Relevance" >> beam.ParDo(_Score(cfg)).with_outputs(DROPPED, COUNTERS, main="pairs"))
            pairs = scored.pairs
            drops.append(scored[DROPPED])
            counters.append(scored[COUNTERS])
            emb = cfg.embedding_dedup
            if emb.enabled:
                pairs, sem_drops, sem_counters = pairs | "EmbeddingDedup" >> DedupPairs(
                    NearDupClusters(CosineAtLeast(emb.threshold), emb.bits, emb.bands, emb.key_bands, emb.max_reps,
                                    emb.max_rounds, PREFIX + "semantic/"),
                    embedding_node, rank_most_relevant, "image_semantic_dup")
                drops.append(sem_drops)
                counters.append(sem_counters)
        else:
            skipped = PREFIX + "relevance/skipped_no_model"
            counters.append(pairs | "RelevanceSkipped" >> beam.Map(lambda _: (skipped, 1)))

        images = pairs | "ImageRows" >> beam.Map(lambda pair: pair["image"])
        rows = pairs | "PairRows" >> beam.Map(_pair_row)
        counters += [images | "CountStored" >> beam.Map(lambda _: (PREFIX + "stored", 1)),
                     rows | "CountOut" >> beam.Map(lambda _: ("out", 1)),
                     p | "ZeroCounters" >> beam.Create([("in", 0), ("out", 0), (PREFIX + "stored", 0)])]
        return ImagePairsResult(
            pairs=rows, images=images,
            dropped=tuple(drops),
            counters=counters | "AllCounters" >> beam.Flatten() | "SumCounters" >> beam.CombinePerKey(sum))


def _agent(cfg: ImagePairsConfig) -> str:
    """The robots product token of the configured user agent."""
    return cfg.fetch.user_agent.split("/", 1)[0].strip()
