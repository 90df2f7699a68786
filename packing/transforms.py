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
from typing import NamedTuple

import apache_beam as beam
import numpy as np
import xxhash
from apache_beam.io.filesystems import FileSystems

from packing import shards as shard_format
from packing.bfd import pack_lengths_csr
from packing.chunk import split_document
from packing.config import phases as configured_phases
from packing.permute import Permutation
from packing.phases import Phase, assign, length_bucket, make_plan
from packing.tokenizer import ID_DTYPE, DocTokenizer

COUNTERS = "counters"
GROUPS = "groups"


def count(key: str, n=1) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(COUNTERS, (key, n))


def tokenizer_info(cfg: dict) -> dict:
    """The tokenizer facts the manifests record (loads the tokenizer once, in the driver)."""
    return DocTokenizer.from_config(cfg).info.to_dict()


def _tuple_sum(rows) -> tuple:
    total = None
    for row in rows:
        total = row if total is None else tuple(a + b for a, b in zip(total, row))
    return total


# ------------------------------------------------------------------------------------ tokenize + chunk
NO_TOKENS = "no_tokens"  # documents whose text gives no tokens (BOS/EOS only)


class _Tokenize(beam.DoFn):
    """A batch of documents -> one token record each (tokens(doc) and its chunk ends per phase), or
    the document itself under NO_TOKENS."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.phases = configured_phases(cfg)
        self.tok = None

    def setup(self):
        self.tok = DocTokenizer.from_config(self.cfg)

    def process(self, batch):
        texts = [doc["text"] or "" for doc in batch]
        specials = len(self.tok.prefix) + len(self.tok.suffix)
        limits = sorted({p.chunk_tokens for p in self.phases})
        kept = tokens = 0
        for doc, text, ids in zip(batch, texts, self.tok.encode_batch(texts)):
            if len(ids) == specials:
                yield beam.pvalue.TaggedOutput(NO_TOKENS, doc)
                continue
            offsets_of = functools.cache(lambda text=text: self.tok.text_offsets(text))
            by_limit = {limit: split_document(text, len(ids), offsets_of, len(self.tok.prefix), limit,
                                              self.cfg["chunk_window"]) for limit in limits}
            kept += 1
            tokens += len(ids)
            yield {"id": doc["id"], "n_tokens": len(ids), "ids": ids.tobytes(),
                   "ends": {p.name: by_limit[p.chunk_tokens] for p in self.phases}}
        yield count("tokenize/docs", kept)
        yield count("tokenize/tokens", tokens)


class TokenizeAndChunk(beam.PTransform):
    """docs (dicts with id, text) -> token records (main output), counters (tag COUNTERS) and the
    documents that give no tokens (tag NO_TOKENS)."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        return (docs | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=self.cfg["batch_docs"])
                | "Tokenize" >> beam.ParDo(_Tokenize(self.cfg)).with_outputs(COUNTERS, NO_TOKENS, main="docs"))


# ------------------------------------------------------------------------------------------ phases
class _Allocate(beam.DoFn):
    """A token record -> its chunk records, under the tag of every phase the plan gives it to."""

    def process(self, doc, plan):
        names = assign(plan, doc["n_tokens"], doc["id"])
        n = doc["n_tokens"]
        if not names:
            yield count("phase/unused_docs")
            yield count("phase/unused_tokens", n)
        elif len(names) > 1:
            yield count("phase/shared_docs")
            yield count("phase/shared_tokens", n)
        ids = doc["ids"]
        size = ID_DTYPE.itemsize
        for name in names:
            ends = doc["ends"][name]
            for index, (a, b) in enumerate(zip([0] + ends, ends)):
                yield beam.pvalue.TaggedOutput(name, {"doc_id": doc["id"], "chunk": index, "length": b - a,
                                                      "ids": ids[a * size:b * size]})
            yield count(f"phase/{name}/docs")
            yield count(f"phase/{name}/tokens", n)
            yield count(f"phase/{name}/chunks", len(ends))


class AllocatePhases(beam.PTransform):
    """Token records -> {"plan": one-element plan, "counters": summed (key, n), <phase>: chunk records}.

    The plan (packing/phases.py) comes from a Combine of a length histogram; each document's phases
    then follow from its id and length alone."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        phases = configured_phases(self.cfg)
        budget, min_seqs = self.cfg["budget_tokens"], self.cfg["min_sequences"]
        plan = (docs | "Histogram" >> beam.Map(lambda d: (length_bucket(d["n_tokens"]), (1, d["n_tokens"])))
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
def chunk_group(doc_id: str, index: int, groups: int, seed: int) -> int:
    return xxhash.xxh64_intdigest(f"{doc_id}/{index}".encode("utf-8"), seed) % groups


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
    yield shard, (pos, slot, chunk_id[0], chunk_id[1], chunks[0]["ids"])


class _WritePackedShard(beam.DoFn):
    """(shard, its placed chunks) -> the shard file of packed token sequences under `directory`;
    emits its file name and statistics (for manifest.json)."""

    def __init__(self, directory: str, phase: Phase, pad_id: int):
        self.directory, self.phase, self.pad_id = directory, phase, pad_id

    def process(self, element, where):
        shard, rows = element
        sequences: list = []
        for pos, _, doc_id, index, ids in sorted(rows):
            if not sequences or sequences[-1][0] != pos:
                sequences.append((pos, []))
            sequences[-1][1].append((doc_id, index, np.frombuffer(ids, dtype=ID_DTYPE).astype(np.int32)))
        name = shard_format.shard_name(shard, where["shards"])
        with FileSystems.create(FileSystems.join(self.directory, name)) as fh:
            stats = shard_format.write_shard(fh, sequences, self.phase.seq_len, self.pad_id, self.phase.name)
        yield {"file": name, **stats}


class _Finish(beam.DoFn):
    """Writes manifest.json (one element, after every shard) and emits the phase's counters."""

    def __init__(self, directory: str, phase: Phase, cfg: dict, tokenizer: dict):
        self.directory, self.phase, self.cfg, self.tokenizer = directory, phase, cfg, tokenizer

    def process(self, _, shards, groups, summary, plan, allocation):
        p, target = self.phase, self.cfg["padding_target"]
        rates = [(n * p.seq_len - t) / (n * p.seq_len) for _, n, t in groups if n]
        status, section = "ok", {}
        if plan is not None:
            entry = plan["phases"][p.name]
            status = entry["status"]
            section = {**{k: entry[k] for k in ("share", "budget_tokens", "needed_tokens", "status")},
                       "corpus_tokens": plan["total_tokens"], "corpus_docs": plan["total_docs"],
                       **{k: allocation.get(f"phase/{k}", 0) for k in ("shared_docs", "shared_tokens",
                                                                        "unused_docs", "unused_tokens")}}
        chunks, _, documents = summary
        meta = shard_format.manifest(
            p.name, p.seq_len, p.chunk_tokens, self.tokenizer, shards, status=status, padding_target=target,
            chunks=chunks, documents=documents, groups=len(groups), min_group_tokens=p.min_group_tokens,
            max_group_padding_rate=max(rates, default=0.0), groups_above_target=sum(r > target for r in rates),
            seed=self.cfg["seed"], allocation=section)
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


class PackAndWrite(beam.PTransform):
    """Chunk records of one phase -> shards + manifest.json under `directory`; returns counters
    (key, n), one element per key. `plan`/`allocation` (from AllocatePhases) add the phase's status
    and allocation figures to the manifest; without them the phase is reported on its own."""

    def __init__(self, cfg: dict, directory: str, phase: Phase, tokenizer: dict, plan=None, allocation=None):
        super().__init__()
        self.cfg, self.directory, self.phase, self.tokenizer = cfg, directory, phase, tokenizer
        self.plan, self.allocation = plan, allocation

    def expand(self, chunks):
        p, phase, seed = chunks.pipeline, self.phase, self.cfg["seed"]
        lengths = chunks | "Lengths" >> beam.Map(lambda c: ((c["doc_id"], c["chunk"]), c["length"]))
        summary = (chunks | "Summary" >> beam.Map(lambda c: (1, c["length"], int(c["chunk"] == 0)))
                   | "SumSummary" >> beam.CombineGlobally(_tuple_sum)
                   | "OrZero" >> beam.Map(lambda s: s or (0, 0, 0)))
        n_groups = summary | "Groups" >> beam.Map(lambda s, m: max(1, s[1] // m), phase.min_group_tokens)
        packed = (lengths
                  | "KeyByGroup" >> beam.Map(lambda kl, g: (chunk_group(*kl[0], g, seed), kl),
                                             g=beam.pvalue.AsSingleton(n_groups))
                  | "GroupChunks" >> beam.GroupByKey()
                  | "PackGroup" >> beam.ParDo(_PackGroup(phase.seq_len)).with_outputs(GROUPS, main="sequences"))
        where = (packed[GROUPS] | "OneGroupList" >> beam.combiners.ToList()
                 | "Layout" >> beam.Map(layout, phase.seq_len, self.cfg["shard_tokens"]))
        where_side = beam.pvalue.AsSingleton(where)
        places = packed.sequences | "Place" >> beam.ParDo(_Place(seed), where=where_side)
        keyed = chunks | "KeyByChunk" >> beam.Map(lambda c: ((c["doc_id"], c["chunk"]), c))
        written = ({"chunk": keyed, "where": places} | "JoinPlaces" >> beam.CoGroupByKey()
                   | "Route" >> beam.FlatMap(_route)
                   | "GroupShard" >> beam.GroupByKey()
                   | "WriteShard" >> beam.ParDo(
                       _WritePackedShard(self.directory, phase, self.tokenizer["pad_id"]), where=where_side))
        plan = beam.pvalue.AsSingleton(self.plan) if self.plan is not None else None
        allocation = beam.pvalue.AsDict(self.allocation) if self.allocation is not None else {}
        return (p | "Once" >> beam.Create([None])
                | "Finish" >> beam.ParDo(_Finish(self.directory, phase, self.cfg, self.tokenizer),
                                         shards=beam.pvalue.AsList(written), groups=beam.pvalue.AsList(packed[GROUPS]),
                                         summary=beam.pvalue.AsSingleton(summary),
                                         plan=plan, allocation=allocation))


# --------------------------------------------------------------------------------------- the stage
class BuildShardsResult(NamedTuple):
    counters: beam.PCollection   # (key, n) with tokenize/*, phase/* and pack/<phase>/* keys (sum per key)
    tokenized: beam.PCollection  # one token record per document that went into packing
    no_tokens: beam.PCollection  # the documents whose text gives no tokens


class BuildShards(beam.PTransform):
    """Documents -> OUT/shards/<phase>/ for every configured phase (BuildShardsResult)."""

    def __init__(self, cfg: dict, directory: str):
        super().__init__()
        self.cfg, self.directory = cfg, directory

    def expand(self, docs):
        info = tokenizer_info(self.cfg)
        tokens = docs | "TokenizeAndChunk" >> TokenizeAndChunk(self.cfg)
        alloc = tokens.docs | "AllocatePhases" >> AllocatePhases(self.cfg)
        parts = [tokens[COUNTERS], alloc["counters"]]
        for phase in configured_phases(self.cfg):
            parts.append(alloc[phase.name] | f"Pack {phase.name}" >> PackAndWrite(
                self.cfg, FileSystems.join(self.directory, phase.name), phase, info, alloc["plan"],
                alloc["counters"]))
        return BuildShardsResult(parts | "AllCounters" >> beam.Flatten(), tokens.docs, tokens[NO_TOKENS])
