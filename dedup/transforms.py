"""Beam transforms for deduplication. Grouping is by shuffle only; no index lives in one process."""

from __future__ import annotations

import apache_beam as beam

from dedup.exact import text_hash

DUPLICATES = "duplicates"


class _KeepSurvivor(beam.DoFn):
    """Per hash group: the doc whose id equals the group's minimum id survives; every other member is
    emitted under DUPLICATES as (doc, survivor_id). The group is iterated lazily, so a hot hash (say a
    million copies of one error page) need not fit in memory."""

    def process(self, element):
        _, grouped = element
        survivor = min(grouped["survivor"])
        for doc in grouped["docs"]:
            if doc["id"] == survivor:
                yield doc
            else:
                yield beam.pvalue.TaggedOutput(DUPLICATES, (doc, survivor))


class ExactDedup(beam.PTransform):
    """Exact dedup on normalized text hash; survivor = smallest doc id (independent of arrival order).
    Returns a tuple with `.docs` (survivors) and `.duplicates` ((doc, survivor_id) pairs)."""

    def expand(self, docs):
        keyed = docs | "HashText" >> beam.Map(lambda d: (text_hash(d["text"]), d))
        survivors = (keyed | "Ids" >> beam.MapTuple(lambda h, d: (h, d["id"]))
                     | "MinId" >> beam.CombinePerKey(min))
        return ({"docs": keyed, "survivor": survivors} | "Join" >> beam.CoGroupByKey()
                | "Keep" >> beam.ParDo(_KeepSurvivor()).with_outputs(DUPLICATES, main="docs"))
