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
    raw page (io.RAW_SCHEMA): (text, None) or (None, reason)."""

    def __init__(self, cfg):
        from pipelines.stages import ExtractText, IdentifyLanguage

        self.cfg = cfg
        self.extract = ExtractText("extract", cfg.extract)
        self.language = IdentifyLanguage("language", cfg.language)
        for step in (self.extract, self.language):
            step.setup()
            step.start_bundle()
        self.templates: dict = {}  # host -> its template-line hashes (quality.template_lines)

    def __call__(self, raw: dict) -> tuple[str | None, str | None]:
        page, reason = self.unfinished(raw)
        return (None, reason) if page is None else (self.finish(page), None)

    def unfinished(self, raw: dict) -> tuple[Unfinished | None, str | None]:
        """The extract and language stages: (Unfinished, None) or (None, reason)."""
        from filters.template_lines import host_of
        from pipelines.stage import Drop

        doc = self.extract.step(raw)
        if isinstance(doc, Drop):
            return None, doc.reason
        doc = self.language.step(doc)
        if isinstance(doc, Drop):
            return None, doc.reason
        return Unfinished(doc["text"], host_of(doc.get("url"))), None

    def finish(self, page: Unfinished) -> str:
        """The quality stage's line removal: the host's template lines, then filters/clean.py's steps."""
        from filters.clean import clean_for_rules
        from filters.template_lines import remove_template_lines

        text = page.text
        if page.host in self.templates:
            text, _ = remove_template_lines(text, self.templates[page.host])
        quality = self.cfg.quality
        return clean_for_rules(text, quality.c4_line_filter, quality.link_list_lines,
                               quality.boilerplate_model, quality.rendering_max_copies,
                               quality.label_lines)[0]


PageStep = Callable[[dict], tuple[object, str | None]]  # a raw page -> (text, None) or (None, reason)


def html_raw_page(payload: bytes, path: str = "") -> dict:
    """An HTML file's bytes as a raw page (io.RAW_SCHEMA) of the read stage, its path as id and file."""
    return {"id": path, "url": "", "warc_file": path, "warc_offset": 0, "warc_date": "", "source": "html",
            "content_type": "text/html", "http_charset": "", "payload": payload}


def html_file_page(path: str, steps: PageStep) -> dict:
    with open(path, "rb") as fh:
        payload = fh.read()
    if path.endswith(".gz"):
        try:
            payload = gzip.decompress(payload)
        except (OSError, EOFError):
            return {"path": path, "text": None, "reason": "not_gzip_data"}
    text, reason = steps(html_raw_page(payload, path))
    return {"path": path, "text": text, "reason": reason}


def warc_pages(path: str, steps: PageStep, max_record_bytes: int) -> Iterator[dict]:
    """The read stage's verdict on each record (extract.records.record_fates), then `steps`."""
    from extract.records import raw_page, record_fates
    from extract.warc import iter_records

    with open(path, "rb") as stream:
        for item, doc, fate, reason in record_fates(iter_records(stream, max_record_bytes), path):
            if fate == "error":
                yield {"url": None, "offset": item.offset, "text": None, "reason": reason}
            elif fate == "duplicate":
                yield {"url": item.url, "text": None, "reason": "duplicate_record"}
            elif fate in ("html", "text"):
                text, reason = steps(raw_page(item, doc, fate))
                yield {"url": item.url, "text": text, "reason": reason}
            elif fate != "not_a_page":  # requests, metadata, warcinfo are not pages
                yield {"url": item.url, "text": None, "reason": reason}


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
        while True:
            try:
                page = pickle.load(spool)
            except EOFError:
                return
            if page["text"] is not None:
                page["text"] = steps.finish(page["text"])
            yield page


def extract_to_jsonl(paths: list[str], output: str, cfg) -> dict:
    """Writes one line per page of `paths` to `output`; returns {"pages", "with_text", "reasons"}."""
    from pipelines.config import UserError

    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise UserError(f"--input: no such file: {', '.join(missing)}")
    steps = TextBranchSteps(cfg)
    spool = cfg.quality.template_lines
    step = steps.unfinished if spool else steps

    def read(path):
        if path.lower().endswith(HTML_SUFFIXES):
            return [html_file_page(path, step)]
        return warc_pages(path, step, cfg.read.max_record_bytes)

    pages = (page for path in paths for page in read(path))
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
