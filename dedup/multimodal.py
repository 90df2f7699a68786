"""Image-aware dedup of interleaved documents on Beam (stage 3 of the interleaved branch).

1. Images that recur across documents. Each distinct image (sha256) is a node with its 64-bit pHash
   and the number of documents using it. Images within `threshold` bits are neighbours, found with
   the pairs branch's multi-index banding (dedup/image.py: every pair within the threshold shares a
   bucket key; a bucket's `max_reps` smallest nodes are compared pairwise, every other member against
   those). An image's reach is the documents that use it or a neighbour of it; above
   `max_docs_per_image` the image is site furniture or a stock picture (OBELICS's "image used on
   more than 10 pages" rule, on pixels instead of URLs, so CDN variants and recompressed copies
   count as one) and leaves every document. Neighbourhoods, not connected components: a chain of
   slightly different images never merges into one giant cluster, and the count is one shuffle.
2. Near-duplicate documents are judged on text and image set together. An image's identity is its
   smallest neighbour (sha256): copies of one figure agree on it. Documents are compared only with
   those that have the same set of image identities (a Beam key), and are duplicates when their word
   sets (unigrams; characters for Han/kana, dedup/minhash.py) reach Jaccard `text_threshold`: 0.5
   by default, low enough for the same figures under reworded text, which 5-gram MinHash at 0.5
   misses, while the same text with different figures never meets. In a key, the `max_reps`
   smallest ids are compared pairwise (single linkage among them) and every other member is
   matched to its first similar representative, streaming over the group; the survivor of a
   cluster is the text branch's (the smallest (rank(doc), id)).
"""

from __future__ import annotations

import heapq
from itertools import combinations

import apache_beam as beam
import xxhash

from dedup.image import bit_band_keys
from dedup.minhash import jaccard, shingles
from dedup.near import COUNTERS, DUPLICATES, size_bin


# ------------------------------------------------------------------------------- image reach
class _NeighbourPairs(beam.DoFn):
    """(band key, [(sha, phash hex, docs)]) -> (sha, (neighbour sha, its docs)) both ways for every
    pair within `threshold` bits: the representatives pairwise, every other member against them."""

    def __init__(self, threshold: int, max_reps: int):
        self.threshold, self.max_reps = threshold, max_reps

    def process(self, element):
        _, members = element
        reps = [(sha, int(bits, 16), n) for sha, bits, n in heapq.nsmallest(self.max_reps, members)]
        if len(reps) < 2:
            return
        pairs = [(a, b) for a, b in combinations(reps, 2)]
        if len(reps) == self.max_reps:
            last = reps[-1][0]
            pairs += [((sha, int(bits, 16), n), rep) for sha, bits, n in members if sha > last for rep in reps]
        for a, b in pairs:
            if (a[1] ^ b[1]).bit_count() <= self.threshold:
                yield a[0], (b[0], b[2])
                yield b[0], (a[0], a[2])


def _reach(element):
    """(sha, {"own": [docs], "near": [(neighbour, docs)...]}) -> (sha, (documents reached, identity))."""
    sha, group = element
    near = set(group["near"])  # a neighbour met in several buckets counts once
    docs = sum(group["own"]) + sum(n for _, n in near)
    return sha, (docs, min([sha] + [other for other, _ in near]))


class ImageReach(beam.PTransform):
    """(sha256, (phash hex, documents using it)), one per distinct image -> (sha256, (documents using it
    or a neighbour, identity = smallest sha256 of it and its neighbours)), and counters."""

    def __init__(self, threshold: int, bands: int, key_bands: int, max_reps: int):
        super().__init__()
        self.threshold, self.bands, self.key_bands, self.max_reps = threshold, bands, key_bands, max_reps

    def expand(self, images):
        bands, key_bands = self.bands, self.key_bands
        near = (images
                | "Bands" >> beam.FlatMapTuple(lambda sha, pn: [(k, (sha, pn[0], pn[1])) for k in
                                                              bit_band_keys(int(pn[0], 16), 64, bands, key_bands)])
                | "GroupBuckets" >> beam.GroupByKey()
                | "Neighbours" >> beam.ParDo(_NeighbourPairs(self.threshold, self.max_reps)))
        return ({"own": images | "Own" >> beam.MapTuple(lambda sha, pn: (sha, pn[1])), "near": near}
                | "JoinNear" >> beam.CoGroupByKey() | "Reach" >> beam.Map(_reach))


# ---------------------------------------------------------------------------- document dedup
def image_set_key(identities) -> str:
    """The dedup key of a document's set of image identities."""
    return xxhash.xxh3_128_hexdigest("\n".join(sorted(set(identities))).encode())


class _SameImagesDedup(beam.DoFn):
    """(image-set key, docs with `text`) -> survivors; the others as DUPLICATES (doc, survivor id,
    cluster size). Three streaming passes over the group (Beam's grouped values are re-iterable):
    representatives and their clusters, each cluster's best member, then the verdicts."""

    def __init__(self, rank, threshold: float, max_reps: int, ngram: int, prefix: str):
        self.rank, self.threshold, self.max_reps, self.ngram, self.prefix = rank, threshold, max_reps, ngram, prefix

    def _key(self, doc):
        return self.rank(doc), doc["id"]

    def process(self, element):
        _, docs = element
        reps = heapq.nsmallest(self.max_reps, docs, key=lambda d: d["id"])
        if len(reps) < 2:
            yield from reps
            return
        words = [shingles(d["text"], self.ngram) for d in reps]
        parent = list(range(len(reps)))  # union-find over the representatives

        def root(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, j in combinations(range(len(reps)), 2):
            if jaccard(words[i], words[j]) >= self.threshold:
                parent[max(root(i), root(j))] = min(root(i), root(j))
        rep_ids = {d["id"]: i for i, d in enumerate(reps)}
        last = reps[-1]["id"]

        def cluster(doc):
            """The representative cluster a document belongs to, or None."""
            if doc["id"] in rep_ids:
                return root(rep_ids[doc["id"]])
            if len(reps) < self.max_reps or doc["id"] <= last:
                return None  # a second copy of a representative's id cannot be one here: ids are unique
            own = shingles(doc["text"], self.ngram)
            return next((root(i) for i in range(len(reps)) if jaccard(own, words[i]) >= self.threshold), None)

        best, sizes = {}, {}
        for doc in docs:
            c = cluster(doc)
            if c is not None:
                sizes[c] = sizes.get(c, 0) + 1
                if c not in best or self._key(doc) < best[c]:
                    best[c] = self._key(doc)
        for doc in docs:
            c = cluster(doc)
            if c is None or sizes[c] == 1 or self._key(doc) == best[c]:
                yield doc
            else:
                yield beam.pvalue.TaggedOutput(DUPLICATES, (doc, best[c][1], sizes[c]))
        for c, size in sizes.items():
            if size > 1:
                yield beam.pvalue.TaggedOutput(COUNTERS, (self.prefix + "clusters", 1))
                yield beam.pvalue.TaggedOutput(COUNTERS, (f"{self.prefix}cluster_size/{size_bin(size)}", 1))


class DedupSameImages(beam.PTransform):
    """Documents with `text` and `image_set` (image_set_key) -> (survivors, DUPLICATES, counters)."""

    def __init__(self, rank, threshold: float, max_reps: int, ngram: int = 1, prefix: str = "multimodal/"):
        super().__init__()
        self.step = _SameImagesDedup(rank, threshold, max_reps, ngram, prefix)

    def expand(self, docs):
        return (docs | "KeyImageSet" >> beam.Map(lambda d: (d["image_set"], d))
                | "GroupImageSet" >> beam.GroupByKey()
                | "Dedup" >> beam.ParDo(self.step).with_outputs(DUPLICATES, COUNTERS, main="kept"))
