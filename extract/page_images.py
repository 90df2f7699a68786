"""A read-stage page's images as the two image branches see them (no Beam here): the pairs branch's
references with their context (`pairs_view`) and the interleaved branch's document (`interleaved_view`),
each with whether the page opts out of AI use and why it could not be read, if so.

Where both branches run, `page_views` gives both from one decoding of the page and, for a page that may
hold images, one parse and one call to the sandbox's child (extract.interleaved.image_views) instead of
two of each. The views are the ones each branch's own step gives: when the shared call fails or a view
took longer than its own deadline, each is made again alone, under its own deadline, for its own verdict.
"""

from __future__ import annotations

from typing import Protocol

from extract.html import page_html
from extract.images import ImageRef, extract_images_bounded, may_hold_images, page_disallows_ai
from extract.interleaved import Linearised, image_views_bounded, linearise_bounded
from extract.sandbox import SandboxError

# (references, the page opts out of AI use, failure: "" or why the page was not read, its detail)
PairsView = tuple[list[ImageRef], bool, str, str]
# (document or None, the page opts out of AI use, failure, detail)
InterleavedView = tuple[Linearised | None, bool, str, str]


class PageLimits(Protocol):
    """The settings of a branch's view of a page: its config section (image_pairs, interleaved) has them."""

    max_html_bytes: int
    timeout_ms: int


class PairsLimits(PageLimits, Protocol):
    context_chars: int


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
