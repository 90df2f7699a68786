"""Routing of parsed WARC records: which become text documents, which go to the PDF branch, which drop.

Reasons follow the record's fate, not its parser: every record gets exactly one route.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Iterable, Iterator

import xxhash

from extract.warc import RawRecord, ReadError

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


def record_fates(items: Iterable[RawRecord | ReadError], warc_file: str) -> Iterator[tuple]:
    """The read stage's verdict on each item `iter_records` gives for one file, in file order, as
    (item, doc, fate, reason): `doc` is the provenance every output row carries (id, url, warc_file,
    warc_offset, warc_date), None for records that stand for no page; `fate` is
    - "error": a damaged unit (`reason` the reader's);
    - "not_a_page": a request, metadata or warcinfo record (`reason` its drop reason, counted only);
    - "duplicate": a record id seen before in this file (`reason` names the first: file@offset);
    - else the record's `route` ("html", "text", "pdf", "drop") and its reason.
    Shared by the read stage and `curate extract`, so both read a file the same way."""
    seen: dict[str, int] = {}
    at_offset: Counter = Counter()  # records sharing one offset (a multi-record gzip member)
    for item in items:
        index = at_offset[item.offset]
        at_offset[item.offset] += 1
        if isinstance(item, ReadError):
            doc = {"id": f"{warc_file}@{item.offset}" + (f"#{index}" if index else ""), "url": "",
                   "warc_file": warc_file, "warc_offset": item.offset, "warc_date": ""}
            yield item, doc, "error", item.reason
            continue
        where, reason = route(item)
        if where == "drop" and item.warc_type not in DOCUMENT_TYPES:
            yield item, None, "not_a_page", reason
            continue
        doc = {"id": doc_id(item, warc_file, index), "url": item.url, "warc_file": warc_file,
               "warc_offset": item.offset, "warc_date": item.date}
        if doc["id"] in seen:
            yield item, doc, "duplicate", f"{warc_file}@{seen[doc['id']]}"
            continue
        seen[doc["id"]] = item.offset
        yield item, doc, where, reason


def raw_page(item: RawRecord, doc: dict, where: str) -> dict:
    """An HTML or text record as the text branch's raw document (io.RAW_SCHEMA)."""
    return {**doc, "source": where, "content_type": item.http_content_type or item.identified_type,
            "http_charset": item.http_charset, "payload": item.payload}
