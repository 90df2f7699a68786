"""Repeated images on Beam: clusters of similar images (pHash, or embedding SimHash) and the one
survivor of each, used by the image-text branch (pipelines/image_pairs.py); and image URLs used on so
many documents that they are site chrome (`SplitFrequentImageUrls`, for the interleaved documents).

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

import heapq
from itertools import combinations

import apache_beam as beam
import numpy as np

from dedup.near import COUNTERS, ChooseSurvivors, ConnectedComponents


def public_row(row: dict) -> dict:
    """A pair/ref row without the bytes and vectors it carries between stages."""
    return {k: v for k, v in row.items() if k not in ("image", "embedding", "simhash")}


# ------------------------------------------------------------------------------- survivor ranks
def rank_first_use(row: dict):
    """Earliest capture, then page URL, then the page's own <img> before a recycled copy of it, then
    position on the page."""
    return row.get("warc_date") or "~", row["page_url"], row.get("origin") == "recycled", row["position"]


def rank_largest(row: dict):
    """Most pixels first (an original beats its thumbnails), then most bytes (at equal size, the less
    compressed copy), then the first use."""
    return (-row["width"] * row["height"], -len(row["image"]["bytes"]), *rank_first_use(row))


def rank_most_relevant(row: dict):
    return (-dict(row["scores"]).get("clip", 0.0), *rank_largest(row))


_REF, _ROOT = "ref", "root"  # tags of the pair/cluster-root join


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
def bit_band_keys(bits: int, nbits: int, bands: int, key_bands: int) -> list[str]:
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
                 | "Bands" >> beam.FlatMapTuple(
                     lambda node, bp: [(k, (node, bp[0], bp[1]))
                                       for k in bit_band_keys(int(bp[0], 16), nbits, bands, key_bands)])
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "BucketEdges" >> beam.ParDo(_BucketEdges(self.similar, self.max_reps, self.prefix)).with_outputs(
                     COUNTERS, main="edges"))
        roots = edges.edges | "DistinctEdges" >> beam.Distinct() | "Components" >> ConnectedComponents(self.max_rounds)
        return roots, edges[COUNTERS]


class DedupPairs(beam.PTransform):
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
        chosen = split.clustered | "Survivors" >> ChooseSurvivors(self.rank, self.clusters.prefix)
        drops = chosen.duplicates | "Drops" >> beam.MapTuple(
            lambda pair, survivor, size: (public_row(pair), reason, survivor))
        kept = (split.alone, chosen.kept) | "Kept" >> beam.Flatten()
        return kept, drops, (bucket_counters, chosen.counters) | "Counters" >> beam.Flatten()


def phash_node(pair):
    return pair["image_sha256"], (pair["phash"], None)


def embedding_node(pair):
    return pair["image_sha256"], (pair["simhash"], pair["embedding"])


# ------------------------------------------------------------------------------- URL frequency
_COUNT = "count"


class _SplitByFrequency(beam.DoFn):
    """(url, [(COUNT, pages)] + [(REF, (doc_id, ref))...]) -> the refs, under "frequent" when the URL
    is on more than `max_pages` documents. The group is read twice: its count first, then the refs
    stream out (a logo on a million pages is never held in memory)."""

    def __init__(self, max_pages: int):
        self.max_pages = max_pages

    def process(self, element):
        _, values = element
        pages = next((v[1] for v in values if v[0] == _COUNT), 0)
        frequent = pages > self.max_pages
        for v in values:
            if v[0] == _REF:
                yield beam.pvalue.TaggedOutput("frequent", (v[1], pages)) if frequent else v[1]


class SplitFrequentImageUrls(beam.PTransform):
    """(doc_id, ref) pairs, `ref["url"]` the image URL, as a PCollection or a tuple of them -> (kept pairs,
    tag "frequent": ((doc_id, ref), pages)). An image URL used on more than `max_pages` distinct documents
    of the corpus is site chrome (logos, buttons, banners): OBELICS removes those with `max_pages` = 10. The
    count is a Beam combine over distinct (url, document) pairs, so a page that repeats an image counts
    once."""

    def __init__(self, max_pages: int = 10):
        super().__init__()
        self.max_pages = max_pages

    def expand(self, refs):
        # Each input's pairs are keyed where they are made and only the keyed pairs are flattened, into the
        # groupings: a Flatten of the pairs themselves would be a stage of its own that decodes every one
        # again (in the runner process, on a local run).
        parts = refs if isinstance(refs, tuple) else (refs,)
        url_docs = [part | f"UrlDoc{k or ''}" >> beam.MapTuple(lambda doc_id, ref: ((ref["url"], doc_id), None))
                    for k, part in enumerate(parts)]
        pages = (url_docs | "AllUrlDocs" >> beam.Flatten()
                 | "DistinctUrlDoc" >> beam.GroupByKey()  # straight into the grouping: no stage for the Flatten
                 | "One" >> beam.MapTuple(lambda url_doc, _: (url_doc[0], 1))
                 | "PagesPerUrl" >> beam.CombinePerKey(sum))
        tagged = [part | f"TagRef{k or ''}" >> beam.MapTuple(lambda doc_id, ref: (ref["url"], (_REF, (doc_id, ref))))
                  for k, part in enumerate(parts)]
        return ((pages | "TagCount" >> beam.MapTuple(lambda url, n: (url, (_COUNT, n))), *tagged)
                | "Flatten" >> beam.Flatten() | "GroupUrl" >> beam.GroupByKey()
                | "Split" >> beam.ParDo(_SplitByFrequency(self.max_pages)).with_outputs("frequent", main="kept"))
