"""Exact-dedup and cross-lingual recurrence Beam transforms. Grouping is by shuffle only; no index lives in
one process."""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam
import numpy as np

from dedup.crosslingual import CrossLingualConfig, DocumentEncoder, anchor_pairs, band_keys, cosines, hyperplanes, is_match
from dedup.exact import text_hash
from dedup.near import PARTITION, SURVIVOR_RULES, ChooseSurvivors


class ExactDedupResult(NamedTuple):
    docs: beam.PCollection
    duplicates: beam.PCollection  # (doc, survivor_id, group_size)
    counters: beam.PCollection    # (key, n): exact/clusters, exact/cluster_size/<bin>


class ExactDedup(beam.PTransform):
    """Exact dedup on the normalized-text hash (within a document's `dedup_partition`, if it has one):
    one GroupByKey, then the member with the smallest
    (rank(doc), id) survives (default: earliest capture), independent of arrival order. The group is
    read twice, never held in memory (a million copies of one error page stay a stream)."""

    def __init__(self, survivor: str = "earliest_capture"):
        super().__init__()
        self.rank = SURVIVOR_RULES[survivor]

    def expand(self, docs):
        chosen = (docs | "HashText" >> beam.Map(lambda d: ((d.get(PARTITION) or "") + text_hash(d["text"]), d))
                  | "Survivors" >> ChooseSurvivors(self.rank, "exact/"))
        return ExactDedupResult(chosen.kept, chosen.duplicates, chosen.counters)


# ------------------------------------------------------------------------------------ cross-lingual
_DOC, _LANG = 0, 1
CROSS_PREFIX = "crosslingual/"


@beam.typehints.with_output_types(beam.typehints.Tuple[beam.typehints.Any, beam.typehints.Any])
class _AnchorPairs(beam.DoFn):
    """doc -> (id, (_DOC, doc)), and ("pairs") (anchor pair, (id, lang, the document's anchor pairs))."""

    def process(self, doc):
        lang = doc.get("lang") or ""
        found = anchor_pairs(doc["text"], lang)
        yield doc["id"], (_DOC, doc)
        for h in found:
            yield beam.pvalue.TaggedOutput("pairs", (h, (doc["id"], lang, len(found))))


@beam.typehints.with_output_types(beam.typehints.Tuple[beam.typehints.Any, int])
class _SharedPairs(beam.DoFn):
    """(anchor pair, members) -> ((a, size_a, b, size_b, lang_a, lang_b), 1) per two members of different
    languages; an anchor pair in more than `max_documents` documents is counted and skipped."""

    def __init__(self, max_documents: int):
        self.max_documents = max_documents

    def process(self, element):
        _, members = element
        kept = []
        for member in members:
            kept.append(member)
            if len(kept) > self.max_documents:
                yield beam.pvalue.TaggedOutput("counters", (CROSS_PREFIX + "frequent_anchor_pairs", 1))
                return
        kept.sort()
        for i, (a, lang_a, n_a) in enumerate(kept):
            for b, lang_b, n_b in kept[i + 1:]:
                if lang_a != lang_b:
                    yield (a, n_a, b, n_b, lang_a, lang_b), 1


class _EmbeddingBands(beam.DoFn):
    """doc -> (band key, (id, lang, int8 embedding bytes)) per LSH band of its document embedding."""

    def __init__(self, cfg: CrossLingualConfig):
        self.cfg, self.encoder, self.planes = cfg, None, None

    def setup(self):
        self.encoder = DocumentEncoder(self.cfg.encoder, self.cfg.encoder_sentences).load()
        self.planes = hyperplanes(self.cfg.encoder_bands, self.cfg.encoder_rows)

    def process(self, doc):
        embedding = self.encoder.embed(doc["text"])
        if embedding is None:
            return
        value = (doc["id"], doc.get("lang") or "", embedding.tobytes())
        for key in band_keys(embedding, self.planes, self.cfg.encoder_rows):
            yield key, value


@beam.typehints.with_output_types(beam.typehints.Tuple[beam.typehints.Any, ...])
class _SimilarInBucket(beam.DoFn):
    """(band key, members) -> (a, b, lang_a, lang_b) for two members of different languages whose
    embeddings' cosine reaches the threshold (a < b); a bucket over `max_bucket` is counted and skipped."""

    def __init__(self, threshold: float, max_bucket: int):
        self.threshold, self.max_bucket = threshold, max_bucket

    def process(self, element):
        members = []
        for member in element[1]:
            members.append(member)
            if len(members) > self.max_bucket:
                yield beam.pvalue.TaggedOutput("counters", (CROSS_PREFIX + "oversized_buckets", 1))
                return
        if len(members) < 2:
            return
        members.sort()
        close = cosines(np.stack([np.frombuffer(m[2], dtype=np.int8) for m in members])) >= self.threshold
        for i, j in zip(*np.nonzero(np.triu(close, 1))):
            (a, lang_a, _), (b, lang_b, _) = members[i], members[j]
            if lang_a != lang_b:
                yield a, b, lang_a, lang_b


def _both_languages(pair):
    a, b, lang_a, lang_b = pair
    yield a, (_LANG, lang_b)
    yield b, (_LANG, lang_a)


def _languages_of(element):
    """(id, [(_DOC, doc), (_LANG, lang)...]) -> (doc, the other languages, sorted)."""
    doc, languages = None, set()
    for tag, value in element[1]:
        if tag == _DOC:
            doc = value
        else:
            languages.add(value)
    return doc, tuple(sorted(languages))


class CrossLingualRecurrence(beam.PTransform):
    """(doc, the other languages its content recurs in) for each document (dedup/crosslingual.py): anchor
    pairs grouped by hash, the pairs of documents sharing them counted by a combine; with an encoder,
    document embeddings grouped by LSH band and compared within each bucket; the matches of both joined
    back to their documents by id. Returns (those, counters): crosslingual/matched_pairs (documents
    pairs matched by either), anchor_matches, frequent_anchor_pairs, and with an encoder
    encoder_matches, oversized_buckets."""

    def __init__(self, config: CrossLingualConfig | None = None):
        super().__init__()
        self.cfg = config or CrossLingualConfig()

    def expand(self, docs):
        cfg = self.cfg
        signed = docs | "AnchorPairs" >> beam.ParDo(_AnchorPairs()).with_outputs("pairs", main="docs")
        shared = (signed.pairs | "GroupAnchorPairs" >> beam.GroupByKey()
                  | "SharedPairs" >> beam.ParDo(_SharedPairs(cfg.max_documents)).with_outputs("counters", main="pairs"))
        anchored = (shared.pairs | "CountShared" >> beam.CombinePerKey(sum)
                    | "Matched" >> beam.Filter(lambda e: is_match(e[1], e[0][1], e[0][3], cfg))
                    | "AnchorMatch" >> beam.Map(lambda e: (e[0][0], e[0][2], e[0][4], e[0][5])))
        matches, counters, keys = [anchored], [shared.counters], ["anchor_matches", "frequent_anchor_pairs"]
        counters.append(anchored | "CountAnchored" >> beam.Map(lambda _: (CROSS_PREFIX + "anchor_matches", 1)))
        if cfg.encoder:
            similar = (docs | "EmbeddingBands" >> beam.ParDo(_EmbeddingBands(cfg))
                       | "GroupBuckets" >> beam.GroupByKey()
                       | "SimilarInBucket" >> beam.ParDo(_SimilarInBucket(cfg.encoder_threshold, cfg.encoder_max_bucket))
                       .with_outputs("counters", main="pairs"))
            encoded = similar.pairs | "DistinctEncoded" >> beam.Distinct()
            matches.append(encoded)
            counters += [similar.counters,
                         encoded | "CountEncoded" >> beam.Map(lambda _: (CROSS_PREFIX + "encoder_matches", 1))]
            keys += ["encoder_matches", "oversized_buckets"]
        matched = matches | "AllMatches" >> beam.Flatten() | "DistinctMatches" >> beam.Distinct()
        languages = ((signed.docs, matched | "BothWays" >> beam.FlatMap(_both_languages))
                     | "FlattenMatches" >> beam.Flatten() | "GroupById" >> beam.GroupByKey()
                     | "Languages" >> beam.Map(_languages_of))
        counters += [matched | "CountMatched" >> beam.Map(lambda _: (CROSS_PREFIX + "matched_pairs", 1)),
                     docs.pipeline | "ZeroCounters" >> beam.Create([(CROSS_PREFIX + k, 0)
                                                                    for k in ["matched_pairs"] + keys])]
        counters = counters | "AllCounters" >> beam.Flatten() | "SumCounters" >> beam.CombinePerKey(sum)
        return languages, counters
