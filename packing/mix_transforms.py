"""Beam transforms of the mixing step (packing/mixing.py): dedup clusters, twin resolution, exact ratio.
Everything global is a shuffle or a combine; the one list a worker holds is a boundary bucket.

    drop rows of each branch's dedup stages ─Clusters─> (survivor id, [member ids])
    a branch's docs + its clusters ─WithEpochs─> samples (doc, modality, epochs, twin keys)
    token records of the samples ─ResolveTwins─> text records without their twins, multimodal records
                                                 with max(epochs); (text record, survivor) per replaced one
    token records ─BalanceRatio─> token records with `copies`, the ratio plan (one element)

Twins are resolved on token records, after tokenization: a multimodal sample that cannot be packed
(its image block is longer than a chunk) never replaces its text twin.
"""

from __future__ import annotations

import apache_beam as beam

from packing import mixing
from packing.config import MixConfig
from packing.samples import INTERLEAVED, TEXT

REPLACED = "replaced_by_multimodal"


# ----------------------------------------------------------------------------------------- clusters
def _member_of(row):
    return row["id"], row["detail"]


class Clusters(beam.PTransform):
    """Drop rows of a branch's dedup stages, in stage order (each names its survivor in `detail`) ->
    (final survivor, [member ids]): a survivor dropped by a later stage passes its members on to that
    stage's survivor, so every member ends under a document that is still there."""

    def __init__(self, label: str):
        super().__init__()
        self.label = label

    def expand(self, levels):
        levels = list(levels)
        pairs = levels[0] | f"{self.label}/Members0" >> beam.Map(_member_of)
        for i, rows in enumerate(levels[1:], 1):
            later = rows | f"{self.label}/Members{i}" >> beam.Map(_member_of)
            by_survivor = pairs | f"{self.label}/BySurvivor{i}" >> beam.Map(lambda ms: (ms[1], ms[0]))
            moved = ({"members": by_survivor, "dropped": later} | f"{self.label}/Join{i}" >> beam.CoGroupByKey()
                     | f"{self.label}/Move{i}" >> beam.FlatMap(_move))
            pairs = (moved, later) | f"{self.label}/Union{i}" >> beam.Flatten()
        return (pairs | f"{self.label}/BySurvivor" >> beam.Map(lambda ms: (ms[1], ms[0]))
                | f"{self.label}/Group" >> beam.GroupByKey()
                | f"{self.label}/Sorted" >> beam.MapTuple(lambda s, members: (s, sorted(members))))


def _move(element):
    survivor, joined = element
    later = list(joined["dropped"])
    final = later[0] if later else survivor
    for member in joined["members"]:
        yield member, final


# -------------------------------------------------------------------------------------------- twins
def _with_cluster(element, modality: str, mix: MixConfig):
    """(id, {doc, members}) -> the sample: (doc, modality, epochs, twin keys)."""
    doc_id, joined = element
    docs, members = list(joined["doc"]), [m for ms in joined["members"] for m in ms]
    for doc in docs:  # ids are unique per branch (the write stages); a member list without its doc is dropped
        epochs = mixing.rehydrated(getattr(mix.epochs, modality), 1 + len(members), mix.rehydrate)
        keys = [doc_id] + (members if mix.twins_by_cluster else [])
        yield {"doc": doc, "modality": modality, "epochs": epochs, "keys": keys}


class WithEpochs(beam.PTransform):
    """A branch's documents + its clusters -> samples with their epochs and twin keys."""

    def __init__(self, modality: str, mix: MixConfig):
        super().__init__()
        self.modality, self.mix = modality, mix

    def expand(self, inputs):
        docs, clusters = inputs
        keyed = docs | "ById" >> beam.Map(lambda d: (d["id"], d))
        return ({"doc": keyed, "members": clusters} | "Join" >> beam.CoGroupByKey()
                | "Sample" >> beam.FlatMap(_with_cluster, self.modality, self.mix))


def _links(element):
    """Twin key -> (text id, its epochs, multimodal id) for every text x multimodal pair under it."""
    _, joined = element
    texts, mms = list(joined["text"]), list(joined["mm"])
    for text_id, epochs in texts:
        for mm_id in mms:
            yield text_id, epochs, mm_id


def _resolve_text(element):
    doc_id, joined = element
    survivors = sorted({mm for mm in joined["link"]})
    for sample in joined["sample"]:
        if survivors:
            more = f" (and {len(survivors) - 1} more)" if len(survivors) > 1 else ""
            yield beam.pvalue.TaggedOutput(REPLACED, (sample, survivors[0] + more))
        else:
            yield sample


def _resolve_mm(element):
    _, joined = element
    twin_epochs = list(joined["link"])
    for sample in joined["sample"]:
        yield {**sample, "epochs": max([sample["epochs"], *twin_epochs]), "twins": len(twin_epochs)}


class ResolveTwins(beam.PTransform):
    """(text records, interleaved records) -> {"text": surviving text records, "interleaved": interleaved
    records with max(epochs) over their twins, REPLACED: (text record, survivor id) per replaced text
    document}. Twins meet under a shared key (a capture id) in one CoGroupByKey; each text document's
    verdict and each multimodal document's epochs are then joined back by id."""

    def expand(self, inputs):
        text, mm = inputs
        text_keys = text | "TextKeys" >> beam.FlatMap(lambda s: [(k, (s["id"], s["epochs"])) for k in s["keys"]])
        mm_keys = mm | "MmKeys" >> beam.FlatMap(lambda s: [(k, s["id"]) for k in s["keys"]])
        links = ({"text": text_keys, "mm": mm_keys} | "ByTwinKey" >> beam.CoGroupByKey()
                 | "Links" >> beam.FlatMap(_links) | "OneLink" >> beam.Distinct())
        text_by_id = text | "TextById" >> beam.Map(lambda s: (s["id"], s))
        mm_by_id = mm | "MmById" >> beam.Map(lambda s: (s["id"], s))
        text_links = links | "LinkByText" >> beam.Map(lambda link: (link[0], link[2]))
        mm_links = links | "LinkByMm" >> beam.Map(lambda link: (link[2], link[1]))
        kept = ({"sample": text_by_id, "link": text_links} | "JoinText" >> beam.CoGroupByKey()
                | "ResolveText" >> beam.FlatMap(_resolve_text).with_outputs(REPLACED, main="text"))
        mm_out = ({"sample": mm_by_id, "link": mm_links} | "JoinMm" >> beam.CoGroupByKey()
                  | "ResolveMm" >> beam.FlatMap(_resolve_mm))
        return {TEXT: kept.text, INTERLEAVED: mm_out, REPLACED: kept[REPLACED]}


# -------------------------------------------------------------------------------------------- ratio
def _group_totals(record):
    return mixing.group_of(record["modality"]), (record["n_tokens"] * record["epochs"], record["epochs"])


def _sum_max(rows):
    tokens, largest = 0.0, 0.0
    for t, e in rows:
        tokens, largest = tokens + t, max(largest, e)
    return tokens, largest


def _plan(totals, ratio, max_epochs):
    return mixing.ratio_plan(dict(totals), ratio, max_epochs)


def _scaled(record, plan):
    group = mixing.group_of(record["modality"])
    epochs = record["epochs"] * plan["multipliers"][group]
    whole, fraction = mixing.split_epochs(epochs)
    return group, epochs, whole, mixing.extra_key(record["id"], fraction)


def _histogram_entries(record, plan):
    group, _, whole, key = _scaled(record, plan)
    n = record["n_tokens"]
    yield (group, "whole"), whole * n
    if key != float("inf"):
        yield (group, mixing.key_bucket(key)), n


def _boundaries(histogram, plan):
    """{group: (boundary bucket, tokens wanted in it)} from the summed ((group, bucket), tokens)."""
    out = {}
    for group in mixing.GROUPS:
        buckets = {b: n for (g, b), n in histogram if g == group and b != "whole"}
        whole = sum(n for (g, b), n in histogram if g == group and b == "whole")
        out[group] = mixing.boundary_bucket(buckets, plan["targets"][group] - whole)
    return out


def _in_boundary(record, plan, bounds):
    group, _, _, key = _scaled(record, plan)
    if key != float("inf") and mixing.key_bucket(key) == bounds[group][0]:
        yield group, (key, record["id"], record["n_tokens"])


def _thresholds(cuts, bounds):
    cut_of = dict(cuts)
    return {g: (bounds[g][0], cut_of.get(g)) for g in mixing.GROUPS}


class BalanceRatio(beam.PTransform):
    """Token records (id, modality, n_tokens, epochs) -> (records with `copies` and `epochs` scaled by
    their group's multiplier, the plan with the thresholds: one element)."""

    def __init__(self, mix: MixConfig):
        super().__init__()
        self.mix = mix

    def expand(self, records):
        plan = (records | "Totals" >> beam.Map(_group_totals) | "SumTotals" >> beam.CombinePerKey(_sum_max)
                | "AllTotals" >> beam.combiners.ToList()
                | "Plan" >> beam.Map(_plan, self.mix.text_to_multimodal, self.mix.max_epochs))
        plan_side = beam.pvalue.AsSingleton(plan)
        histogram = (records | "Histogram" >> beam.FlatMap(_histogram_entries, plan_side)
                     | "SumHistogram" >> beam.CombinePerKey(sum) | "OneHistogram" >> beam.combiners.ToList())
        bounds = histogram | "Boundaries" >> beam.Map(_boundaries, plan_side)
        bounds_side = beam.pvalue.AsSingleton(bounds)
        cuts = (records | "InBoundary" >> beam.FlatMap(_in_boundary, plan_side, bounds_side)
                | "ByGroup" >> beam.GroupByKey()
                | "Cut" >> beam.Map(lambda g_items, bounds: (g_items[0], mixing.exact_cut(list(g_items[1]),
                                                                                        bounds[g_items[0]][1])),
                                    bounds_side)
                | "AllCuts" >> beam.combiners.ToList())
        thresholds = cuts | "Thresholds" >> beam.Map(_thresholds, bounds_side)
        with_copies = records | "Copies" >> beam.Map(_with_copies, plan_side, beam.pvalue.AsSingleton(thresholds))
        full_plan = plan | "WithThresholds" >> beam.Map(lambda p, t: {**p, "thresholds": t},
                                                        beam.pvalue.AsSingleton(thresholds))
        return with_copies, full_plan


def _with_copies(record, plan, thresholds):
    group, epochs, _, _ = _scaled(record, plan)
    kept = {k: v for k, v in record.items() if k != "keys"}  # twin keys (cluster members) are done with
    return {**kept, "epochs": epochs, "copies": mixing.copies(record["id"], epochs, thresholds[group])}

