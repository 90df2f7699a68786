"""Exact-dedup Beam transform. Grouping is by shuffle only; no index lives in one process."""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

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
