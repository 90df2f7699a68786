"""Per-host template lines: the lines a site repeats on many of its pages (navigation, "You might also
like", footers, bylines, share bars) that the main-content extractor keeps. One page cannot tell them
from content; many pages of the same host can. C4 removes text repeated across the corpus (Raffel et
al. 2020, §2.2: its released code keeps one copy of every three-sentence span), OBELICS (Laurençon et
al. 2023, arXiv:2306.16527, §3) removes paragraphs repeated across the pages of one domain, RefinedWeb
(Penedo et al. 2023) removes repeated lines; this is the per-host variant, on lines.

The logic, without Beam (pipelines/template_lines.py is the Beam graph):
- `normalise_line`: how a line is compared: stripped, whitespace collapsed, casefolded, every digit
  mapped to 0 ("Page 3 of 12" and "Page 4 of 12" are one line); short lines count; an empty line never
  (`normalised_lines`: every line of a text);
- `line_hash`: a normalised line as a stable unsigned 64-bit integer (blake2b, never Python's salted
  `hash()`: workers and reruns must agree);
- `host_of`: the lowercased netloc of a URL, without user info, port and a leading `www.`; no URL (or
  no netloc): no host, and the document is never changed;
- `page_threshold` / `template_hashes`: the rule. A line is a template line of host H when it is on at
  least `max(min_pages, ceil(min_share * pages(H)))` distinct pages of H. Pages are counted as distinct
  *contents*: documents of H with the same set of normalised lines (exact copies, recaptures of an
  unchanged page, copies differing in a date or a counter) count once, so three copies of one article
  do not make its every line a template line (removing them all would empty the copies before the
  exact/near dedup stages could keep one);
- `remove_template_lines`: one document's text without its host's template lines, other lines and
  their order kept;
- `host_templates`: the whole rule over pages held in memory, the reference the Beam graph must agree
  with (`curate extract` uses it over its inputs, the tests as the oracle).

Defaults, from first principles (never tuned on the dev labels):
- `min_pages = 3`: two pages sharing an exact line are as often two versions of one page (a print or
  AMP view, a paginated article, a recapture with a changed sidebar: the dedup stages' business) as a
  template; three distinct pages of one site sharing a line is the template signature (a menu, a
  footer, a byline, "Related posts"). 2 would cut syndicated article text from both copies;
- `min_share = 0.1`: on a big host, "3 pages" is no evidence: a common phrase ("Thanks for reading!",
  "Ingredients", a quoted proverb) lands on 3 of 10,000 pages by chance. A template is on a large part
  of a site: the site-wide menu and footer on nearly every page, a section's sidebar on that section's
  pages; 10% keeps a section of ~1/10 of the site in reach while asking a 10,000-page host for 1,000
  pages. It binds only from 31 pages up (ceil(0.1 * 31) = 4 > 3), so small hosts are judged by
  `min_pages` alone. It also bounds a big host's template set: with L distinct lines per page on
  average, at most L / min_share lines can each be on min_share of the pages.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable
from urllib.parse import urlsplit

MIN_PAGES, MIN_SHARE = 3, 0.1

_DIGIT = re.compile(r"\d")


def normalise_line(line: str) -> str:
    """The form a line is counted in: stripped, whitespace runs as one space, casefolded, every
    (Unicode) digit as 0; '' for a line with nothing in it. (str.split and the regex \\s agree on
    what whitespace is: both ask Py_UNICODE_ISSPACE.)"""
    return _DIGIT.sub("0", " ".join(line.split()).casefold())


def normalised_lines_python(text: str) -> list[str]:
    """`normalise_line` of each line of `text` (split at "\n"): the oracle of filters/_words.c, which
    `normalised_lines` is where it was built."""
    return [normalise_line(line) for line in text.split("\n")]


try:
    from filters import _words  # built by `pip install` (setup.py) where a C compiler is

    def normalised_lines(text: str) -> list[str]:
        """See `normalised_lines_python`. One casefold of the whole text, then one scan for the lines:
        casefold maps each character on its own, a whitespace character to itself and any other to
        characters none of which is whitespace or a digit, so the order of the steps does not matter
        (tests/test_words_compiled.py checks every code point)."""
        return _words.normalised_lines(text.casefold())
except ImportError:
    normalised_lines = normalised_lines_python


def line_hash(normalised: str) -> int:
    """A normalised line as a stable unsigned 64-bit integer."""
    return int.from_bytes(hashlib.blake2b(normalised.encode("utf-8"), digest_size=8).digest(), "big")


def host_of(url: str | None) -> str | None:
    """The host a page counts under: the URL's netloc lowercased, without user info, port and a
    leading `www.`; None when there is no URL or it has no host."""
    if not url:
        return None
    try:
        host = urlsplit(url.strip()).hostname  # lowercased, without user info and port
    except ValueError:
        return None
    if not host:
        return None
    host = host.rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    return host or None


def line_hashes(text: str) -> tuple[int, ...]:
    """The distinct hashes of a document's non-empty normalised lines, sorted: what the document
    contributes to its host's counts (a line repeated on one page counts once), and its identity as
    a distinct page."""
    return tuple(sorted({line_hash(n) for n in set(normalised_lines(text)) if n}))


def page_threshold(host_pages: int, min_pages: int = MIN_PAGES, min_share: float = MIN_SHARE) -> int:
    """Distinct pages of a host with `host_pages` distinct pages a line must be on to be one of its
    template lines."""
    # rounding guard: 0.1 * 30 is 3.0000000000000004 in floating point
    return max(min_pages, math.ceil(round(min_share * host_pages, 9)))


def is_template(line_pages: int, host_pages: int, min_pages: int = MIN_PAGES, min_share: float = MIN_SHARE) -> bool:
    """Whether a line on `line_pages` distinct pages of a host with `host_pages` is a template line."""
    return line_pages >= page_threshold(host_pages, min_pages, min_share)


def template_hashes(line_pages: Iterable[tuple[int, int]], host_pages: int, min_pages: int = MIN_PAGES,
                    min_share: float = MIN_SHARE) -> frozenset[int]:
    """A host's template-line hashes from its (line hash, distinct pages) counts."""
    need = page_threshold(host_pages, min_pages, min_share)
    return frozenset(h for h, n in line_pages if n >= need)


def remove_template_lines(text: str, template: frozenset[int] | set[int]) -> tuple[str, int]:
    """(text without the lines whose normalised hash is in `template`, number of lines removed). The
    other lines stay, in order, blank lines included; nothing removed: the text itself."""
    if not template:
        return text, 0
    lines = text.split("\n")
    kept = [line for line, n in zip(lines, normalised_lines(text)) if not (n and line_hash(n) in template)]
    if len(kept) == len(lines):
        return text, 0
    return "\n".join(kept).strip(), len(lines) - len(kept)


def host_templates(pages: Iterable[tuple[str | None, tuple[int, ...]]], min_pages: int = MIN_PAGES,
                   min_share: float = MIN_SHARE) -> dict[str, frozenset[int]]:
    """{host: its template-line hashes} for the hosts that have any, from (host, `line_hashes` of the
    text) of every document (documents without a host or a line count nowhere; copies with the same
    lines count once): the rule of this module in one process."""
    distinct: dict[str, set[tuple[int, ...]]] = {}
    for host, hashes in pages:
        if host is not None and hashes:
            distinct.setdefault(host, set()).add(hashes)
    out = {}
    for host, identities in distinct.items():
        line_pages = Counter(h for hashes in identities for h in hashes)
        template = template_hashes(line_pages.items(), len(identities), min_pages, min_share)
        if template:
            out[host] = template
    return out
