"""Routing of parsed WARC records: which become text documents, which go to the PDF branch, which drop.

Reasons follow the record's fate, not its parser: every record gets exactly one route.
"""

from __future__ import annotations

import os

import xxhash

from extract.warc import RawRecord

HTML_TYPES = {"text/html", "application/xhtml+xml", "application/xml+xhtml"}
GENERIC_TYPES = {"", "application/octet-stream", "unk", "application/unknown", "text/plain"}
DOCUMENT_TYPES = {"response", "resource", "conversion", "revisit"}  # records that stand for a page


def doc_id(raw: RawRecord, warc_file: str, index: int = 0) -> str:
    """Stable 128-bit id: from WARC-Record-ID (globally unique), else file name + offset (+ the
    record's index among those sharing its offset, i.e. inside one multi-record gzip member)."""
    key = raw.record_id or f"{os.path.basename(warc_file)}@{raw.offset}" + (f"#{index}" if index else "")
    return xxhash.xxh3_128_hexdigest(key.encode())


def _looks_like_html(payload: bytes) -> bool:
    head = payload[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head or b"<body" in head


def route(raw: RawRecord) -> tuple[str, str]:
    """(route, reason): route is 'html', 'text' (WET), 'pdf' or 'drop'; reason names the drop."""
    if raw.warc_type == "revisit":
        return "drop", "revisit"
    if raw.warc_type not in DOCUMENT_TYPES:
        return "drop", f"record_{raw.warc_type}"
    if raw.warc_type == "conversion":
        return ("text", "") if raw.payload.strip() else ("drop", "empty_body")
    if raw.warc_type == "response":
        if raw.http_status is None:
            return "drop", "bad_http_header"
        if raw.http_status != 200:
            return "drop", f"http_{raw.http_status}"
    if not raw.payload.strip():
        return "drop", "empty_body"
    declared = raw.http_content_type or raw.block_content_type
    types = {raw.identified_type, declared}
    if "application/pdf" in types or raw.payload.startswith(b"%PDF-"):
        return "pdf", "pdf_to_interleaved"
    if types & HTML_TYPES or (types <= GENERIC_TYPES and _looks_like_html(raw.payload)):
        return "html", ""
    if any(t.startswith("image/") for t in types):
        return "drop", "non_html_image"
    return "drop", "non_html"
