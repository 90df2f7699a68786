"""Beam transforms of the shard stage (chunk, allocate to phases, best-fit pack: DeepSeek-V4.1 report §4.1),
unchanged on any Beam runner. Everything global goes through shuffles and combines; no worker ever
holds more than one packing group's lengths or one shard.

    docs ─TokenizeAndChunk─> token records ─AllocatePhases─> chunk records per phase
         ─PackAndWrite(phase)─> OUT/shards/<phase>/part-*.arrow + manifest.json, counters

Token record (one per document): {"id", "n_tokens", "ids": uint32 LE bytes of tokens(doc),
"ends": {phase: [chunk end positions]}}. Chunk record: {"doc_id", "chunk", "length", "ids"}.

PackAndWrite, per phase:
 1. total tokens (Combine) -> n_groups = max(1, total // min_group_tokens); chunk (doc id, index)
    goes to group xxh64(seed, chunk id) % n_groups. min_group_tokens defaults to ceil(2 / target) *
    seq_len: the packer ends a group at ceil(T / L) or ceil(T / L) + 1 sequences (tests/test_bfd.py;
    benchmarks/packing.py "pipeline_groups"), so padding < 2 L / T <= target. Each group holds about
    min_group_tokens..2x that many tokens.
 2. GroupByKey(group) -> `pack_lengths_csr` (packing/bfd.py: best-fit-decreasing, with exact-pair
    reservations where they pack tighter) over the group's *lengths only*,
    items sorted by chunk id first so that arrival order cannot matter. Memory per group: a few
    hundred bytes per chunk (its id and length as Python objects); measured: a 64K group of 1.31 B
    tokens (0.71 M web-text-like chunks) packs in 0.6 s within ~0.4 GB, padding 5.0e-5.
 3. Per-group sequence counts (Combine to one small list) give every sequence a global number i;
    a seeded permutation (packing/permute.py) gives its position pi(i) in the phase's order, and the
    shard floor(pi(i) * shards / S): shards hold equal sequence counts (+-1), hence near-equal
    tokens, and each shard a uniform random sample of every group's sequences.
 4. CoGroupByKey(chunk id) joins each chunk's tokens with its place; GroupByKey(shard) assembles a
    shard (rows sorted by position, segments by placement order) and writes it. Memory per shard:
    about 2 x shard_tokens x 4 bytes.
 5. One final step writes manifest.json from the per-shard and per-group counts and emits the
    phase's counters. Same documents in -> byte-identical shards and manifest, any worker count.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import NamedTuple

import apache_beam as beam
import numpy as np
import xxhash
from apache_beam.io.filesystems import FileSystems

from packing import mix_transforms, mixing
from packing import shards as shard_format
from packing.bfd import pack_lengths_csr
from packing.chunk import ImageBlockTooLong, SampleBoundaries, split_sample
from packing.config import PackConfig
from packing.config import phases as configured_phases
from packing.permute import Permutation
from packing.phases import Phase, assign, length_bucket, make_plan
from packing.mixing import group_of
from packing.samples import INTERLEAVED, PAIR, TEXT, ImagePart, encode_samples, sample_parts
from packing.tokenizer import ID_DTYPE, DocTokenizer
from packing.vision import VisionPolicy

COUNTERS = "counters"
GROUPS = "groups"


def count(key: str, n=1) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(COUNTERS, (key, n))


def tokenizer_info(cfg: PackConfig) -> dict:
    """The tokenizer facts the manifests record (loads the tokenizer once, in the driver)."""
    return DocTokenizer.from_config(cfg).info.to_dict()


def _tuple_sum(rows) -> tuple:
    total = None
    for row in rows:
        total = row if total is None else tuple(a + b for a, b in zip(total, row))
    return total


# ------------------------------------------------------------------------------------ tokenize + chunk
NO_TOKENS = "no_tokens"  # samples that give no tokens (BOS/EOS only)
DROPS = "drops"          # (doc, modality, reason, detail) of every sample the shard stage drops


class _Tokenize(beam.DoFn):
    """A batch of samples -> one token record each (tokens(sample), its image blocks and its chunk ends
    per phase), or (doc, modality, reason, detail) under DROPS."""

    def __init__(self, cfg: PackConfig, vision: VisionPolicy):
        self.cfg = cfg
        self.phases = configured_phases(cfg)
        self.policy = vision
        self.tok = None

    def setup(self):
        self.tok = DocTokenizer.from_config(self.cfg)

    def process(self, batch):
        parts = [sample_parts(s["doc"], s["modality"], self.policy) for s in batch]
        image_id = self.tok.info.image_id
        todo = []
        for sample, sample_parts_ in zip(batch, parts):
            if image_id is None and any(isinstance(part, ImagePart) for part in sample_parts_):
                yield _drop(sample, "no_image_token", f"tokenizer {self.cfg.tokenizer} has no image token")
            else:
                todo.append((sample, sample_parts_))
        specials = len(self.tok.prefix) + len(self.tok.suffix)
        limits = sorted({p.chunk_tokens for p in self.phases})
        tally = Counter()
        encoded = encode_samples(self.tok, [ps for _, ps in todo], image_id)
        for (sample, _), enc in zip(todo, encoded):
            n, modality = len(enc.ids), sample["modality"]
            if modality == INTERLEAVED and not enc.images:  # a PDF without images is a text sample
                modality = TEXT
            if n == specials:
                yield _drop(sample, NO_TOKENS)
                continue
            boundary_of = functools.cache(
                lambda enc=enc: SampleBoundaries(enc.texts, enc.images, self.tok.text_offsets))
            try:
                by_limit = {limit: split_sample(n, limit, self.cfg.chunk_window, boundary_of) for limit in limits}
            except ImageBlockTooLong as err:
                yield _drop(sample, "image_block_too_long", str(err))
                continue
            for key, value in (("docs", 1), ("tokens", n), ("visual_tokens", enc.visual_tokens),
                               ("images", len(enc.images))):
                tally[f"tokenize/{key}"] += value
                tally[f"tokenize/{modality}/{key}"] += value
            doc = sample["doc"]
            yield {"id": doc["id"], "modality": modality, "epochs": sample["epochs"], "keys": sample["keys"],
                   "where": {k: doc.get(k) for k in PROVENANCE}, "n_tokens": n, "ids": enc.ids.tobytes(),
                   "images": enc.images,
                   "ends": {p.name: by_limit[p.chunk_tokens] for p in self.phases}}
        for key, value in sorted(tally.items()):
            yield count(key, value)


PROVENANCE = ("url", "warc_file", "warc_offset", "warc_date", "page_url", "img_url")  # what a drop row needs


def _drop(sample: dict, reason: str, detail: str = "") -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(DROPS, (sample["doc"], sample["modality"], reason, detail))


class TokenizeAndChunk(beam.PTransform):
    """Samples ({doc, modality, epochs}) -> token records (main output), counters (tag COUNTERS) and
    the samples that cannot be packed (tag DROPS); `vision` sizes each image's visual tokens."""

    def __init__(self, cfg: PackConfig, vision: VisionPolicy = VisionPolicy()):
        super().__init__()
        self.cfg, self.vision = cfg, vision

    def expand(self, samples):
        return (samples | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=self.cfg.batch_docs)
                | "Tokenize" >> beam.ParDo(_Tokenize(self.cfg, self.vision)).with_outputs(COUNTERS, DROPS, main="docs"))


# ------------------------------------------------------------------------------------------ phases
class _Allocate(beam.DoFn):
    """A token record -> the chunk records of each of its epoch copies, under the tag of every phase the
    plan gives it to (all copies of a sample go together: the allocation follows the sample's id)."""

    def process(self, doc, plan):
        n, copies = doc["n_tokens"], doc["copies"]
        names = assign(plan, n, doc["id"])
        group = group_of(doc["modality"])
        if not names:
            yield count("phase/unused_docs")
            yield count("phase/unused_tokens", n * copies)
        elif len(names) > 1:
            yield count("phase/shared_docs")
            yield count("phase/shared_tokens", n * copies)
        ids = doc["ids"]
        size = ID_DTYPE.itemsize
        for name in names:
            ends = doc["ends"][name]
            for epoch in range(copies):
                for index, (a, b) in enumerate(zip([0] + ends, ends)):
                    images = tuple((start - a, *rest) for start, *rest in doc["images"] if a <= start < b)
                    yield beam.pvalue.TaggedOutput(name, {
                        "doc_id": doc["id"], "epoch": epoch, "chunk": index, "length": b - a,
                        "modality": doc["modality"], "images": images, "ids": ids[a * size:b * size]})
            yield count(f"phase/{name}/docs")
            yield count(f"phase/{name}/tokens", n * copies)
            yield count(f"phase/{name}/{group}_tokens", n * copies)
            yield count(f"phase/{name}/chunks", len(ends) * copies)


class AllocatePhases(beam.PTransform):
    """Token records -> {"plan": one-element plan, "counters": summed (key, n), <phase>: chunk records}.

    The plan (packing/phases.py) comes from a Combine of a length histogram; each document's phases
    then follow from its id and length alone."""

    def __init__(self, cfg: PackConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        phases = configured_phases(self.cfg)
        budget, min_seqs = self.cfg.budget_tokens, self.cfg.min_sequences
        plan = (docs | "Histogram" >> beam.Map(lambda d: (length_bucket(d["n_tokens"]), (1, d["n_tokens"] * d["copies"])))
                | "SumBuckets" >> beam.CombinePerKey(_tuple_sum)
                | "OneHistogram" >> beam.combiners.ToList()
                | "Plan" >> beam.Map(lambda h: make_plan(dict(h), phases, budget, min_seqs)))
        out = docs | "Allocate" >> beam.ParDo(_Allocate(), plan=beam.pvalue.AsSingleton(plan)).with_outputs(
            COUNTERS, *[p.name for p in phases])
        result = {p.name: out[p.name] for p in phases}
        result["plan"] = plan
        result["counters"] = out[COUNTERS] | "SumCounters" >> beam.CombinePerKey(sum)
        return result


# ----------------------------------------------------------------------------------------- packing
def chunk_group(doc_id: str, epoch: int, index: int, groups: int, seed: int) -> int:
    return xxhash.xxh64_intdigest(f"{doc_id}/{epoch}/{index}".encode("utf-8"), seed) % groups


class _PackGroup(beam.DoFn):
    """(group, [(chunk id, length)]) -> (group, sequence number, [chunk ids]) per packed sequence,
    and (group, sequences, tokens) under GROUPS."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len

    def process(self, element):
        group, items = element
        items = sorted(items)
        lengths = np.fromiter((length for _, length in items), dtype=np.int64, count=len(items))
        order, offsets = pack_lengths_csr(lengths, self.seq_len)
        order, offsets = order.tolist(), offsets.tolist()
        for b in range(len(offsets) - 1):
            yield group, b, [items[i][0] for i in order[offsets[b]:offsets[b + 1]]]
        yield beam.pvalue.TaggedOutput(GROUPS, (group, len(offsets) - 1, int(lengths.sum())))


def layout(group_stats: list, seq_len: int, shard_tokens: int) -> dict:
    """Global numbering of sequences (group by group) and the number of shards."""
    offsets, at = {}, 0
    for group, sequences, _ in sorted(group_stats):
        offsets[group] = at
        at += sequences
    shards = min(at, -(-at * seq_len // shard_tokens))
    return {"offsets": offsets, "sequences": at, "shards": shards}


class _Place(beam.DoFn):
    """A packed sequence -> (chunk id, (shard, position, slot)) for each of its chunks."""

    def __init__(self, seed: int):
        self.seed = seed
        self.perm = None

    def process(self, element, where):
        group, b, chunk_ids = element
        if self.perm is None or self.perm.n != where["sequences"]:
            self.perm = Permutation(where["sequences"], self.seed)
        pos = self.perm(where["offsets"][group] + b)
        shard = pos * where["shards"] // where["sequences"]
        for slot, chunk_id in enumerate(chunk_ids):
            yield chunk_id, (shard, pos, slot)


def _route(element):
    chunk_id, joined = element
    chunks, places = list(joined["chunk"]), list(joined["where"])
    if len(chunks) != 1 or len(places) != 1:
        raise RuntimeError(f"chunk {chunk_id}: {len(chunks)} records, {len(places)} places")
    shard, pos, slot = places[0]
    c = chunks[0]
    yield shard, (pos, slot, c["doc_id"], c["chunk"], c["epoch"], c["modality"], tuple(map(tuple, c["images"])), c["ids"])


class _WritePackedShard(beam.DoFn):
    """(shard, its placed chunks) -> the shard file of packed token sequences under `directory`;
    emits its file name and statistics (for manifest.json)."""

    def __init__(self, directory: str, phase: Phase, pad_id: int):
        self.directory, self.phase, self.pad_id = directory, phase, pad_id

    def process(self, element, where):
        shard, rows = element
        sequences: list = []
        for pos, _, doc_id, index, epoch, modality, images, ids in sorted(rows):
            if not sequences or sequences[-1][0] != pos:
                sequences.append((pos, []))
            sequences[-1][1].append(shard_format.Segment(
                doc_id, index, np.frombuffer(ids, dtype=ID_DTYPE).astype(np.int32), epoch, modality, images))
        name = shard_format.shard_name(shard, where["shards"])
        with FileSystems.create(FileSystems.join(self.directory, name)) as fh:
            stats = shard_format.write_shard(fh, sequences, self.phase.seq_len, self.pad_id, self.phase.name)
        yield {"file": name, **stats}


class _Finish(beam.DoFn):
    """Writes manifest.json (one element, after every shard) and emits the phase's counters."""

    def __init__(self, directory: str, phase: Phase, cfg: PackConfig, tokenizer: dict):
        self.directory, self.phase, self.cfg, self.tokenizer = directory, phase, cfg, tokenizer

    def process(self, _, shards, groups, summary, plan, allocation, mix):
        p, target = self.phase, self.cfg.padding_target
        rates = [(n * p.seq_len - t) / (n * p.seq_len) for _, n, t in groups if n]
        status, section = "ok", {}
        if plan is not None:
            entry = plan["phases"][p.name]
            status = entry["status"]
            section = {**{k: entry[k] for k in ("share", "budget_tokens", "needed_tokens", "status")},
                       "corpus_tokens": plan["total_tokens"], "corpus_docs": plan["total_docs"],
                       **{k: allocation.get(f"phase/{k}", 0) for k in ("shared_docs", "shared_tokens",
                                                                        "unused_docs", "unused_tokens")}}
        figures = dict(zip(SUMMARY, summary))
        meta = shard_format.manifest(
            p.name, p.seq_len, p.chunk_tokens, self.tokenizer, shards, status=status, padding_target=target,
            chunks=figures["chunks"], documents=figures["documents"], groups=len(groups),
            min_group_tokens=p.min_group_tokens, max_group_padding_rate=max(rates, default=0.0),
            groups_above_target=sum(r > target for r in rates), seed=self.cfg.seed, allocation=section,
            modalities=modality_section(figures, mix))
        with FileSystems.create(FileSystems.join(self.directory, shard_format.MANIFEST)) as fh:
            fh.write(shard_format.manifest_bytes(meta))
        key = f"pack/{p.name}"
        for field in ("sequences", "tokens", "padding_tokens", "chunks", "documents", "groups",
                      "groups_above_target"):
            yield f"{key}/{field}", meta[field]
        yield f"{key}/shards", len(meta["shards"])
        yield f"{key}/padding_rate", meta["padding_rate"]
        yield f"{key}/max_group_padding_rate", meta["max_group_padding_rate"]
        yield f"{key}/status:{meta['status']}", 1
        for field in ("images", "visual_tokens"):
            yield f"{key}/{field}", meta[field]
        yield beam.pvalue.TaggedOutput(MANIFESTS, {k: meta[k] for k in PHASE_FIGURES})


MANIFESTS = "manifests"
PHASE_FIGURES = ("phase", "status", "seq_len", "sequences", "tokens", "padding_rate", "tokens_by_modality",
                 "text_to_multimodal_ratio", "images", "visual_tokens", "documents")


def modality_section(figures: dict, mix: dict | None) -> dict:
    """The manifest's modality figures: tokens_by_modality (multimodal = pairs + interleaved, their visual
    tokens included), text_to_multimodal_ratio, images, and the mixing plan's multipliers."""
    text, multimodal = figures["text_tokens"], figures["pair_tokens"] + figures["interleaved_tokens"]
    return {"tokens_by_modality": {"text": text, "multimodal": multimodal, "pair": figures["pair_tokens"],
                                   "interleaved": figures["interleaved_tokens"]},
            "text_to_multimodal_ratio": text / multimodal if multimodal else None,
            "images": figures["images"], "visual_tokens": figures["visual_tokens"],
            "epoch_multipliers": (mix or {}).get("multipliers")}


SUMMARY = ("chunks", "tokens", "documents", "text_tokens", "pair_tokens", "interleaved_tokens", "visual_tokens",
           "images")


def _chunk_id(c: dict) -> tuple:
    return c["doc_id"], c["epoch"], c["chunk"]


def _chunk_summary(c: dict) -> tuple:
    """A chunk's part of the phase's SUMMARY figures (a document counts once, at its first chunk)."""
    n, modality = c["length"], c["modality"]
    return (1, n, int(c["chunk"] == 0 and c["epoch"] == 0), n * (modality == TEXT), n * (modality == PAIR),
            n * (modality == INTERLEAVED), sum(block[1] for block in c["images"]), len(c["images"]))


class PackAndWrite(beam.PTransform):
    """Chunk records of one phase -> shards + manifest.json under `directory`; returns counters
    (key, n), one element per key, and (tag MANIFESTS) the manifest's main figures. `plan`/`allocation`
    (from AllocatePhases) add the phase's status and allocation figures to the manifest, `mix` (from
    BalanceRatio) the epoch multipliers; without them the phase is reported on its own."""

    def __init__(self, cfg: PackConfig, directory: str, phase: Phase, tokenizer: dict, plan=None, allocation=None,
                 mix=None):
        super().__init__()
        self.cfg, self.directory, self.phase, self.tokenizer = cfg, directory, phase, tokenizer
        self.plan, self.allocation, self.mix = plan, allocation, mix

    def expand(self, chunks):
        p, phase, seed = chunks.pipeline, self.phase, self.cfg.seed
        lengths = chunks | "Lengths" >> beam.Map(lambda c: (_chunk_id(c), c["length"]))
        summary = (chunks | "Summary" >> beam.Map(_chunk_summary)
                   | "SumSummary" >> beam.CombineGlobally(_tuple_sum)
                   | "OrZero" >> beam.Map(lambda s: s or (0,) * len(SUMMARY)))
        n_groups = summary | "Groups" >> beam.Map(lambda s, m: max(1, s[1] // m), phase.min_group_tokens)
        packed = (lengths
                  | "KeyByGroup" >> beam.Map(lambda kl, g: (chunk_group(*kl[0], g, seed), kl),
                                             g=beam.pvalue.AsSingleton(n_groups))
                  | "GroupChunks" >> beam.GroupByKey()
                  | "PackGroup" >> beam.ParDo(_PackGroup(phase.seq_len)).with_outputs(GROUPS, main="sequences"))
        where = (packed[GROUPS] | "OneGroupList" >> beam.combiners.ToList()
                 | "Layout" >> beam.Map(layout, phase.seq_len, self.cfg.shard_tokens))
        where_side = beam.pvalue.AsSingleton(where)
        places = packed.sequences | "Place" >> beam.ParDo(_Place(seed), where=where_side)
        keyed = chunks | "KeyByChunk" >> beam.Map(lambda c: (_chunk_id(c), c))
        written = ({"chunk": keyed, "where": places} | "JoinPlaces" >> beam.CoGroupByKey()
                   | "Route" >> beam.FlatMap(_route)
                   | "GroupShard" >> beam.GroupByKey()
                   | "WriteShard" >> beam.ParDo(
                       _WritePackedShard(self.directory, phase, self.tokenizer["pad_id"]), where=where_side))
        plan = beam.pvalue.AsSingleton(self.plan) if self.plan is not None else None
        allocation = beam.pvalue.AsDict(self.allocation) if self.allocation is not None else {}
        mix = beam.pvalue.AsSingleton(self.mix) if self.mix is not None else None
        return (p | "Once" >> beam.Create([None])
                | "Finish" >> beam.ParDo(_Finish(self.directory, phase, self.cfg, self.tokenizer),
                                         shards=beam.pvalue.AsList(written), groups=beam.pvalue.AsList(packed[GROUPS]),
                                         summary=beam.pvalue.AsSingleton(summary),
                                         plan=plan, allocation=allocation, mix=mix).with_outputs(MANIFESTS, main="counters"))


# --------------------------------------------------------------------------------------- the stage
class ShardInputs(NamedTuple):
    """What the shard stage mixes besides the text documents: the other branches' final documents (None:
    the branch did not run) and the drop rows of each branch's dedup stages, in stage order (for
    clusters: twins and rehydration)."""

    interleaved: beam.PCollection | None = None
    pairs: beam.PCollection | None = None
    text_dedup: tuple = ()
    interleaved_dedup: tuple = ()


class BuildShardsResult(NamedTuple):
    counters: beam.PCollection   # (key, n) with tokenize/*, mix/*, phase/* and pack/<phase>/* keys (sum per key)
    packed: beam.PCollection     # one token record (with its copies) per sample that went into packing
    dropped: beam.PCollection    # (doc, modality, reason, detail) of every sample the stage dropped


def _clusters(p, rows: tuple, label: str):
    if not rows:
        return p | f"{label}/NoClusters" >> beam.Create([])
    return rows | f"{label}/Clusters" >> mix_transforms.Clusters(label)


class _RunManifest(beam.DoFn):
    """OUT/shards/manifest.json: the corpus after mixing (tokens by modality over every copy, the ratio,
    the multipliers and thresholds, the twins) and each phase's main figures."""

    def __init__(self, directory: str, cfg: PackConfig):
        self.directory, self.cfg = directory, cfg

    def process(self, _, plan, totals, phases, counters):
        tokens = {m: 0 for m in (TEXT, PAIR, INTERLEAVED)}
        largest = {g: 0 for g in mixing.GROUPS}
        for modality, n, biggest in totals:
            tokens[modality] += n
            largest[group_of(modality)] = max(largest[group_of(modality)], biggest)
        multimodal = tokens[PAIR] + tokens[INTERLEAVED]
        ratio = plan["target_ratio"]
        short = next((g for g in mixing.GROUPS if plan["multipliers"][g] > 1), None)
        meta = {
            "format": shard_format.FORMAT, "status": plan["status"], "status_detail": plan["status_detail"],
            "tokens_by_modality": {"text": tokens[TEXT], "multimodal": multimodal, "pair": tokens[PAIR],
                                   "interleaved": tokens[INTERLEAVED]},
            "text_to_multimodal_ratio": tokens[TEXT] / multimodal if multimodal else None,
            "target_ratio": ratio, "epoch_multipliers": plan["multipliers"],
            "target_tokens": plan["targets"], "balanced_group": short,
            # how far the realised ratio is from the target, in tokens of the balanced group, and the
            # largest sample of that group: the first is at most about half the second
            "ratio_error_tokens": (None if short is None or ratio is None else
                                   (multimodal - tokens[TEXT] / ratio if short == "multimodal"
                                    else tokens[TEXT] - ratio * multimodal)),
            "largest_sample_tokens": largest, "thresholds": plan["thresholds"],
            "twins": {"text_replaced": counters.get("mix/replaced_by_multimodal", 0),
                      "multimodal_with_text_twin": counters.get("mix/multimodal_with_twin", 0)},
            "epochs": self.cfg.mix.model_dump(),
            "phases": {m["phase"]: m for m in sorted(phases, key=lambda m: m["phase"])}}
        with FileSystems.create(FileSystems.join(self.directory, shard_format.MANIFEST)) as fh:
            fh.write(shard_format.manifest_bytes(meta))
        yield f"mix/status:{plan['status']}", 1


class BuildShards(beam.PTransform):
    """Text documents (+ ShardInputs) -> OUT/shards/<phase>/ for every configured phase and
    OUT/shards/manifest.json (BuildShardsResult): samples with their epochs, text twins replaced by
    their multimodal versions, tokens, the exact text : multimodal ratio, phases, packing; `vision`
    sizes each image's visual tokens."""

    def __init__(self, cfg: PackConfig, directory: str, inputs: ShardInputs = ShardInputs(),
                 vision: VisionPolicy = VisionPolicy()):
        super().__init__()
        self.cfg, self.directory, self.inputs, self.vision = cfg, directory, inputs, vision

    def expand(self, text_docs):
        p, mix, info, inputs = text_docs.pipeline, self.cfg.mix, tokenizer_info(self.cfg), self.inputs
        samples = {TEXT: (text_docs, _clusters(p, inputs.text_dedup, "TextClusters"))
                   | "TextSamples" >> mix_transforms.WithEpochs(TEXT, mix)}
        if inputs.interleaved is not None:
            samples[INTERLEAVED] = ((inputs.interleaved, _clusters(p, inputs.interleaved_dedup, "InterleavedClusters"))
                                    | "InterleavedSamples" >> mix_transforms.WithEpochs(INTERLEAVED, mix))
        if inputs.pairs is not None:
            base = mix.epochs.pair
            samples[PAIR] = inputs.pairs | "PairSamples" >> beam.Map(
                lambda doc: {"doc": doc, "modality": PAIR, "epochs": base, "keys": []})
        # each modality tokenized in the stage that makes its samples (no Flatten gathers every sample first)
        tokens = {modality: pcoll | f"TokenizeAndChunk {modality}" >> TokenizeAndChunk(self.cfg, self.vision)
                  for modality, pcoll in samples.items()}
        counts = [t[COUNTERS] for t in tokens.values()]
        drops = [t[DROPS] for t in tokens.values()]
        parts = {modality: t.docs for modality, t in tokens.items()}
        if inputs.interleaved is not None:
            twins = (parts[TEXT], parts[INTERLEAVED]) | "ResolveTwins" >> mix_transforms.ResolveTwins()
            parts.update({TEXT: twins[TEXT], INTERLEAVED: twins[INTERLEAVED]})
            drops.append(twins[mix_transforms.REPLACED] | "Replaced" >> beam.MapTuple(
                lambda r, survivor: ({"id": r["id"], **r["where"]}, TEXT, mix_transforms.REPLACED, survivor)))
            counts.append(drops[-1] | "CountReplaced" >> beam.Map(lambda _: ("mix/replaced_by_multimodal", 1)))
        records = list(parts.values()) | "Resolved" >> beam.Flatten()
        balanced, plan = records | "BalanceRatio" >> mix_transforms.BalanceRatio(mix)
        sampled = balanced | "Sampled" >> beam.Partition(lambda r, _: int(r["copies"] > 0), 2)
        not_sampled, packed = sampled[0], sampled[1]
        counts += [records | "Twins" >> beam.FlatMap(lambda r: [("mix/multimodal_with_twin", 1)] if r.get("twins") else []),
                   packed | "Copies" >> beam.FlatMap(lambda r: [(f"mix/{r['modality']}/copies", r["copies"]),
                                                                (f"mix/{r['modality']}/tokens", r["copies"] * r["n_tokens"])])]
        alloc = packed | "AllocatePhases" >> AllocatePhases(self.cfg)
        # the phases read the allocation's counters as a side input, so the Flatten below takes a copy
        parts = [*counts, alloc["counters"] | "AllocationCounters" >> beam.Map(lambda kv: kv)]
        manifests = []
        for phase in configured_phases(self.cfg):
            out = alloc[phase.name] | f"Pack {phase.name}" >> PackAndWrite(
                self.cfg, FileSystems.join(self.directory, phase.name), phase, info, alloc["plan"],
                alloc["counters"], plan)
            parts.append(out.counters)
            manifests.append(out[MANIFESTS])
        totals = (packed | "ModalityTotals" >> beam.Map(lambda r: (r["modality"], (r["n_tokens"] * r["copies"], r["n_tokens"])))
                  | "SumModality" >> beam.CombinePerKey(lambda rows: _sum_and_max(rows))
                  | "Flat" >> beam.MapTuple(lambda m, tm: (m, *tm)))
        # Two Flattens of the same parts, not one whose output feeds both the manifest's sum and the
        # stage's counters: Beam's Java fuser (the Flink and Spark job servers) cannot place a Flatten
        # input that a GroupByKey or a side input also reads (apache/beam issue 34647).
        counted = parts | "AllCounters" >> beam.Flatten()
        run_counters = (parts | "ManifestCounters" >> beam.Flatten()
                        | "SumForManifest" >> beam.CombinePerKey(sum))
        done = (p | "Once" >> beam.Create([None])
                | "RunManifest" >> beam.ParDo(_RunManifest(self.directory, self.cfg), beam.pvalue.AsSingleton(plan),
                                              beam.pvalue.AsList(totals),
                                              beam.pvalue.AsList(manifests | "AllManifests" >> beam.Flatten()),
                                              beam.pvalue.AsDict(run_counters)))
        drops += [not_sampled | "NotSampled" >> beam.Map(
            lambda r: ({"id": r["id"], **r["where"]}, r["modality"], "not_sampled", f"epochs {r['epochs']:.4g}"))]
        return BuildShardsResult((counted, done) | "WithRunManifest" >> beam.Flatten(), packed,
                                 drops | "AllDrops" >> beam.Flatten())


def _sum_and_max(rows):
    total, largest = 0, 0
    for n, biggest in rows:
        total, largest = total + n, max(largest, biggest)
    return total, largest
