"""`curate extract`: each page of HTML or WARC files as the text the quality rules are handed, or why the
text branch drops it first, one JSON line per page (as trafilatura's command line prints a page's text).

The text comes from the text branch's own steps, called one document at a time without a pipeline:
the read stage's verdict on each record (`extract.records.record_fates`), `ExtractText` (charset
decoding, main-content extraction under its deadline), `IdentifyLanguage`, and the quality stage's line
removal (filters/clean.py), with the run config's sections. So a line's `text` is what `docs/text` holds for that
page when no later rule drops it. With `quality.template_lines`, a cross-page step, each page is extracted
once and spooled to a temporary file while each host's template lines are counted over all of them
(filters/template_lines.py `host_templates`, the rule the pipeline computes with Beam combines); the
spooled pages are then written without them, so the text agrees with a run over the same inputs.

Lines: `{"url": ..., "text": ..., "reason": ...}` per WARC record that stands for a page (requests,
metadata and warcinfo records are not pages), `{"path": ..., ...}` per HTML file; `text` is null when
`reason` is set. A damaged part of a WARC is a line with `url` null, its byte offset, and the read
stage's reason, so nothing in the input goes unreported.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import tempfile
from typing import Callable, Iterator, NamedTuple

HTML_SUFFIXES = (".html", ".htm", ".xhtml", ".html.gz", ".htm.gz", ".xhtml.gz")


class Unfinished(NamedTuple):
    """A page's text after language identification, before the quality stage's line removal."""
    text: str
    host: str | None


class TextBranchSteps:
    """The text branch's steps up to the quality rules, with the config `cfg` (a run config). Called on a
    list of raw pages (io.RAW_SCHEMA): each page's (text, None) or (None, reason). Each step goes over
    all the pages before the next starts, as the pipeline steps its batches (pipelines/stage.py
    DocumentStep): the extractor, lid.176's n-gram rows and the line steps' tables stay in the CPU
    caches instead of evicting one another at every page."""

    def __init__(self, cfg):
        from pipelines.stages import ExtractText, IdentifyLanguage

        self.cfg = cfg
        self.extract = ExtractText("extract", cfg.extract)
        self.language = IdentifyLanguage("language", cfg.language)
        for step in (self.extract, self.language):
            step.setup()
            step.start_bundle()
        self.templates: dict = {}  # host -> its template-line hashes (quality.template_lines)

    def __call__(self, raws: list[dict]) -> list[tuple[str | None, str | None]]:
        pages = self.unfinished(raws)
        texts = iter(self.finish([page for page, _ in pages if page is not None]))
        return [(None, reason) if page is None else (next(texts), None) for page, reason in pages]

    def unfinished(self, raws: list[dict]) -> list[tuple[Unfinished | None, str | None]]:
        """The extract and language stages: each page's (Unfinished, None) or (None, reason)."""
        from filters.template_lines import host_of
        from pipelines.stage import Drop

        docs = [self.extract.step(raw) for raw in raws]
        docs = [doc if isinstance(doc, Drop) else self.language.step(doc) for doc in docs]
        return [(None, doc.reason) if isinstance(doc, Drop) else
                (Unfinished(doc["text"], host_of(doc.get("url"))), None) for doc in docs]

    def finish(self, pages: list[Unfinished]) -> list[str]:
        """The quality stage's line removal: the host's template lines, then filters/clean.py's steps."""
        from filters.clean import clean_for_rules
        from filters.template_lines import remove_template_lines

        quality = self.cfg.quality
        texts = [remove_template_lines(page.text, self.templates[page.host])[0] if page.host in self.templates
                 else page.text for page in pages]
        return [clean_for_rules(text, quality.c4_line_filter, quality.link_list_lines, quality.boilerplate_model,
                                quality.rendering_max_copies, quality.label_lines)[0] for text in texts]


# a list of raw pages -> each one's (text, None) or (None, reason): TextBranchSteps or its `unfinished`
PageSteps = Callable[[list[dict]], list[tuple[object, str | None]]]
# Pages stepped together: the pipeline's batch for lid.176 (pipelines/stages.py IdentifyLanguage), fewer where
# their payloads reach BATCH_BYTES first (a record may be read.max_record_bytes: 64 MiB by default).
BATCH_PAGES = 256
BATCH_BYTES = 64 << 20


def html_raw_page(payload: bytes, path: str = "") -> dict:
    """An HTML file's bytes as a raw page (io.RAW_SCHEMA) of the read stage, its path as id and file."""
    return {"id": path, "url": "", "warc_file": path, "warc_offset": 0, "warc_date": "", "source": "html",
            "content_type": "text/html", "http_charset": "", "payload": payload}


def html_file_line(path: str) -> dict:
    """An HTML file's line, its raw page under `raw` (to be stepped), or its reason."""
    with open(path, "rb") as fh:
        payload = fh.read()
    if path.endswith(".gz"):
        try:
            payload = gzip.decompress(payload)
        except (OSError, EOFError):
            return {"path": path, "text": None, "reason": "not_gzip_data"}
    return {"path": path, "raw": html_raw_page(payload, path)}


def warc_lines(path: str, max_record_bytes: int) -> Iterator[dict]:
    """The read stage's verdict on each record (extract.records.record_fates) as a line; a page to step
    holds its raw page under `raw`."""
    from extract.records import raw_page, record_fates
    from extract.warc import iter_records

    with open(path, "rb") as stream:
        for item, doc, fate, reason in record_fates(iter_records(stream, max_record_bytes), path):
            if fate == "error":
                yield {"url": None, "offset": item.offset, "text": None, "reason": reason}
            elif fate == "duplicate":
                yield {"url": item.url, "text": None, "reason": "duplicate_record"}
            elif fate in ("html", "text"):
                yield {"url": item.url, "raw": raw_page(item, doc, fate)}
            elif fate != "not_a_page":  # requests, metadata, warcinfo are not pages
                yield {"url": item.url, "text": None, "reason": reason}


def stepped(lines: Iterator[dict], steps: PageSteps, batch: int = BATCH_PAGES,
            batch_bytes: int = BATCH_BYTES) -> Iterator[dict]:
    """`lines` in their order, each `raw` page replaced by its `text` and `reason` from `steps`, called on
    `batch` pages at a time, or fewer once their payloads hold `batch_bytes`."""
    waiting, raws, size = [], [], 0
    for line in lines:
        waiting.append(line)
        if "raw" in line:
            raws.append(line["raw"])
            size += len(line["raw"].get("payload") or b"")
            if len(raws) < batch and size < batch_bytes:
                continue
        elif raws:
            continue
        yield from _with_texts(waiting, steps(raws) if raws else [])
        waiting, raws, size = [], [], 0
    yield from _with_texts(waiting, steps(raws) if raws else [])


def _with_texts(lines: list[dict], results: list) -> Iterator[dict]:
    results = iter(results)
    for line in lines:
        if "raw" in line:
            line = {k: v for k, v in line.items() if k != "raw"}
            line["text"], line["reason"] = next(results)
        yield line


def html_file_page(path: str, steps: PageSteps) -> dict:
    """One HTML file's line."""
    return next(stepped(iter([html_file_line(path)]), steps))


def warc_pages(path: str, steps: PageSteps, max_record_bytes: int) -> Iterator[dict]:
    """A WARC file's lines."""
    return stepped(warc_lines(path, max_record_bytes), steps)


def _spooled(pages: Iterator[dict], steps: TextBranchSteps) -> Iterator[dict]:
    """`pages` (their `text` Unfinished or None) with their text finished, after every page has been read
    once to count each host's template lines; the pages wait in a temporary file meanwhile."""
    from filters.template_lines import host_templates, line_hashes

    quality = steps.cfg.quality
    seen = []  # (host, line hashes) of every page with a text
    with tempfile.TemporaryFile() as spool:
        for page in pages:
            if page["text"] is not None:
                seen.append((page["text"].host, line_hashes(page["text"].text)))
            pickle.dump(page, spool, protocol=pickle.HIGHEST_PROTOCOL)
        steps.templates = host_templates(seen, quality.template_lines_min_pages, quality.template_lines_min_share)
        del seen
        spool.seek(0)
        for batch in _spooled_batches(spool):
            texts = iter(steps.finish([page["text"] for page in batch if page["text"] is not None]))
            for page in batch:
                if page["text"] is not None:
                    page["text"] = next(texts)
                yield page


def _spooled_batches(spool) -> Iterator[list[dict]]:
    batch = []
    while True:
        try:
            batch.append(pickle.load(spool))
        except EOFError:
            break
        if len(batch) == BATCH_PAGES:
            yield batch
            batch = []
    yield batch


def extract_to_jsonl(paths: list[str], output: str, cfg) -> dict:
    """Writes one line per page of `paths` to `output`; returns {"pages", "with_text", "reasons"}."""
    from pipelines.config import UserError

    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise UserError(f"--input: no such file: {', '.join(missing)}")
    steps = TextBranchSteps(cfg)
    spool = cfg.quality.template_lines

    def lines(path):
        if path.lower().endswith(HTML_SUFFIXES):
            return [html_file_line(path)]
        return warc_lines(path, cfg.read.max_record_bytes)

    pages = stepped((line for path in paths for line in lines(path)), steps.unfinished if spool else steps)
    summary = {"pages": 0, "with_text": 0, "reasons": {}}
    with open(output, "w", encoding="utf-8") as out:
        for page in _spooled(pages, steps) if spool else pages:
            out.write(json.dumps(page, ensure_ascii=False) + "\n")
            summary["pages"] += 1
            if page["reason"]:
                summary["reasons"][page["reason"]] = summary["reasons"].get(page["reason"], 0) + 1
            else:
                summary["with_text"] += 1
    return summary
