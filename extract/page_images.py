"""A read-stage page as the branches that read its HTML see it (no Beam here): the text branch's main
content (`text_view`), the pairs branch's image references with their context (`pairs_view`) and the
interleaved branch's document (`interleaved_view`), each with why the page could not be read, if so.

Where both image branches run, `page_views` gives both from one decoding of the page and, for a page that
may hold images, one parse and one call to the sandbox's child (extract.interleaved.image_views) instead
of two of each; where the text branch runs too, `all_page_views` adds its text to the same decoding,
parse and call (extract.interleaved.text_and_image_view_rows). The views are the ones each branch's own
step gives: when the shared call fails or a part took longer than its own deadline, each is made again
alone, under its own deadline, for its own verdict.
"""

from __future__ import annotations

from typing import Protocol

from extract.html import Decoded, ExtractionError, decode_html, extract_main_text, page_html
from extract.images import ImageRef, extract_images_bounded, may_hold_images, page_disallows_ai
from extract.interleaved import Linearised, image_views_bounded, linearise_bounded, text_and_image_views_bounded
from extract.sandbox import SandboxError, in_process_is_safe

# (references, the page opts out of AI use, failure: "" or why the page was not read, its detail)
PairsView = tuple[list[ImageRef], bool, str, str]
# (document or None, the page opts out of AI use, failure, detail)
InterleavedView = tuple[Linearised | None, bool, str, str]
# (main content or None, charset, how it was found (extract.html.Decoded.source; "" when not decoded),
# failure: "" or the text branch's drop reason, its detail)
TextView = tuple[str | None, str, str, str, str]


class PageLimits(Protocol):
    """The settings of a branch's view of a page: its config section (image_pairs, interleaved) has them."""

    max_html_bytes: int
    timeout_ms: int


class PairsLimits(PageLimits, Protocol):
    context_chars: int


class TextLimits(PageLimits, Protocol):
    """The extract stage's settings."""

    engine: str
    one_cpu: bool


def text_view(page: dict, cfg: TextLimits) -> TextView:
    """The text branch's view of an HTML page: its charset decoded, then its main content extracted."""
    payload = page.get("payload") or b""
    if len(payload) > cfg.max_html_bytes:
        return None, "", "", "html_too_large", f"{len(payload)} bytes"
    try:
        decoded = decode_html(payload, page.get("http_charset") or "")
    except ExtractionError as err:
        return None, "", "", err.reason, err.detail
    except Exception as err:  # a bug must cost one document, not the run
        return None, "", "", "extract_error", repr(err)[:300]
    return _main_text(decoded, cfg)


def _main_text(decoded: Decoded, cfg: TextLimits) -> TextView:
    try:
        text = extract_main_text(decoded.text, cfg.engine, cfg.timeout_ms, decoded.utf8, cfg.one_cpu)
    except ExtractionError as err:
        return None, decoded.charset, decoded.source, err.reason, err.detail
    except Exception as err:  # an extractor bug must cost one document, not the run
        return None, decoded.charset, decoded.source, "extract_error", repr(err)[:300]
    return text, decoded.charset, decoded.source, "", ""


def pairs_view(page: dict, cfg: PairsLimits) -> PairsView:
    """The pairs branch's view of `page`."""
    html, failure = page_html(page, cfg.max_html_bytes)
    if failure:
        return [], False, f"page_{failure}", ""
    try:
        refs = extract_images_bounded(html, page["url"], cfg.context_chars, cfg.timeout_ms)
    except SandboxError as err:
        return [], False, err.reason, err.detail
    return refs, bool(refs) and page_disallows_ai(html), "", ""


def interleaved_view(page: dict, cfg: PageLimits) -> InterleavedView:
    """The interleaved branch's view of `page`. A page without an `<img>` tag is an empty document,
    with no DOM walk: it will be `no_images`, its text is the text branch's (85% of mixed-dev's pages)."""
    html, failure = page_html(page, cfg.max_html_bytes)
    if failure:
        return None, False, f"page_{failure}", ""
    if not may_hold_images(html):
        return Linearised(), False, "", ""
    try:
        doc = linearise_bounded(html, page["url"], cfg.timeout_ms)
    except SandboxError as err:
        return None, False, err.reason, err.detail
    return doc, bool(doc.images) and page_disallows_ai(html), "", ""


def page_views(page: dict, pairs: PairsLimits, interleaved: PageLimits) -> tuple[PairsView, InterleavedView]:
    """(pairs_view(page, pairs), interleaved_view(page, interleaved)), made together."""
    if pairs.max_html_bytes != interleaved.max_html_bytes:  # the decoding's verdicts could differ
        return pairs_view(page, pairs), interleaved_view(page, interleaved)
    html, failure = page_html(page, pairs.max_html_bytes)
    if failure:
        return ([], False, f"page_{failure}", ""), (None, False, f"page_{failure}", "")
    if not may_hold_images(html):
        return ([], False, "", ""), (Linearised(), False, "", "")
    try:
        refs, doc = image_views_bounded(html, page["url"], pairs.context_chars, pairs.timeout_ms,
                                        interleaved.timeout_ms)
    except SandboxError:
        return pairs_view(page, pairs), interleaved_view(page, interleaved)
    noai = bool(refs) and page_disallows_ai(html)  # every content image is one of refs
    return (refs, noai, "", ""), (doc, bool(doc.images) and noai, "", "")


def all_page_views(page: dict, text: TextLimits, pairs: PairsLimits,
                   interleaved: PageLimits) -> tuple[TextView, PairsView, InterleavedView]:
    """(text_view(page, text), *page_views(page, pairs, interleaved)), made together: one decoding and,
    for a page that may hold images, one parse and one call to the sandbox's child. Shared only where
    every step would read the same string the same way: resiliparse as the engine, the branches' size
    limits all met, each step's deadline sending the page to the same place (in process or the child;
    extract/sandbox.py in_process_is_safe) and the text extracted on one CPU as page steps are."""
    def apart():
        return text_view(page, text), *page_views(page, pairs, interleaved)

    payload = page.get("payload") or b""
    limit = min(text.max_html_bytes, pairs.max_html_bytes, interleaved.max_html_bytes)
    if "html" in page or text.engine != "resiliparse" or not text.one_cpu or len(payload) > limit:
        return apart()
    try:
        decoded = decode_html(payload, page.get("http_charset") or "")
    except ExtractionError as err:
        return (None, "", "", err.reason, err.detail), ([], False, "page_undecodable", ""), (
            None, False, "page_undecodable", "")
    except Exception:  # each step's own verdict
        return apart()
    html = decoded.text
    if len(html) > limit:
        return apart()
    if not may_hold_images(html):
        return _main_text(decoded, text), ([], False, "", ""), (Linearised(), False, "", "")
    views_ms = pairs.timeout_ms + interleaved.timeout_ms
    if len({in_process_is_safe(html, ms) for ms in (text.timeout_ms, views_ms, text.timeout_ms + views_ms)}) == 1:
        try:
            main, refs, doc = text_and_image_views_bounded(html, page["url"], pairs.context_chars, text.timeout_ms,
                                                           pairs.timeout_ms, interleaved.timeout_ms)
        except Exception:  # SandboxError, or a bug: each step alone gives its own verdict
            pass
        else:
            noai = bool(refs) and page_disallows_ai(html)  # every content image is one of refs
            return ((main, decoded.charset, decoded.source, "", ""), (refs, noai, "", ""),
                    (doc, bool(doc.images) and noai, "", ""))
    return _main_text(decoded, text), *page_views(page, pairs, interleaved)
