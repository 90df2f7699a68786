"""Near-duplicate removal at corpus scale: MinHash LSH candidates, exact Jaccard verification and
connected components, all as Beam shuffles; no index, union-find or cluster lives in one process.

1. Sign: word 5-gram shingles and a MinHash signature per document (dedup/minhash.py); the signature
   is cut into `bands` bands of `rows` minima, each band a bucket key (Broder 1997; MMDS §3.4).
2. Buckets: GroupByKey on the bucket key; each bucket becomes star edges from every member to the
   bucket's smallest id, never all pairs, so a bucket of n documents costs n - 1 edges.
3. Verify (default on): an edge survives only if the exact Jaccard of the two shingle sets is at
   least `threshold`, so LSH false positives never cost a document.
4. Components: alternating large-star / small-star (Kiveris et al. 2014, "Connected Components in
   MapReduce and Beyond"), unrolled `max_rounds` times in the (static) pipeline graph, then a check
   that fails the run unless every component has become a star around its smallest id.
5. Survivor: per component, the member with the smallest (rank(doc), id) is kept; every other member
   is emitted as (doc, survivor_id, cluster_size).

Clusters are connected components of the verified-pair graph: if a~b and b~c pass verification, a, b
and c form one cluster even when J(a, c) < threshold (the usual single-linkage semantics of MinHash
dedup in Gopher, FineWeb and datatrove). Exact-duplicate chains are handled the same way (J = 1).

Hot keys: a bucket, hub or cluster with 100k members is never held in memory. Every DoFn below that
sees a large group reads it twice (once for the minimum or the one special value, once to emit),
relying on Beam GroupByKey values being re-iterable (state-backed, paged from the shuffle on
portable runners and Dataflow); per-group memory is O(1) plus at most one shingle set.
`beam.CoGroupByKey` is not used for these joins: the Python SDK materialises each key's values
into lists.

Star edges have one blind spot: two similar documents that share only buckets whose minimum is a
third, dissimilar document (an LSH false positive) get no verified edge there. Similar pairs share
many buckets (on average 4 of the 32 bands at J = 0.5, 7 at J = 0.6), so this is
rare; on mixed-dev and in the brute-force test every pair at or above the threshold ends in one
cluster.
"""

from __future__ import annotations

from typing import Callable, Literal, NamedTuple

import apache_beam as beam
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from dedup.minhash import NGRAM, MinHasher, band_keys, jaccard, lsh_params, shingles

DUPLICATES = "duplicates"
COUNTERS = "counters"
PREFIX = "near/"
# A document field: documents are compared only with documents of the same partition (absent: one
# partition), e.g. interleaved documents with the same image set (pipelines/interleaved.py).
PARTITION = "dedup_partition"


def smallest_id(doc: dict):
    """Every member ranks equal, so the smallest id wins."""
    return ()


def earliest_capture(doc: dict):
    """Default: the first-crawled copy (WARC-Date, ISO 8601 sorts as text) survives, since syndicated
    and scraped copies appear after their source; undated docs rank last; ties go to the smallest id."""
    date = doc.get("warc_date") or ""
    return (date == "", date)


# A survivor rule is a picklable `rank(doc) -> comparable`; the member with the smallest
# (rank(doc), doc["id"]) survives. A sort key (not a choice over the member list) keeps the
# choice streaming over a re-iterable group, and the id tie-break makes it deterministic.
SURVIVOR_RULES = {"smallest_id": smallest_id, "earliest_capture": earliest_capture}

class NearDedupConfig(BaseModel):
    """MinHash LSH near-duplicate removal. The defaults put the S-curve's steep part at J = 0.5:
    P(candidate) = 1 - (1 - J^3)^32 is 0.986 at J = 0.5 and 0.227 at J = 0.2."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    ngram: int = Field(NGRAM, gt=0, description="words per shingle (characters for Han/kana text); 5 as in "
                                                "Gopher and FineWeb")
    num_perm: int = Field(96, gt=0, description="MinHash permutations")
    seed: int = Field(1, description="permutation seed: the same on every worker")
    threshold: float = Field(0.5, gt=0, le=1, description="exact shingle Jaccard needed to call two documents "
                                                          "near-duplicates")
    bands: int | None = Field(32, gt=0, description="LSH bands (bands x rows <= num_perm); null with rows null = "
                                                    "lsh_params(threshold, num_perm), datasketch's rule")
    rows: int | None = Field(3, gt=0, description="minima per band")
    verify: StrictBool = Field(True, description="exact Jaccard check of candidate pairs before they merge clusters")
    max_rounds: int = Field(12, ge=0, description="large-star + small-star rounds in the graph; a path of n "
                                                  "documents needs ~log2(n); the run fails if not converged")
    survivor: Literal["earliest_capture", "smallest_id"] | Callable = Field(
        "earliest_capture", description="which member of a cluster is kept: a rule name, or (from Python) a "
                                        "picklable rank(doc) callable")

    @model_validator(mode="after")
    def _bands_fit(self):
        if self.bands is None or self.rows is None:
            self.bands, self.rows = lsh_params(self.threshold, self.num_perm)
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} > num_perm = {self.num_perm}")
        return self

    def survivor_rank(self) -> Callable:
        """The survivor rule as the `rank(doc)` callable: a rule name looked up in SURVIVOR_RULES."""
        return SURVIVOR_RULES[self.survivor] if isinstance(self.survivor, str) else self.survivor


def size_bin(n: int) -> str:
    """Histogram bin of a cluster size: exact up to 4, then powers of two (5-8, 9-16, ...)."""
    if n <= 4:
        return str(n)
    hi = 1 << (n - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


def _counter(key: str) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(COUNTERS, (PREFIX + key, 1))


# ------------------------------------------------------------------------------------------ sign
class _Sign(beam.DoFn):
    """doc -> (bucket key, id) per band, and (id, shingle-hash bytes) for verification. A text with
    no word characters has no shingles and takes no part (exact dedup handles empty texts)."""

    def __init__(self, cfg: NearDedupConfig):
        self.cfg = cfg
        self.hasher = None

    def setup(self):
        self.hasher = MinHasher(self.cfg.num_perm, self.cfg.seed)

    def process(self, doc):
        hashes = shingles(doc["text"], self.cfg.ngram)
        if not hashes.size:
            return
        partition = (doc.get(PARTITION) or "").encode()
        for key in band_keys(self.hasher.signature(hashes), self.cfg.bands, self.cfg.rows):
            yield partition + key, doc["id"]
        if self.cfg.verify:
            yield beam.pvalue.TaggedOutput("shingles", (doc["id"], hashes.tobytes()))


class _BucketStar(beam.DoFn):
    """(bucket, ids) -> (id, smallest id) for every other member. Two passes over the group."""

    def process(self, element):
        _, ids = element
        hub = min(ids)
        members = 0
        for doc_id in ids:
            if doc_id != hub:
                members += 1
                yield doc_id, hub
        if members:
            yield _counter("buckets")


# ---------------------------------------------------------------------------------------- verify
_SET, _EDGE = 0, 1


class _HubToLeaves(beam.DoFn):
    """(hub, [(SET, hub shingles)] + [(EDGE, leaf)...]) -> (leaf, (hub, hub shingles)). The hub's set
    is found in a first pass, then the (possibly 100k) edges stream past in a second."""

    def process(self, element):
        hub, values = element
        hub_set = next((v for tag, v in values if tag == _SET), None)
        if hub_set is None:
            return
        for tag, v in values:
            if tag == _EDGE:
                yield v, (hub, hub_set)


class _KeepSimilar(beam.DoFn):
    """(leaf, [(SET, own shingles)] + [(EDGE, (hub, hub shingles))...]) -> (leaf, hub) for every hub
    with exact Jaccard >= threshold. A leaf has at most one edge per band, so this group is small."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def process(self, element):
        leaf, values = element
        own = next((v for tag, v in values if tag == _SET), None)
        if own is None:
            return
        own = np.frombuffer(own, dtype=np.uint64)
        for tag, v in values:
            if tag == _EDGE:
                hub, hub_set = v
                if jaccard(own, np.frombuffer(hub_set, dtype=np.uint64)) >= self.threshold:
                    yield leaf, hub


class Verify(beam.PTransform):
    """Candidate edges (leaf, hub) -> the edges whose documents have exact Jaccard >= threshold.
    Joins each edge with both shingle sets: first by hub (hot: the bucket minimum), then by leaf."""

    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def expand(self, pcolls):
        edges, sets = pcolls
        tagged_sets = sets | "TagSets" >> beam.MapTuple(lambda doc_id, s: (doc_id, (_SET, s)))
        with_hub = ((tagged_sets, edges | "ByHub" >> beam.MapTuple(lambda leaf, hub: (hub, (_EDGE, leaf))))
                    | "FlattenHub" >> beam.Flatten() | "GroupHub" >> beam.GroupByKey()
                    | "HubToLeaves" >> beam.ParDo(_HubToLeaves()))
        return ((tagged_sets, with_hub | "TagEdges" >> beam.MapTuple(lambda leaf, hub: (leaf, (_EDGE, hub))))
                | "FlattenLeaf" >> beam.Flatten() | "GroupLeaf" >> beam.GroupByKey()
                | "KeepSimilar" >> beam.ParDo(_KeepSimilar(self.threshold)))


# ------------------------------------------------------------------------------------ components
_NODE, _CHILD = 0, 1


def _both_ways(edge):
    a, b = edge
    return [(a, b), (b, a)]


class _LargeStar(beam.DoFn):
    """Kiveris et al. Alg. 1: connect every larger neighbour of u to the minimum of u's closed
    neighbourhood. Edges are emitted as (larger, smaller)."""

    def process(self, element):
        u, neighbours = element
        m = min(min(neighbours), u)
        for v in neighbours:
            if v > u:
                yield v, m


class _SmallStar(beam.DoFn):
    """Kiveris et al. Alg. 2: connect u and its smaller neighbours to the minimum of them."""

    def process(self, element):
        u, neighbours = element
        m = min((v for v in neighbours if v < u), default=u)
        if m == u:
            return
        for v in neighbours:
            if m < v < u:
                yield v, m
        yield u, m


class _StarStep(beam.PTransform):
    """One large-star or small-star step: group each node's neighbours, emit the new edges. No
    Distinct in between: a step emits at most one edge per input edge plus one per node, so
    duplicates grow the edge multiset only linearly over the rounds, and neither step's edge *set*
    depends on multiplicities."""

    def __init__(self, step: beam.DoFn):
        super().__init__()
        self.step = step

    def expand(self, edges):
        return (edges | "BothWays" >> beam.FlatMap(_both_ways) | "Neighbours" >> beam.GroupByKey()
                | "Step" >> beam.ParDo(self.step))


class _Parent(beam.DoFn):
    """After the rounds: u's smallest neighbour is its parent. Emits (u, (NODE, number of smaller
    neighbours)) and (parent, (CHILD, u))."""

    def process(self, element):
        u, neighbours = element
        smaller = 0
        parent = u
        for v in neighbours:
            if v < u:
                smaller += 1
                parent = min(parent, v)
        yield u, (_NODE, smaller)
        if smaller:
            yield parent, (_CHILD, u)


class _Labels(beam.DoFn):
    """Converged iff every node has at most one smaller neighbour and that neighbour has none: then
    the edges are stars, each around its component's smallest id (large-star and small-star never
    change the components). A root emits (member, root) for itself and its children."""

    def __init__(self, max_rounds: int):
        self.max_rounds = max_rounds

    def process(self, element):
        u, values = element
        smaller = next(v for tag, v in values if tag == _NODE)
        has_children = any(tag == _CHILD for tag, _ in values)
        if smaller > 1 or (smaller and has_children):
            raise RuntimeError(f"near dedup: connected components not converged after {self.max_rounds} "
                               f"rounds at node {u}; raise max_rounds")
        if has_children:
            yield u, u
            for tag, v in values:
                if tag == _CHILD:
                    yield v, u


class ConnectedComponents(beam.PTransform):
    """Undirected edges (a, b) -> (node, component's smallest node) for every node on an edge."""

    def __init__(self, max_rounds: int):
        super().__init__()
        self.max_rounds = max_rounds

    def expand(self, edges):
        for i in range(self.max_rounds):
            edges = (edges | f"LargeStar{i}" >> _StarStep(_LargeStar())
                     | f"SmallStar{i}" >> _StarStep(_SmallStar()))
        return (edges | "Distinct" >> beam.Distinct() | "BothWays" >> beam.FlatMap(_both_ways)
                | "Neighbours" >> beam.GroupByKey()
                | "Parents" >> beam.ParDo(_Parent()) | "GroupRoots" >> beam.GroupByKey()
                | "Labels" >> beam.ParDo(_Labels(self.max_rounds)))


# -------------------------------------------------------------------------------------- survivor
_DOC, _ROOT = 0, 1


class _AttachRoot(beam.DoFn):
    """(id, [(DOC, doc)] + [(ROOT, root)]) -> the doc itself if it is in no cluster, else
    (root, doc) under 'clustered'."""

    def process(self, element):
        _, values = element
        root = next((v for tag, v in values if tag == _ROOT), None)
        for tag, doc in values:
            if tag == _DOC:
                yield doc if root is None else beam.pvalue.TaggedOutput("clustered", (root, doc))


def survivor_key(rank, doc: dict) -> tuple:
    """A cluster member's place in the survivor order; the smallest survives: (rank(doc), id), then the
    (warc_file, warc_offset) it was read from, so that exactly one survives when one record was copied
    into two input files."""
    return rank(doc), doc["id"], doc.get("warc_file") or "", doc.get("warc_offset") or 0


class _Decide(beam.DoFn):
    """(cluster, its members' survivor keys) -> (member key, (the cluster's smallest key, its size)) per
    member, and the counters `<prefix>clusters` and `<prefix>cluster_size/<bin>` for clusters of two or
    more. The keys are read twice, never collected."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def process(self, element):
        _, keys = element
        size, best = 0, None
        for key in keys:
            size += 1
            if best is None or key < best:
                best = key
        for key in keys:
            yield key, (best, size)
        if size > 1:
            yield beam.pvalue.TaggedOutput(COUNTERS, (self.prefix + "clusters", 1))
            yield beam.pvalue.TaggedOutput(COUNTERS, (f"{self.prefix}cluster_size/{size_bin(size)}", 1))


def _apply_decision(element):
    """(member key, {"doc": its documents, "decision": [(smallest key, size), ...]}) -> the survivor, or
    each document as DUPLICATES (doc, survivor id, cluster size)."""
    key, joined = element
    best, size = next(iter(joined["decision"]))
    for doc in joined["doc"]:
        if key == best:
            yield doc
        else:
            yield beam.pvalue.TaggedOutput(DUPLICATES, (doc, best[1], size))


class Survivors(NamedTuple):
    kept: beam.PCollection
    duplicates: beam.PCollection  # (doc, survivor_id, cluster_size)
    counters: beam.PCollection


class ChooseSurvivors(beam.PTransform):
    """(cluster, doc) pairs -> per cluster the member with the smallest `survivor_key` kept, the others
    duplicates. Only the members' keys are grouped by cluster, and the documents are joined back by
    their own key: a cluster of a million copies of one page is a million small tuples in one key,
    not a million documents, which a runner that holds a group in memory could not (docs/crawl.md)."""

    def __init__(self, rank, prefix: str = PREFIX):
        super().__init__()
        self.rank, self.prefix = rank, prefix

    def expand(self, members):
        rank = self.rank
        keyed = members | "MemberKey" >> beam.MapTuple(lambda cluster, doc: (cluster, (survivor_key(rank, doc), doc)))
        decided = (keyed | "KeyOnly" >> beam.MapTuple(lambda cluster, kd: (cluster, kd[0]))
                   | "GroupKeys" >> beam.GroupByKey()
                   | "Decide" >> beam.ParDo(_Decide(self.prefix)).with_outputs(COUNTERS, main="decisions"))
        chosen = ({"doc": keyed | "DocByKey" >> beam.Values(), "decision": decided.decisions}
                  | "JoinDocs" >> beam.CoGroupByKey()
                  | "Apply" >> beam.FlatMap(_apply_decision).with_outputs(DUPLICATES, main="kept"))
        return Survivors(chosen.kept, chosen[DUPLICATES], decided[COUNTERS])


class NearDedupResult(NamedTuple):
    docs: beam.PCollection
    duplicates: beam.PCollection
    counters: beam.PCollection


class NearDedup(beam.PTransform):
    """Near-duplicate removal (see module docstring). Input: doc dicts with at least `id` (unique
    str) and `text`, optionally `dedup_partition` (PARTITION); other keys pass through. Returns a tagged result with `.docs` (kept docs,
    unchanged), `.duplicates` ((doc, survivor_id, cluster_size)) and `.counters` ((key, n), summed):
    near/buckets (buckets with >= 2 members), near/candidate_pairs, near/verified_pairs (when
    verifying), near/clusters and near/cluster_size/<bin>."""

    def __init__(self, config: NearDedupConfig = NearDedupConfig()):
        super().__init__()
        self.cfg = config

    def expand(self, docs):
        cfg = self.cfg
        signed = docs | "Sign" >> beam.ParDo(_Sign(cfg)).with_outputs("shingles", main="bands")
        stars = (signed.bands | "GroupBuckets" >> beam.GroupByKey()
                 | "BucketStars" >> beam.ParDo(_BucketStar()).with_outputs(COUNTERS, main="edges"))
        edges = stars.edges | "DistinctCandidates" >> beam.Distinct()
        counters = [stars[COUNTERS], edges | "CountCandidates" >> beam.Map(lambda _: (PREFIX + "candidate_pairs", 1))]
        always = ["buckets", "candidate_pairs", "clusters"]
        if cfg.verify:
            edges = (edges, signed.shingles) | "Verify" >> Verify(cfg.threshold)
            counters.append(edges | "CountVerified" >> beam.Map(lambda _: (PREFIX + "verified_pairs", 1)))
            always.append("verified_pairs")
        roots = edges | "Components" >> ConnectedComponents(cfg.max_rounds)

        by_id = ((docs | "KeyDocs" >> beam.Map(lambda d: (d["id"], (_DOC, d))),
                  roots | "TagRoots" >> beam.MapTuple(lambda doc_id, root: (doc_id, (_ROOT, root))))
                 | "FlattenDocs" >> beam.Flatten() | "GroupDocs" >> beam.GroupByKey()
                 | "AttachRoot" >> beam.ParDo(_AttachRoot()).with_outputs("clustered", main="alone"))
        chosen = by_id.clustered | "Survivors" >> ChooseSurvivors(cfg.survivor_rank())
        counters += [chosen.counters, docs.pipeline | "ZeroCounters" >> beam.Create(
            [(PREFIX + key, 0) for key in always])]
        return NearDedupResult(
            docs=(by_id.alone, chosen.kept) | "Kept" >> beam.Flatten(),
            duplicates=chosen.duplicates,
            counters=counters | "AllCounters" >> beam.Flatten() | "SumCounters" >> beam.CombinePerKey(sum))
