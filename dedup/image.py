"""The image–alt-text branch on Beam (SPEC §1.2): pages and WARC image records in, deduplicated
image–text pairs and a content-addressed image store out. Cheap steps run first, so that bytes are
read, fetched and decoded only for references that survived the text-side filters (the increasing-cost
order of the spec's interleaved branch, and img2dataset's "filter URLs before downloading").

  pages --ExtractRefs--> refs (img tags) --check_image_ref--> drops: no_src, empty_alt, tracking_pixel, ...
  refs' distinct URLs  x  WARC image records, CoGroupByKey by URL (a key holds one URL marker and its
      few captures, so the Python SDK's per-key lists stay small) -> bytes, else fetch (SafeFetcher,
      DoFn with the fetcher and a thread pool built in setup()), else not_in_warc
  bytes --sha256--> one copy per sha256 (CombinePerKey) --decode_image--> size, format, pHash | reason
  refs ⋈ url->sha256 (GroupByKey by URL) ⋈ sha256->image (GroupByKey by sha256): the exact-duplicate
      group itself; one use survives per sha256, the others are image_exact_dup
  pHash near-duplicates (NearDupClusters below, connected components from dedup.near): image_near_dup
  CLIP/SigLIP relevance (optional): low_relevance; embedding near-duplicates (optional): image_semantic_dup
  -> pairs (one per surviving image) and image rows (OUT/images: bytes, width, height, format, phash)

Joins that can be hot (a logo on a million pages: one URL, one sha256, a million refs) are a Flatten +
GroupByKey read in two passes, as in dedup/near.py: the first pass finds the one special value (the
URL's sha256, the image, the best-ranked use), the second streams the members out.

Survivors, deterministic whatever the worker count or arrival order: among uses of one image, the
earliest capture (WARC-Date), then the smallest page URL, then the position on the page; among
near-duplicate images, the largest image (pixels, then bytes) first, so a thumbnail or recompressed
copy never displaces its original; with a relevance model, semantic duplicates keep the highest-scoring pair.

Near-duplicate candidates (`NearDupClusters`): a 64-bit pHash is cut into `bands` = 8 bands of 8 bits.
Two hashes within Hamming distance d differ in at most d bands, so they agree exactly on at least
8 - d bands: at d <= 5 at least 3. Keying on every combination of `key_bands` = 3 bands (56 keys of 24
bits) therefore puts every pair within distance 5 into a common bucket (multi-index hashing, Norouzi et
al. 2012: no false negatives at all), while 24-bit keys keep buckets small at billions of images
(8-bit single bands would put 1/256 of the corpus into each bucket). Any `key_bands` <= bands - threshold
keeps the guarantee. In a bucket, the `max_reps` smallest node ids are compared pairwise and every
other member is linked to the first of them it is similar to: exact for buckets up to `max_reps`
members, O(n · max_reps) beyond (a flood of identical hashes, e.g. blank images, costs n edges), with
the blind spot of dedup/near.py's star edges only there. Embeddings use the same machinery on a
SimHash of the embedding (random hyperplanes, Charikar 2002) with an exact cosine check.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from concurrent.futures import ThreadPoolExecutor
from itertools import combinations
from typing import NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import xxhash
from PIL import Image

from dedup.near import COUNTERS, DUPLICATES, ChooseSurvivor, ConnectedComponents
from filters.image import DEFAULT_FORMATS

DROPPED = "dropped"
PREFIX = "images/"

DEFAULTS = {
    # references and alt text (extract/images.py)
    "context_chars": 200,        # page text kept on each side of an image
    "max_html_bytes": 10 << 20,  # bigger pages are not parsed for images (counted)
    "timeout_ms": 5000,          # wall-clock guard per page
    "min_alt_chars": 5,          # LAION-5B; CJK characters count double
    "max_alt_chars": 1000,
    "alt_languages": None,       # e.g. [en, de]: fastText lid.176 on the alt text; None = any language
    "alt_lang_min_score": 0.5,
    # decoding (filters/image.py)
    "min_side": 150,             # px, both sides; also the width/height-attribute rule
    "max_aspect": 3.0,
    "max_pixels": Image.MAX_IMAGE_PIXELS,  # decompression-bomb limit (Pillow's default, 89.5 Mpx)
    "max_image_bytes": 20 << 20,
    "formats": list(DEFAULT_FORMATS),
    # images not in the input WARCs (extract/fetch.py)
    "fetch": {
        # off unless a config turns it on: the run then makes HTTP requests to hosts named in pages
        "enabled": False,
        "user_agent": "curate-imagebot/0.1",
        "max_bytes": 10 << 20,
        "timeout_s": 10.0,       # per URL, redirects, retries and robots.txt included
        "min_bytes_per_s": 1024,  # a slower response (after its first second) is abandoned: too_slow
        "retries": 2,
        "backoff_s": 1.0,
        "allow_private": False,  # True only for tests against 127.0.0.1
        "respect_robots": True,
        "threads": 16,           # concurrent fetches per worker
        "batch_size": 64,
    },
    "phash": {"threshold": 5, "bands": 8, "key_bands": 3, "max_reps": 32, "max_rounds": 10},
    "relevance": {
        "model": None,           # CLIPModel/SiglipModel path or hub name; None skips relevance (counted)
        "threshold": 0.28,       # LAION-5B's CLIP ViT-B/32 cut; set per model
        "device": "cpu",
        "batch_size": 32,
    },
    "embedding_dedup": {         # needs relevance.model (the same model's image embeddings)
        "enabled": False,
        "threshold": 0.95,       # cosine
        "bits": 128, "bands": 16, "key_bands": 2, "seed": 1, "max_reps": 32, "max_rounds": 10,
    },
}

PAIR_SCHEMA = pa.schema([
    ("id", pa.string()), ("page_id", pa.string()), ("page_url", pa.string()), ("warc_file", pa.string()),
    ("warc_date", pa.string()), ("img_url", pa.string()), ("position", pa.int64()), ("alt", pa.string()),
    ("context_before", pa.string()), ("context_after", pa.string()), ("image_sha256", pa.string()),
    ("width", pa.int64()), ("height", pa.int64()), ("format", pa.string()), ("phash", pa.string()),
    ("scores", pa.string())])
IMAGE_SCHEMA = pa.schema([
    ("id", pa.string()), ("sha256", pa.string()), ("bytes", pa.binary()), ("width", pa.int64()),
    ("height", pa.int64()), ("format", pa.string()), ("frames", pa.int64()), ("phash", pa.string())])


def resolve(config: dict | None) -> dict:
    """Defaults <- config (one level of nesting), unknown keys refused."""
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    for key, value in (config or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown images key {key!r}; known: {sorted(DEFAULTS)}")
        if isinstance(DEFAULTS[key], dict):
            unknown = set(value or {}) - set(DEFAULTS[key])
            if unknown:
                raise ValueError(f"unknown images.{key} keys {sorted(unknown)}; known: {sorted(DEFAULTS[key])}")
            cfg[key].update(value or {})
        else:
            cfg[key] = value
    ph = cfg["phash"]
    if ph["key_bands"] > ph["bands"] - ph["threshold"]:
        raise ValueError("images.phash: key_bands > bands - threshold loses pairs at the threshold distance")
    if cfg["embedding_dedup"]["enabled"] and not cfg["relevance"]["model"]:
        raise ValueError("images.embedding_dedup needs images.relevance.model")
    return cfg


def _count(key: str, n: int = 1) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(COUNTERS, (PREFIX + key, n))


def _drop(row: dict, reason: str, detail: str = "") -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(DROPPED, (_public(row), reason, detail))


def _public(row: dict) -> dict:
    """A pair/ref row without the bytes and vectors it carries between stages."""
    return {k: v for k, v in row.items() if k not in ("image", "embedding", "simhash")}


# ------------------------------------------------------------------------------- survivor ranks
def rank_first_use(row: dict):
    """Earliest capture, then page URL, then position on the page."""
    return row.get("warc_date") or "~", row["page_url"], row["position"]


def rank_largest(row: dict):
    """Most pixels first (an original beats its thumbnails), then most bytes (at equal size, the less
    compressed copy), then the first use."""
    return (-row["width"] * row["height"], -len(row["image"]["bytes"]), *rank_first_use(row))


def rank_most_relevant(row: dict):
    return (-json.loads(row["scores"]).get("clip", 0.0), *rank_largest(row))


# ---------------------------------------------------------------------------------- references
class _ExtractRefs(beam.DoFn):
    """Page -> (img URL, ref row) for each <img> that passes check_image_ref; the rest as drops. A page
    whose tags cannot be read (too large, undecodable, timed out) is one unit of `in`, dropped as
    `page_<why>`, so no page disappears from the stage's accounting.
    A page is {"id", "url", "warc_file", "warc_date"?, and "html" (str) or "payload" (bytes) with
    "http_charset"}; read-stage rows with a non-HTML "source" (WET text) are skipped."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.lid = None

    def setup(self):
        if self.cfg["alt_languages"]:
            from filters.language import LanguageIdentifier

            self.lid = LanguageIdentifier()

    def process(self, page):
        from extract.images import check_image_ref

        if page.get("source", "html") != "html":
            return
        yield _count("pages")
        refs, noai, failure = self._refs(page)
        if failure:  # its <img> tags cannot be known: the page itself is one unit of `in`, dropped
            yield _count(f"pages_{failure}")
            yield beam.pvalue.TaggedOutput(COUNTERS, ("in", 1))
            row = {"id": xxhash.xxh3_128_hexdigest(f"{page['id']}/page".encode()), "page_id": page["id"],
                   "page_url": page["url"], "warc_file": page.get("warc_file", ""),
                   "warc_date": page.get("warc_date", ""), "img_url": "", "position": -1, "alt": ""}
            yield _drop(row, f"page_{failure}")
            return
        if refs:
            yield _count("pages_with_img")
            yield beam.pvalue.TaggedOutput(COUNTERS, ("in", len(refs)))
        for ref in refs:
            row = {"id": xxhash.xxh3_128_hexdigest(f"{page['id']}/{ref.position}".encode()), "page_id": page["id"],
                   "page_url": page["url"], "warc_file": page.get("warc_file", ""),
                   "warc_date": page.get("warc_date", ""), "img_url": ref.url, "position": ref.position,
                   "alt": ref.alt, "context_before": ref.context_before, "context_after": ref.context_after,
                   "declared_width": ref.width, "declared_height": ref.height}
            reason = "page_noai" if noai else check_image_ref(ref, self.cfg, self.lid)
            if reason:
                yield _drop(row, reason)
            else:
                yield ref.url, row


    def _refs(self, page) -> tuple[list, bool, str]:
        """(image references, page opted out of AI use, failure: "" or why the page was not parsed)."""
        from extract.guard import DocumentTimeout, watchdog
        from extract.html import ExtractionError, decode_html
        from extract.images import extract_images, page_disallows_ai

        html = page.get("html")
        try:
            if html is None:
                payload = page.get("payload") or b""
                if len(payload) > self.cfg["max_html_bytes"]:
                    return [], False, "too_large"
                html = decode_html(payload, page.get("http_charset") or "").text
            if len(html) > self.cfg["max_html_bytes"]:
                return [], False, "too_large"
            with watchdog().limit(self.cfg["timeout_ms"] / 1000):
                refs = extract_images(html, page["url"], self.cfg["context_chars"])
                return refs, bool(refs) and page_disallows_ai(html), ""
        except ExtractionError:
            return [], False, "undecodable"
        except DocumentTimeout:
            return [], False, "timeout"


# ------------------------------------------------------------------------------------ image bytes
class _PickCapture(beam.DoFn):
    """(url, {"need": [...], "stored": [image records]}) -> (url, bytes) from the capture with the
    smallest sha256 (deterministic when a URL was captured more than once), a (url, reason, detail)
    refusal when the capture opted out of AI use, or the url under "missing"."""

    def __init__(self, agent: str):
        self.agent = agent

    def process(self, element):
        from extract.fetch import robots_tag_disallows_ai

        url, groups = element
        stored = list(groups["stored"])
        if not list(groups["need"]):
            if stored:
                yield _count("warc_records_unreferenced", len(stored))
            return
        if not stored:
            yield beam.pvalue.TaggedOutput("missing", url)
            return
        record = min(stored, key=lambda r: hashlib.sha256(r["payload"]).digest())
        if robots_tag_disallows_ai(record.get("x_robots_tag") or "", self.agent):
            yield beam.pvalue.TaggedOutput("failed", (url, "robots_noai", record["x_robots_tag"]))
            return
        yield _count("from_warc")
        yield url, record["payload"]


class _Fetch(beam.DoFn):
    """A batch of URLs -> (url, bytes) or (url, reason, detail) under "failed", fetched concurrently
    by one SafeFetcher per worker."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.fetcher = self.pool = None

    def setup(self):
        from extract.fetch import SafeFetcher

        c = self.cfg
        self.fetcher = SafeFetcher(c["user_agent"], c["max_bytes"], c["timeout_s"], c["retries"], c["backoff_s"],
                                   allow_private=c["allow_private"], respect_robots=c["respect_robots"],
                                   min_bytes_per_s=c["min_bytes_per_s"])
        self.pool = ThreadPoolExecutor(max_workers=c["threads"])

    def teardown(self):
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def process(self, urls):
        for url, result in zip(urls, self.pool.map(self.fetcher.fetch, urls)):
            if result.reason:
                yield _count(f"fetch/{result.reason}")
                yield beam.pvalue.TaggedOutput("failed", (url, result.reason, result.detail))
            else:
                yield _count("fetch/ok")
                yield url, result.bytes


def _hash_bytes(url_payload):
    url, payload = url_payload
    sha = hashlib.sha256(payload).hexdigest()
    yield url, (_SHA, sha)
    yield beam.pvalue.TaggedOutput("by_sha", (sha, payload))


def _any(values):
    """One of identical values (same sha256, same bytes)."""
    return next(iter(values))


class _Decode(beam.DoFn):
    """(sha256, bytes) -> (sha256, (IMG, image row)) or (sha256, (FAIL, reason, ""))."""

    def __init__(self, cfg: dict):
        self.cfg = cfg

    def process(self, element):
        from filters.image import decode_image

        sha, payload = element
        decoded = decode_image(payload, self.cfg)
        if isinstance(decoded, str):
            yield _count(f"rejected/{decoded}")
            yield sha, (_FAIL, decoded, "")
            return
        yield _count("decoded")
        yield sha, (_IMG, {"id": sha, "sha256": sha, "bytes": payload, "width": decoded.width,
                           "height": decoded.height, "format": decoded.format, "frames": decoded.frames,
                           "phash": f"{decoded.phash:016x}"})


# ------------------------------------------------------------------------------------------ joins
_REF, _SHA, _FAIL, _IMG, _ROOT = range(5)


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


class _AttachImage(beam.DoFn):
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
                yield {**_public(row), "image_sha256": sha, "width": image["width"], "height": image["height"],
                       "format": image["format"], "phash": image["phash"], "scores": "{}", "image": image}
        if uses > 1 and failure is None:
            yield _count("exact/clusters")


class _SplitByRoot(beam.DoFn):
    """(node, [(REF, pair)] + [(ROOT, root)]?) -> the pair itself when it is in no cluster, else
    (root, pair) under "clustered"."""

    def process(self, element):
        _, values = element
        root = next((v[1] for v in values if v[0] == _ROOT), None)
        for v in values:
            if v[0] == _REF:
                yield v[1] if root is None else beam.pvalue.TaggedOutput("clustered", (root, v[1]))


# --------------------------------------------------------------------------------- near duplicates
def band_keys(bits: int, nbits: int, bands: int, key_bands: int) -> list[str]:
    """One key per combination of `key_bands` of the `bands` equal slices of an nbits-bit hash."""
    width = nbits // bands
    mask = (1 << width) - 1
    values = [(bits >> (i * width)) & mask for i in range(bands)]
    return [f"{i}:" + ".".join(f"{values[b]:x}" for b in combo)
            for i, combo in enumerate(combinations(range(bands), key_bands))]


class HammingWithin:
    """similar(a, b) for members (node, bits, payload): Hamming distance of the bits <= threshold."""

    def __init__(self, threshold: int):
        self.threshold = threshold

    def __call__(self, a, b) -> bool:
        return (a[1] ^ b[1]).bit_count() <= self.threshold


class CosineAtLeast:
    """similar(a, b) for members (node, bits, float32 vector bytes): cosine >= threshold (unit vectors)."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def __call__(self, a, b) -> bool:
        return float(np.frombuffer(a[2], np.float32) @ np.frombuffer(b[2], np.float32)) >= self.threshold


class _BucketEdges(beam.DoFn):
    """(key, members) -> similar edges (larger node, smaller node). Pass 1 keeps the `max_reps`
    smallest nodes and compares them pairwise; pass 2 links every other member to its first similar
    representative."""

    def __init__(self, similar, max_reps: int, prefix: str):
        self.similar, self.max_reps, self.prefix = similar, max_reps, prefix

    def process(self, element):
        _, members = element  # (node, hex bits, payload): hex, as Beam's int coder stops at 63 bits
        reps = [(node, int(bits, 16), payload)
                for node, bits, payload in heapq.nsmallest(self.max_reps, members, key=lambda m: m[0])]
        if len(reps) < 2:
            return
        yield beam.pvalue.TaggedOutput(COUNTERS, (self.prefix + "buckets", 1))
        for i, j in combinations(range(len(reps)), 2):
            if self.similar(reps[i], reps[j]):
                yield reps[j][0], reps[i][0]
        if len(reps) < self.max_reps:
            return
        last = reps[-1][0]
        oversized = False
        for node, bits, payload in members:
            if node > last:
                oversized = True
                m = (node, int(bits, 16), payload)
                hub = next((r for r in reps if self.similar(m, r)), None)
                if hub is not None:
                    yield m[0], hub[0]
        if oversized:
            yield beam.pvalue.TaggedOutput(COUNTERS, (self.prefix + "buckets_over_max_reps", 1))


class NearDupClusters(beam.PTransform):
    """(node, (hex bits, payload)) -> ((node, component root) for every node with a similar neighbour,
    counters). Nodes are unique strings (sha256 here); see the module docstring for the banding."""

    def __init__(self, similar, nbits: int, bands: int, key_bands: int, max_reps: int, max_rounds: int,
                 prefix: str):
        super().__init__()
        self.similar, self.nbits, self.bands, self.key_bands = similar, nbits, bands, key_bands
        self.max_reps, self.max_rounds, self.prefix = max_reps, max_rounds, prefix

    def expand(self, nodes):
        nbits, bands, key_bands = self.nbits, self.bands, self.key_bands
        edges = (nodes
                 | "Bands" >> beam.FlatMapTuple(lambda node, bp: [(k, (node, bp[0], bp[1])) for k in
                                                                  band_keys(int(bp[0], 16), nbits, bands, key_bands)])
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "BucketEdges" >> beam.ParDo(_BucketEdges(self.similar, self.max_reps, self.prefix)).with_outputs(
                     COUNTERS, main="edges"))
        roots = edges.edges | "DistinctEdges" >> beam.Distinct() | "Components" >> ConnectedComponents(self.max_rounds)
        return roots, edges[COUNTERS]


class _DedupBy(beam.PTransform):
    """Pairs (one per image) -> survivors; near-duplicate images' pairs dropped with `reason`. `node`
    gives (node, (bits, payload)) for a pair; `rank` orders a cluster's pairs."""

    def __init__(self, clusters: NearDupClusters, node, rank, reason: str):
        super().__init__()
        self.clusters, self.node, self.rank, self.reason = clusters, node, rank, reason

    def expand(self, pairs):
        roots, bucket_counters = pairs | "Nodes" >> beam.Map(self.node) | "Clusters" >> self.clusters
        split = ((pairs | "KeyPairs" >> beam.Map(lambda p: (p["image_sha256"], (_REF, p))),
                  roots | "TagRoots" >> beam.MapTuple(lambda node, root: (node, (_ROOT, root))))
                 | "Flatten" >> beam.Flatten() | "GroupNodes" >> beam.GroupByKey()
                 | "SplitByRoot" >> beam.ParDo(_SplitByRoot()).with_outputs("clustered", main="alone"))
        reason = self.reason
        chosen = (split.clustered | "GroupClusters" >> beam.GroupByKey()
                  | "Survivor" >> beam.ParDo(ChooseSurvivor(self.rank, self.clusters.prefix)).with_outputs(
                      DUPLICATES, COUNTERS, main="kept"))
        drops = chosen[DUPLICATES] | "Drops" >> beam.MapTuple(
            lambda pair, survivor, size: (_public(pair), reason, survivor))
        kept = (split.alone, chosen.kept) | "Kept" >> beam.Flatten()
        return kept, drops, (bucket_counters, chosen[COUNTERS]) | "Counters" >> beam.Flatten()


def _phash_node(pair):
    return pair["image_sha256"], (pair["phash"], None)


def _embedding_node(pair):
    return pair["image_sha256"], (pair["simhash"], pair["embedding"])


# -------------------------------------------------------------------------------------- relevance
class _Score(beam.DoFn):
    """A batch of pairs -> each with scores.clip (cosine of image and alt embeddings), or dropped as
    low_relevance. With embedding dedup on, the pair also carries its unit image embedding and its
    SimHash. The model loads once per worker in setup()."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.scorer = self.planes = None

    def setup(self):
        from filters.image import ClipScorer

        self.scorer = ClipScorer(self.cfg["relevance"]["model"], self.cfg["relevance"]["device"])

    def _simhash(self, vectors: np.ndarray) -> list[str]:
        """SimHash bits of each row, as hex (see _BucketEdges)."""
        emb = self.cfg["embedding_dedup"]
        if self.planes is None:
            self.planes = np.random.default_rng(emb["seed"]).standard_normal((emb["bits"], vectors.shape[1]))
        signs = (vectors @ self.planes.T) > 0
        return [f"{int(''.join('1' if s else '0' for s in row), 2):0{len(row) // 4}x}" for row in signs]

    def process(self, batch):
        from filters.image import open_image

        images = [open_image(p["image"]["bytes"], self.cfg, 448)[0] for p in batch]
        img, txt = self.scorer.encode(images, [p["alt"] for p in batch])
        scores = (img * txt).sum(axis=1)
        dedup = self.cfg["embedding_dedup"]["enabled"]
        hashes = self._simhash(img) if dedup else [None] * len(batch)
        threshold = self.cfg["relevance"]["threshold"]
        for pair, vector, score, bits in zip(batch, img, scores, hashes):
            score = round(float(score), 6)
            pair = {**pair, "scores": json.dumps({**json.loads(pair["scores"]), "clip": score}, sort_keys=True)}
            yield _count("relevance/scored")
            if score < threshold:
                yield _drop(pair, "low_relevance", f"{score:.4f} < {threshold}")
            elif dedup:
                yield {**pair, "embedding": vector.astype(np.float32).tobytes(), "simhash": bits}
            else:
                yield pair


# --------------------------------------------------------------------------------------- transform
class ImagePairsResult(NamedTuple):
    pairs: beam.PCollection     # PAIR_SCHEMA rows, one per kept image
    images: beam.PCollection    # IMAGE_SCHEMA rows (id = sha256), one per kept pair's image
    dropped: beam.PCollection   # (ref row, reason, detail), one per dropped <img>
    counters: beam.PCollection  # (key, n) summed; "in" = <img> tags, "out" = pairs


def _pair_row(pair: dict) -> dict:
    return {name: pair.get(name) for name in PAIR_SCHEMA.names}


class ImagePairs(beam.PTransform):
    """(pages, image records) -> ImagePairsResult. Every <img> tag of every page ends as exactly one
    pair or one drop, so `in` = `out` + Σ dropped. Pages: see _ExtractRefs; image records:
    {"url", "payload", "content_type", "x_robots_tag"} (extract.images.image_record)."""

    def __init__(self, config: dict | None = None):
        super().__init__()
        self.cfg = resolve(config)

    def expand(self, pcolls):
        pages, records = pcolls
        cfg = self.cfg
        p = pages.pipeline
        counters, drops = [], []

        refs = pages | "ExtractRefs" >> beam.ParDo(_ExtractRefs(cfg)).with_outputs(DROPPED, COUNTERS, main="refs")
        counters.append(refs[COUNTERS])
        drops.append(refs[DROPPED])

        # bytes per distinct URL: the WARC capture, else a fetch
        needed = refs.refs | "Urls" >> beam.Keys() | "DistinctUrls" >> beam.Distinct()
        captures = ({"need": needed | "NeedMarker" >> beam.Map(lambda u: (u, True)),
                     "stored": records | "KeyRecords" >> beam.Map(lambda r: (r["url"], r))}
                    | "JoinCaptures" >> beam.CoGroupByKey()
                    | "PickCapture" >> beam.ParDo(_PickCapture(_agent(cfg))).with_outputs(
                        "missing", "failed", COUNTERS, main="bytes"))
        counters.append(captures[COUNTERS])
        failed = [captures.failed]
        by_url = [captures.bytes]
        if cfg["fetch"]["enabled"]:
            fetched = (captures.missing
                       | "BatchUrls" >> beam.BatchElements(min_batch_size=1, max_batch_size=cfg["fetch"]["batch_size"])
                       | "Fetch" >> beam.ParDo(_Fetch(cfg["fetch"])).with_outputs("failed", COUNTERS, main="bytes"))
            by_url.append(fetched.bytes)
            failed.append(fetched.failed)
            counters.append(fetched[COUNTERS])
        else:
            failed.append(captures.missing | "NotInWarc" >> beam.Map(lambda u: (u, "not_in_warc", "fetch disabled")))
        hashed = (by_url | "AllBytes" >> beam.Flatten()
                  | "Hash" >> beam.FlatMap(_hash_bytes).with_outputs("by_sha", main="url_sha"))

        # decode each distinct image once
        decoded = (hashed.by_sha | "OneCopy" >> beam.CombinePerKey(_any)
                   | "Decode" >> beam.ParDo(_Decode(cfg)).with_outputs(COUNTERS, main="images"))
        counters.append(decoded[COUNTERS])

        # refs -> sha256 (by URL), then the exact-duplicate group (by sha256)
        resolved = ((refs.refs | "TagRefs" >> beam.MapTuple(lambda url, row: (url, (_REF, row))),
                     hashed.url_sha,
                     failed | "AllFailed" >> beam.Flatten()
                     | "TagFailed" >> beam.MapTuple(lambda url, reason, detail: (url, (_FAIL, reason, detail))))
                    | "FlattenUrl" >> beam.Flatten() | "GroupUrl" >> beam.GroupByKey()
                    | "ResolveUrl" >> beam.ParDo(_ResolveUrl()).with_outputs(DROPPED, main="refs"))
        drops.append(resolved[DROPPED])
        exact = ((resolved.refs, decoded.images) | "FlattenSha" >> beam.Flatten()
                 | "GroupSha" >> beam.GroupByKey()
                 | "AttachImage" >> beam.ParDo(_AttachImage()).with_outputs(DROPPED, COUNTERS, main="pairs"))
        drops.append(exact[DROPPED])
        counters.append(exact[COUNTERS])

        ph = cfg["phash"]
        pairs, near_drops, near_counters = exact.pairs | "PhashDedup" >> _DedupBy(
            NearDupClusters(HammingWithin(ph["threshold"]), 64, ph["bands"], ph["key_bands"], ph["max_reps"],
                            ph["max_rounds"], PREFIX + "near/"),
            _phash_node, rank_largest, "image_near_dup")
        drops.append(near_drops)
        counters.append(near_counters)

        if cfg["relevance"]["model"]:
            scored = (pairs | "BatchPairs" >> beam.BatchElements(min_batch_size=1,
                                                                 max_batch_size=cfg["relevance"]["batch_size"])
                      | "Relevance" >> beam.ParDo(_Score(cfg)).with_outputs(DROPPED, COUNTERS, main="pairs"))
            pairs = scored.pairs
            drops.append(scored[DROPPED])
            counters.append(scored[COUNTERS])
            emb = cfg["embedding_dedup"]
            if emb["enabled"]:
                pairs, sem_drops, sem_counters = pairs | "EmbeddingDedup" >> _DedupBy(
                    NearDupClusters(CosineAtLeast(emb["threshold"]), emb["bits"], emb["bands"], emb["key_bands"],
                                    emb["max_reps"], emb["max_rounds"], PREFIX + "semantic/"),
                    _embedding_node, rank_most_relevant, "image_semantic_dup")
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
            dropped=drops | "AllDrops" >> beam.Flatten(),
            counters=counters | "AllCounters" >> beam.Flatten() | "SumCounters" >> beam.CombinePerKey(sum))


def _agent(cfg: dict) -> str:
    """The robots product token of the configured user agent."""
    return cfg["fetch"]["user_agent"].split("/", 1)[0].strip()
