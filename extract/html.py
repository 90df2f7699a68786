"""Charset decoding and main-content extraction for HTML payloads.

Decoding follows what browsers do (WHATWG encoding names): declared charsets (HTTP header, then
<meta>) are trusted only if the bytes decode under them; otherwise the charset is detected from the
bytes. Extraction uses resiliparse's main-content extractor by default (Bevendorff et al. 2018, the
extractor behind ChatNoir and FineWeb-2 comparisons) or trafilatura (Barbaresi 2021) as an option, each
document under a wall-clock guard and a size cap.
"""

from __future__ import annotations

import codecs
import functools
import re
from dataclasses import dataclass

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

from extract.guard import DocumentTimeout, watchdog

META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]{1,40})""", re.I)
# A few undecodable bytes are normal on the web; beyond this share the text is garbage.
MAX_REPLACEMENT_SHARE = 0.01


class ExtractionError(Exception):
    """Raised with a reason code when a document cannot be turned into text."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@functools.lru_cache(maxsize=512)
def _canonical(name: str | None) -> str | None:
    if not name:
        return None
    html5 = map_encoding_to_html5(name.strip().lower(), fallback_utf8=False)
    try:
        return codecs.lookup(html5 or name).name
    except (LookupError, TypeError):
        return None


def _strict(payload: bytes, encoding: str) -> str | None:
    try:
        return payload.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


@dataclass
class Decoded:
    text: str
    charset: str
    source: str  # "declared", "detected" or "fallback"


def decode_html(payload: bytes, http_charset: str = "") -> Decoded:
    """Decode `payload` to str: declared charset if it fits the bytes, else detected, else lossy UTF-8.
    The HTTP header is tried first; the <meta> tag is only looked up when the header does not fit."""
    declared = _canonical(http_charset)
    if declared:
        text = _strict(payload, declared)
        if text is not None:
            return Decoded(text, declared, "declared")
    meta = META_CHARSET.search(payload[:4096])
    meta_charset = _canonical(meta.group(1).decode("ascii", "ignore")) if meta else None
    if meta_charset and meta_charset != declared:
        text = _strict(payload, meta_charset)
        if text is not None:
            return Decoded(text, meta_charset, "declared")
    detected = _canonical(detect_encoding(payload))
    if detected:
        text = _strict(payload, detected)
        if text is not None:
            return Decoded(text, detected, "detected")
    enc = declared or meta_charset or detected or "utf-8"
    text = payload.decode(enc, errors="replace")
    if text.count("\ufffd") > MAX_REPLACEMENT_SHARE * max(len(text), 1):
        raise ExtractionError("undecodable_charset", enc)
    return Decoded(text, enc, "fallback")


def extract_main_text(html: str, engine: str = "resiliparse", timeout_ms: int = 5000) -> str:
    """Main-content plain text of an HTML document (paragraphs separated by blank lines)."""
    if engine not in ("resiliparse", "trafilatura"):
        raise ValueError(f"unknown extraction engine {engine!r}; use 'resiliparse' or 'trafilatura'")
    try:
        with watchdog().limit(timeout_ms / 1000):
            if engine == "resiliparse":
                return extract_plain_text(html, main_content=True, preserve_formatting=True,
                                          alt_texts=False, links=False, form_fields=False,
                                          noscript=False, comments=False)
            import trafilatura

            return trafilatura.extract(html, include_comments=False, include_tables=True,
                                       deduplicate=False, fast=True) or ""
    except DocumentTimeout:
        raise ExtractionError("extract_timeout", f">{timeout_ms} ms") from None
