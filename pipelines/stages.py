"""The pipeline's Beam stages (SPEC §1): the text branch, packing and image-text pairs. Each stage
writes its own folder (stats, completion marker, dropped documents). Stages with
`starts_group = False` fuse into the preceding stage's Beam pipeline, so documents are materialized
only between groups (read+extract, language+quality+synthetic, exact_dedup+near_dedup+write, pack,
image_pairs). A rerun resumes after the last finished group.

A stage's `build` returns three PCollections: documents out, dropped documents, and counters
(key, n). Counters carry `in`, `out` and `dropped/<reason>`; the runner checks in = out + Σ dropped.
DoFns are thin: the logic lives in extract/, filters/ and dedup/, importable without Beam.
"""

from __future__ import annotations

import json
from collections import Counter

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import CompressionTypes
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipelines import io

DROPPED = "dropped"
COUNTERS = "counters"
FILE_ROWS = "file_rows"  # (warc_file, rows the reader emitted for it): what the loss audit adds up to
FILE_ROWS_JSON = "file_rows.json"


def scores_of(doc: dict) -> dict:
    return json.loads(doc.get("scores") or "{}")


def with_scores(doc: dict, **values) -> dict:
    scores = scores_of(doc)
    scores.update(values)
    return {**doc, "scores": json.dumps(scores, sort_keys=True)}


def drop(doc: dict, stage: str, reason: str, detail: str = "", text: str | None = None) -> beam.pvalue.TaggedOutput:
    row = {k: doc.get(k) for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
    row.update(stage=stage, reason=reason, detail=detail, scores=doc.get("scores") or "{}",
               text=text if text is not None else doc.get("text"))
    return beam.pvalue.TaggedOutput(DROPPED, row)


def count(key: str, n: int = 1) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(COUNTERS, (key, n))


def _final(tag: str, value) -> beam.pvalue.TaggedOutput:
    """An output emitted from finish_bundle, which must carry its own window."""
    return beam.pvalue.TaggedOutput(tag, WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()]))


class DocumentStep(beam.DoFn):
    """Base of the per-document stages. Subclasses implement `step(doc)`, yielding the kept document,
    or a `drop(...)`, plus any `count(...)`. The base tallies each bundle's `in`, `out`,
    `dropped/<reason>` and counters and emits them once in finish_bundle: the accounting costs a dict
    increment per document instead of a counting combiner per stage boundary. Bundle outputs commit
    together, so a retried bundle counts once.

    With `batch` > 1 documents are buffered and stepped `batch` at a time, back to back (for steps
    whose native code runs faster when nothing else runs in between, see ExtractText). Buffered
    documents are emitted from a later element or from finish_bundle, in the global window: the
    pipeline is batch."""

    batch = 1

    def start_bundle(self):
        self._tally = Counter()
        self._buffer = []

    def process(self, doc):
        if self.batch <= 1:
            yield from self._step_counted(doc)
            return
        self._buffer.append(doc)
        if len(self._buffer) >= self.batch:
            yield from self._drain()

    def _drain(self):
        buffer, self._buffer = self._buffer, []
        self.prepare(buffer)
        for doc in buffer:
            yield from self._step_counted(doc)

    def _step_counted(self, doc):
        tally = self._tally
        tally["in"] += 1
        for out in self.step(doc):
            if not isinstance(out, beam.pvalue.TaggedOutput):
                tally["out"] += 1
            elif out.tag == COUNTERS:
                tally[out.value[0]] += out.value[1]
                continue
            else:
                tally[f"dropped/{out.value['reason']}"] += 1
            yield out

    def finish_bundle(self):
        for out in self._drain():
            if isinstance(out, beam.pvalue.TaggedOutput):
                yield _final(out.tag, out.value)
            else:
                yield WindowedValue(out, MIN_TIMESTAMP, [GlobalWindow()])
        for key, n in self._tally.items():
            yield _final(COUNTERS, (key, n))

    def prepare(self, docs: list[dict]) -> None:
        """Called with each batch before its documents are stepped (batched model calls)."""

    def step(self, doc):
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- read
class ReadWarcFile(beam.DoFn):
    """One WARC/WET file -> raw documents (HTML/WET), PDFs (tag 'pdf'), reason-coded drops, and with
    `images` the image responses (tag 'image') for the image-text branch. Like a DocumentStep it
    tallies its own `in` (records and damaged units), `out` and drops, once per file, plus
    `read/skipped_bytes` (bytes that damaged units cost) and `records/truncated` (WARC-Truncated
    captures, kept: their text is usually usable). A record id seen twice in one file (a writer that
    appended a capture again, a reader that re-read a member) is one record: the repeat is
    `duplicate_record`. A file matched twice is read once (`match_inputs`); copies of a record in two
    files are exact duplicates, and the write stage keeps one row per id whatever happens between."""

    def __init__(self, max_record_bytes: int, images: bool = False):
        self.max_record_bytes = max_record_bytes
        self.images = images

    def process(self, readable_file):
        from extract.records import DOCUMENT_TYPES, doc_id, route
        from extract.warc import ReadError, iter_records

        path = readable_file.metadata.path
        counts = Counter()  # per-file tallies, emitted once: a counter element per record costs too much
        rows = 0            # rows this file puts into the stage's outputs (documents and drop rows)
        seen = {}           # doc id -> offset of its first capture in this file
        at_offset = Counter()  # records sharing one offset (a multi-record gzip member)
        with readable_file.open(compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            for item in iter_records(stream, self.max_record_bytes):
                counts["in"] += 1
                if isinstance(item, ReadError):
                    counts[f"records/error:{item.reason}"] += 1
                    counts[f"dropped/{item.reason}"] += 1
                    counts["read/skipped_bytes"] += item.skipped
                    index = at_offset[item.offset]
                    at_offset[item.offset] += 1
                    doc = {"id": f"{path}@{item.offset}" + (f"#{index}" if index else ""), "url": "",
                           "warc_file": path, "warc_offset": item.offset, "warc_date": ""}
                    rows += 1
                    yield drop(doc, "read", item.reason, item.detail, text="")
                    continue
                counts[f"records/{item.warc_type}"] += 1
                index = at_offset[item.offset]
                at_offset[item.offset] += 1
                where, reason = route(item)
                if where == "drop" and item.warc_type not in DOCUMENT_TYPES:
                    counts[f"dropped/{reason}"] += 1  # request, metadata, warcinfo: counted, not written
                    continue
                doc = {"id": doc_id(item, path, index), "url": item.url, "warc_file": path,
                       "warc_offset": item.offset, "warc_date": item.date}
                rows += 1
                if doc["id"] in seen:
                    counts["dropped/duplicate_record"] += 1
                    yield drop(doc, "read", "duplicate_record", f"{path}@{seen[doc['id']]}", text="")
                    continue
                seen[doc["id"]] = item.offset
                if item.warc_truncated:
                    counts["records/truncated"] += 1
                counts["out" if where in ("html", "text") else f"dropped/{reason}"] += 1
                if where == "drop":
                    content_type = item.http_content_type or item.identified_type
                    if self.images and reason == "non_html_image":
                        from extract.images import image_record

                        record = image_record(item.url, item.http_status, content_type, item.payload,
                                              item.x_robots_tag)
                        if record is not None:
                            yield beam.pvalue.TaggedOutput("image", {**record, "warc_date": item.date})
                    yield drop(doc, "read", reason, content_type, text="")
                elif where == "pdf":
                    yield beam.pvalue.TaggedOutput("pdf", {**doc, "payload": item.payload})
                    yield drop(doc, "read", reason, "written to docs/pdf", text="")
                else:
                    yield {**doc, "source": where, "content_type": item.http_content_type or item.identified_type,
                           "http_charset": item.http_charset, "payload": item.payload}
        for key, n in counts.items():
            yield count(key, n)
        yield beam.pvalue.TaggedOutput(FILE_ROWS, (path, rows))


def read_warcs(p, cfg, images: bool = False):
    """The input files (matched once when the run is planned: `cfg["input_files"]`) read record by
    record, each file once."""
    return (p | "Files" >> beam.Create(cfg["input_files"])
            | "Metadata" >> beam.Map(lambda f: FileMetadata(f["path"], f["size"], f["mtime"] or 0.0))
            | "Open" >> fileio.ReadMatches()
            | "Reshuffle files" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(ReadWarcFile(cfg["read"]["max_record_bytes"], images)).with_outputs(
                DROPPED, COUNTERS, "pdf", "image", FILE_ROWS, main="docs"))


class ReadStage:
    name, schema = "read", io.RAW_SCHEMA
    starts_group, needs_input, counts_itself = True, False, True

    def build(self, p, cfg, inputs, root):
        res = read_warcs(p, cfg)
        res.pdf | "WritePdf" >> io.WriteSortedParquet(io.join(root, "docs", "pdf"), io.PDF_SCHEMA, 1)
        (res[FILE_ROWS] | "FileRows" >> beam.combiners.ToDict()
         | "WriteFileRows" >> beam.Map(lambda rows: io.write_json(io.join(root, "read", FILE_ROWS_JSON), rows)))
        return res.docs, res[DROPPED], res[COUNTERS]


class PerDocumentStage:
    """A stage that is one DoFn over documents, configured by its own config section."""

    schema, needs_input, counts_itself = io.DOC_SCHEMA, True, True

    def __init__(self, name: str, dofn, starts_group: bool):
        self.name, self.dofn, self.starts_group = name, dofn, starts_group

    def build(self, p, cfg, inputs, root):
        res = inputs | self.name >> beam.ParDo(self.dofn(cfg[self.name])).with_outputs(
            DROPPED, COUNTERS, main="docs")
        return res.docs, res[DROPPED], res[COUNTERS]


# ------------------------------------------------------------------------------------------ extract
class ExtractText(DocumentStep):
    """Charset decoding and main-content extraction. Documents are extracted `batch_docs` at a time,
    back to back: with reading and Beam's own work in between every document, the same extraction
    ran ~10% slower (the extractor's code and tables fall out of the CPU caches)."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.batch = cfg["batch_docs"]

    def step(self, raw):
        from extract.html import ExtractionError, decode_html, extract_main_text

        doc = {k: raw[k] for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
        payload = raw["payload"] or b""
        try:
            if raw["source"] == "text":
                charset, text = "utf-8", payload.decode("utf-8", errors="replace")
            else:
                if len(payload) > self.cfg["max_html_bytes"]:
                    raise ExtractionError("html_too_large", f"{len(payload)} bytes")
                decoded = decode_html(payload, raw["http_charset"] or "")
                charset = decoded.charset
                if decoded.source != "declared":
                    yield count(f"charset/{decoded.source}")
                text = extract_main_text(decoded.text, self.cfg["engine"], self.cfg["timeout_ms"])
        except ExtractionError as err:
            yield drop(doc, "extract", err.reason, err.detail, text="")
            return
        except Exception as err:  # an extractor bug must cost one document, not the run
            yield drop(doc, "extract", "extract_error", repr(err)[:300], text="")
            return
        text = text.strip()
        scores = f'{{"html_bytes": {len(payload)}, "text_chars": {len(text)}}}'  # = json.dumps(sort_keys=True)
        out = {**doc, "charset": charset, "lang": "", "lang_score": 0.0, "scores": scores, "text": text}
        if len(text) < self.cfg["min_chars"]:
            yield drop(out, "extract", "no_text")
            return
        yield out


# ----------------------------------------------------------------------------------------- language
class IdentifyLanguage(DocumentStep):
    """fastText lid.176; the model loads once per worker in setup()."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.lid = None

    def setup(self):
        from filters.language import LanguageIdentifier

        self.lid = LanguageIdentifier(self.cfg["model"], self.cfg["max_chars"])

    def step(self, doc):
        lang, score = self.lid(doc["text"])
        doc = {**doc, "lang": lang, "lang_score": score}
        allowed = self.cfg["languages"]
        if score < self.cfg["min_score"]:
            yield drop(doc, "language", "lang_low_confidence", f"{lang}:{score:.3f}")
        elif allowed and lang not in allowed:
            yield drop(doc, "language", "lang_not_allowed", lang)
        else:
            yield doc


# ------------------------------------------------------------------------------------------ quality
class ApplyQualityRules(DocumentStep):
    """C4 policy/javascript line removal, then Gopher quality + repetition, C4 and FineWeb rules;
    every measured value is kept on the doc."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.rules = None

    def setup(self):
        from filters.quality import QualityConfig, QualityFilter

        self.rules = QualityFilter(QualityConfig.from_dict(self.cfg))

    def step(self, doc):
        from filters.clean import remove_boilerplate_lines

        values = {}
        if self.rules.config.c4_line_filter:
            text, values["boilerplate_lines"] = remove_boilerplate_lines(doc["text"])
            doc = {**doc, "text": text}
        failed, measured = self.rules(doc["text"], doc["lang"])
        values.update(measured)
        doc = with_scores(doc, **{k: round(float(v), 6) for k, v in values.items()})
        if failed:
            yield drop(doc, "quality", failed[0], ",".join(failed))
        else:
            yield doc


# ---------------------------------------------------------------------------------------- synthetic
class ScoreSyntheticText(DocumentStep):
    """LLM output and poor machine translation: implicit repetition (DeepSeek-V4.1 data step).
    Both probabilities (and the two parts of `llm_generated`: `llm_ngram`, `llm_style`) are stored on
    every document; drops use the configured (or shipped) thresholds
    and only languages a model was trained on. With `lm_model` set, Fast-DetectGPT's sampling
    discrepancy (filters/lm_detect.py) is computed too for languages the llm scorer judges, `lm_batch`
    documents per model call, stored as `llm_lm_discrepancy`; with `lm_logit` = [a, b] it joins
    `llm_generated` as a third head (log-odds a*d + b), and with `lm_discrepancy_threshold` set it
    drops as `llm_generated` on its own."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.scorer = self.thresholds = self.lm = None
        self.discrepancies = {}
        if cfg.get("lm_model"):
            self.batch = cfg["lm_batch"]

    def setup(self):
        from filters.synthetic import SyntheticTextScorer

        self.scorer = SyntheticTextScorer(self.cfg["llm_model"], self.cfg["mt_model"], self.cfg["max_chars"]).load()
        shipped = self.scorer.thresholds()
        self.thresholds = {k: self.cfg[f"{k}_threshold"] if self.cfg[f"{k}_threshold"] is not None else v
                           for k, v in shipped.items()}
        if self.cfg.get("lm_model"):
            from filters.lm_detect import SamplingDiscrepancy

            self.lm = SamplingDiscrepancy.from_config(self.cfg).load()

    def prepare(self, docs):
        if self.lm is not None:  # one batched LM call; only languages the llm scorer judges
            from filters.lm_detect import document_sample

            docs = [doc for doc in docs if self.scorer.judges_llm(doc["lang"])]
            samples = [document_sample(doc["text"], self.cfg["max_chars"]) for doc in docs]
            self.discrepancies = dict(zip((doc["id"] for doc in docs), self.lm.score(samples)))

    def step(self, doc):
        from filters.synthetic import with_lm_head

        scores = self.scorer.score(doc["text"], doc["lang"])
        discrepancy = self.discrepancies.pop(doc["id"], None)  # only for languages the llm scorer judges
        scores["llm_generated"] = with_lm_head(scores["llm_generated"], discrepancy, self.cfg.get("lm_logit"))
        values = {k: scores[k] for k in ("llm_generated", "llm_ngram", "llm_style", "poor_mt") if k in scores}
        if self.lm is not None:
            values["llm_lm_discrepancy"] = discrepancy
        doc = with_scores(doc, **values)
        for name in ("llm_generated", "poor_mt"):
            if scores[f"{name}_supported"] and scores[name] >= self.thresholds[name]:
                yield drop(doc, "synthetic", name, f"{scores[name]:.4f}>={self.thresholds[name]:.4f}")
                return
        limit = self.cfg.get("lm_discrepancy_threshold")
        if discrepancy is not None and limit is not None and discrepancy >= limit:
            yield drop(doc, "synthetic", "llm_generated", f"lm_discrepancy {discrepancy:.3f}>={limit}")
            return
        yield doc


# -------------------------------------------------------------------------------------- exact dedup
def _exact_dedup(cfg):
    from dedup.transforms import ExactDedup

    return ExactDedup(cfg["exact_dedup"]["survivor"])


def _near_dedup(cfg):
    """MinHash LSH near-duplicates, verified by exact Jaccard, clustered by connected components."""
    from dedup.near import NearDedup

    return NearDedup(cfg["near_dedup"])


class DedupStage:
    """A dedup transform's survivors pass on; every other member is dropped naming its survivor
    (detail) with its group size in the scores."""

    schema, needs_input, counts_itself = io.DOC_SCHEMA, True, False

    def __init__(self, name: str, transform, reason: str, starts_group: bool):
        self.name, self.transform, self.reason, self.starts_group = name, transform, reason, starts_group

    def build(self, p, cfg, inputs, root):
        res = inputs | f"{self.name}/Dedup" >> self.transform(cfg)
        stage, reason = self.name, self.reason
        drops = res.duplicates | f"{stage}/Drops" >> beam.MapTuple(
            lambda doc, survivor, size: drop(with_scores(doc, **{f"{stage}_group_size": size}), stage,
                                             reason, survivor).value)
        return res.docs, drops, res.counters


# -------------------------------------------------------------------------------------------- write
def _duplicate_record(row_kept):
    row, kept = row_kept
    return drop(row, "write", "duplicate_record", f"{kept['warc_file']}@{kept['warc_offset']}").value


class WriteStage:
    """Final text documents: deterministic id-sorted shards under OUT/docs/text/, one row per id (a
    second row with an id already written, e.g. one record copied into two files whose texts
    differ, is `duplicate_record`: the shards and the packer may rely on unique ids)."""

    name, schema = "write", io.DOC_SCHEMA
    starts_group, needs_input, counts_itself = False, True, False

    def build(self, p, cfg, inputs, root):
        docs_dir = io.join(root, "docs", "text")
        written = inputs | "WriteDocs" >> io.WriteSortedParquet(docs_dir, io.DOC_SCHEMA, cfg["write"]["shards"],
                                                                unique_ids=True)
        counters = written.written | "OutCount" >> beam.MapTuple(lambda shard, n: ("out", n))
        drops = written[io.DUPLICATE_IDS] | "DuplicateIds" >> beam.Map(_duplicate_record)
        return None, drops, counters


# -------------------------------------------------------------------------------------------- pack
def _pack_identity(key_n):
    """Map the packing counters onto the stage identity: documents tokenized are `out`, documents
    whose text gives no tokens are dropped (`no_tokens`); everything else stays an extra counter."""
    key, n = key_n
    yield key, n
    if key == "tokenize/docs":
        yield "out", n
    elif key == "tokenize/empty":
        yield "dropped/no_tokens", n


class PackStage:
    """Tokenize, chunk deterministically, allocate phases, best-fit pack, write shards (SPEC §1.3)."""

    name, schema = "pack", None
    starts_group, needs_input, counts_itself = True, True, False

    def build(self, p, cfg, inputs, root):
        from packing.config import resolve
        from packing.transforms import BuildShards

        counters = inputs | "BuildShards" >> BuildShards(resolve(cfg["pack"]), io.join(root, "shards"))
        return None, p | "NoDrops" >> beam.Create([]), counters | "Identity" >> beam.FlatMap(_pack_identity)


# ------------------------------------------------------------------------------------------- images
def _image_drop(row_reason_detail):
    row, reason, detail = row_reason_detail
    scores = json.dumps({"page_url": row.get("page_url"), "position": row.get("position")}, sort_keys=True)
    return {"id": row.get("id"), "url": row.get("img_url") or "", "warc_file": row.get("warc_file"),
            "warc_offset": None, "warc_date": row.get("warc_date"), "stage": "image_pairs", "reason": reason,
            "detail": detail or "", "scores": scores, "text": row.get("alt")}


class ImagesStage:
    """Image–alt-text pairs (SPEC §1.2): its own pass over the input WARCs, so the text branch never
    carries raw HTML; image bytes come from the WARCs' image responses, else the safe fetcher.
    Writes OUT/docs/pairs/ and the content-addressed OUT/images/; `in` counts <img> tags."""

    name, schema = "image_pairs", None
    starts_group, needs_input, counts_itself = True, False, False

    def build(self, p, cfg, inputs, root):
        from dedup.image import IMAGE_SCHEMA, PAIR_SCHEMA, ImagePairs

        read = read_warcs(p, cfg, images=True)
        res = (read.docs, read.image) | "ImagePairs" >> ImagePairs(cfg["image_pairs"])
        shards = cfg["write"]["shards"]
        res.pairs | "WritePairs" >> io.WriteSortedParquet(io.join(root, "docs", "pairs"), PAIR_SCHEMA, shards)
        res.images | "WriteImages" >> io.WriteSortedParquet(io.join(root, "images"), IMAGE_SCHEMA, shards)
        return None, res.dropped | "DropRows" >> beam.Map(_image_drop), res.counters


STAGES = {s.name: s for s in (
    ReadStage(),
    PerDocumentStage("extract", ExtractText, starts_group=False),
    PerDocumentStage("language", IdentifyLanguage, starts_group=True),
    PerDocumentStage("quality", ApplyQualityRules, starts_group=False),
    PerDocumentStage("synthetic", ScoreSyntheticText, starts_group=False),
    DedupStage("exact_dedup", _exact_dedup, "exact_duplicate", starts_group=True),
    DedupStage("near_dedup", _near_dedup, "near_duplicate", starts_group=False),
    WriteStage(), PackStage(), ImagesStage())}
