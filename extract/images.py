"""Image references and their alt text from HTML pages, with the cheap filters that run before any
image byte is read (no Beam here; the Beam branch is pipelines/image_pairs.py).

Extraction: every `<img>` element in document order (its index is the `position`, the same count as
`querySelectorAll("img")`), with `<picture>`/`srcset` and lazy-loading attributes as fallbacks for
the URL, resolved against `<base href>` and the page URL and canonicalised (`canonical_url`, the join
key with WARC captures), and the visible page text around it as context (OBELICS and mmc4 keep images
in their text; LAION keeps only the alt). `src` comes first: it is the URL crawlers (Heritrix, Common
Crawl) capture, so it is the one found in the same WARCs; a `data:` placeholder in `src` gives way to
`data-src`-style attributes, then to the largest `srcset` candidate.

Filters (`check_image_ref`), each with its reason, cheapest first:
- URL: no usable URL (`no_src`, `data_uri`, `bad_scheme`, `bad_url`), tracking pixels and icons/sprites by name
  (the patterns ad blockers and img2dataset users filter on), by `width`/`height` attributes:
  `tracking_pixel` at <= 2 px, `declared_too_small` below the decoder's `min_side` (img2dataset's
  min size, checked before fetching).
- Alt text (LAION-5B and DataComp keep only images with an informative alt): `missing_alt`,
  `empty_alt`, `filename_alt` (`IMG_4032.JPG`, `San agustin facade.jpg`: CMS and camera defaults),
  `generic_alt` (a word naming the medium, not the content: "image", "photo", "Bild", "图片", ...),
  `alt_too_short` (LAION-5B drops alt texts under 5 characters; CJK characters count double, as they
  carry about a word each), `alt_too_long` (keyword stuffing, pasted article text), `alt_language`
  (optional: fastText lid.176 on the alt, only when `alt_languages` is set).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

# Lazy-loading attributes, most specific first (lazysizes, WP Rocket, jQuery lazyload, a3 lazy load).
LAZY_SRC_ATTRS = ("data-src", "data-lazy-src", "data-original", "data-lazy", "data-url")
LAZY_SRCSET_ATTRS = ("data-srcset", "data-lazy-srcset")
# Tracking beacons (EasyPrivacy-style): a host label naming analytics, a spacer/pixel file name, or
# a beacon endpoint path.
TRACKING_URL = re.compile(
    r"^https?://(?:[^/]*\.)?(?:pixel|pixels|px|beacon|beacons|track|tracking|tracker|analytics|stats|"
    r"metrics|collect|counter|telemetry|tags?)\d*\.[^/]*/"
    r"|[/_-](?:pixel|beacon|tracking|tracker|spacer|1x1|clear|blank|transparent)(?:[._-][^/?]*)?\.(?:gif|png)(?:$|\?)"
    r"|/(?:collect|g/collect|pixel|beacon|track|tr|b/ss|ping|imp|impression)/?(?:\?|$)", re.I)
# Icons, sprites and UI chrome: a path segment or file-name token.
ICON_URL = re.compile(
    r"(?:^|[/._-])(?:favicon|apple-touch-icon|icons?|sprites?|emoji|emoticons?|smiley|smilies|spinner|"
    r"ajax-loader|loader|placeholder|btn)(?:[/._-]|\d|$)", re.I)
# Site chrome by name (OBELICS's URL ban words), for the interleaved branch: a path token.
CHROME_URL = re.compile(
    r"(?:^|[/._-])(?:logos?|avatars?|banners?|ads|adverts?|advertisements?|badges?|buttons?|social|share)"
    r"(?:[/._-]|\d|$)", re.I)
IMAGE_EXT = r"(?:jpe?g|jfif|png|gif|webp|bmp|tiff?|svg|avif|heic|ico)"
FILENAME_ALT = re.compile(
    rf"\.{IMAGE_EXT}$"                                                 # ends in an image extension
    r"|^(?:img|dsc[nf]?|dcim|pxl|mvimg|imag|gopr|sam|wp|p)[\s_-]?\d{3,}[\w.-]*$"    # cameras: IMG_4032, P1010234
    r"|^(?:screenshot|screen shot|whatsapp image|untitled|scan)[\s_-]*\d[\w\s.:,()-]*$"  # tool defaults
    r"|^[a-z]+[_-]\d{4,}[\w-]*$"                                        # shutterstock_1234567
    r"|^[0-9a-f]{12,}$|^[\d\W_]+$",                                     # hashes, bare numbers
    re.I)
GENERIC_ALT = {
    # en
    "image", "images", "img", "photo", "photos", "photograph", "picture", "pictures", "pic", "pics",
    "thumbnail", "thumb", "icon", "logo", "banner", "placeholder", "spacer", "blank", "untitled", "graphic",
    "graphics", "illustration", "figure", "avatar", "default", "null", "none", "undefined", "alt", "alt text",
    "alttext", "no image", "no alt", "image description", "featured image", "header image", "hero image",
    "click to enlarge", "click here", "loading", "advertisement", "ad", "ads", "gallery", "slide", "preview",
    "attachment", "media", "file", "photo credit", "stock photo", "profile picture", "user avatar",
    # de, fr, es, pt, it, nl, pl, sv, da, no, tr, cs
    "bild", "bilder", "foto", "fotos", "grafik", "abbildung", "vorschaubild", "titelbild", "beitragsbild",
    "photographie", "vignette", "imagen", "imagenes", "imágenes", "fotografía", "imagem",
    "imagens", "immagine", "immagini", "afbeelding", "zdjęcie", "obraz", "obrázek", "bilde", "billede",
    "resim", "görsel", "fotoğraf",
    # ru, uk, el, ar, he, hi
    "изображение", "картинка", "фото", "фотография", "зображення", "εικόνα", "φωτογραφία", "صورة", "תמונה",
    "चित्र", "तस्वीर",
    # zh, ja, ko
    "图片", "图像", "照片", "圖片", "圖像", "相片", "画像", "写真", "イメージ", "サムネイル", "이미지", "사진", "그림",
}
GENERIC_STRIP = re.compile(r"[\W_]+", re.U)
GENERIC_NUMBERED = re.compile(r"^(.*?)[\s#_-]*\d+$")
NOAI = re.compile(r"\bno(?:image)?ai\b", re.I)
META_START = re.compile(r"<meta\b", re.I)
META_ROBOTS = re.compile(r"""\bname\s*=\s*["']?robots\b""", re.I)  # in one <meta ...> tag
META_CONTENT = re.compile(r"""\bcontent\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.I)
DEFAULT_PORTS = {"http": 80, "https": 443}
URL_SAFE = "/%:@!$&'()*+,;=~-._"
# Image placeholders in the extracted text (Unicode private-use characters).
MARKER = re.compile("\ue000(\\d+)\ue001")
MARKER_START = "\ue000"
# An <img> element comes from an `img` start tag or an `image` one, which the HTML parser renames
# (WHATWG HTML, 13.2.6.4.7 "in body": 'A start tag whose tag name is "image"'); resiliparse does.
IMG_START_TAG = re.compile(r"<im(?:g|age)\b", re.I)
DIMENSION = re.compile(r"^\s*(\d{1,6})(?:\.\d*)?\s*(?:px)?\s*$", re.I)
SRCSET_DESCRIPTOR = re.compile(r"^(\d+(?:\.\d+)?)([wx])$", re.I)


@dataclass
class ImageRef:
    """One <img> of a page. `url` is absolute (http/https), a `data:` URI (cut to 64 chars), another
    scheme, or "" when the tag has no URL at all; `alt` is None when the attribute is missing."""

    page_url: str
    url: str
    alt: str | None
    width: int | None
    height: int | None
    position: int
    context_before: str
    context_after: str

    def row(self) -> tuple:
        """The fields in order, `ImageRef(*row)` gives the ref back: how a ref leaves a child process."""
        return (self.page_url, self.url, self.alt, self.width, self.height, self.position, self.context_before,
                self.context_after)


def _dimension(value: str | None) -> int | None:
    """An integer pixel size from a width/height attribute; None for %, em, auto or garbage."""
    m = DIMENSION.match(value or "")
    return int(m.group(1)) if m else None


def parse_srcset(value: str) -> list[tuple[str, str, float]]:
    """(url, descriptor kind "w" or "x", value) per srcset candidate, by HTML's parsing rules: a URL is
    a run of non-space characters and may contain commas; a trailing comma ends a candidate."""
    out, pos, n = [], 0, len(value)
    while pos < n:
        while pos < n and (value[pos].isspace() or value[pos] == ","):
            pos += 1
        start = pos
        while pos < n and not value[pos].isspace():
            pos += 1
        url, descriptor = value[start:pos], ""
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            start = pos
            while pos < n and value[pos] != ",":
                pos += 1
            descriptor = value[start:pos].strip()
        m = SRCSET_DESCRIPTOR.match(descriptor.split()[0]) if descriptor else None
        if url:
            out.append((url, m.group(2).lower(), float(m.group(1))) if m else (url, "x", 1.0))
    return out


def _largest(srcset: str | None) -> str | None:
    """The widest `w` candidate, else the densest `x` one."""
    candidates = parse_srcset(srcset or "")
    if not candidates:
        return None
    return max(candidates, key=lambda c: (c[1] == "w", c[2]))[0]


def _choose_src(img, pictures: dict) -> str:
    """The URL an image tag points to: src, else a lazy-loading attribute, else the largest srcset
    candidate (the img's own, then its <picture> sources': `pictures` as _picture_sources reads it). A data:
    src is kept only as a last resort."""
    src = (img.getattr("src") or "").strip()
    if src and not src.lower().startswith("data:"):
        return src
    for attr in LAZY_SRC_ATTRS:
        value = (img.getattr(attr) or "").strip()
        if value and not value.lower().startswith("data:"):
            return value
    for srcset in [img.getattr("srcset"), *(img.getattr(a) for a in LAZY_SRCSET_ATTRS),
                   *_picture_sources(img, pictures)]:
        best = _largest(srcset)
        if best and not best.lower().startswith("data:"):
            return best
    return src


# An http(s) URL already in the form canonical_url gives: lower-case scheme and host (no port, no user),
# a path and an optional non-empty query of characters `quote` leaves as they are (no fragment, no ';'
# parameters, no empty "?"). canonical_url and urljoin give such a URL back unchanged (canonical_url_parsed
# is the oracle); matched in linear time (no nested quantifiers). Its group is the path (url_path: the host
# holds no '/', '@' or ':').
_CANONICAL_HTTP_URL = re.compile(r"https?://[a-z0-9.-]+(/[A-Za-z0-9/%:@!$&'()*+,=~._-]*)"
                                 r"(?:\?[A-Za-z0-9/%:@!$&'()*+,=~._?-]+)?")


def canonical_url(url: str) -> str:
    """The form image URLs are joined on (page references and WARC captures alike): fragment dropped,
    scheme and host lower-cased, default port dropped, an empty path as "/", spaces and non-ASCII
    characters percent-encoded as UTF-8 (what browsers send). Other schemes come back unchanged."""
    return url if _CANONICAL_HTTP_URL.fullmatch(url) else canonical_url_parsed(url)


def canonical_url_parsed(url: str) -> str:
    """canonical_url by parsing the URL (what it does with a URL not already in the form)."""
    try:
        parts = urlsplit(url)
        scheme, host, port = parts.scheme.lower(), parts.hostname or "", parts.port
    except ValueError:  # e.g. an invalid IPv6 literal or port
        return url[:200]
    if scheme not in ("http", "https") or not host:
        return url
    netloc = f"[{host}]" if ":" in host else host
    if port and port != DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, quote(parts.path or "/", safe=URL_SAFE),
                       quote(parts.query, safe=URL_SAFE + "?"), ""))


def _resolve(base: str, src: str) -> str:
    if not src:
        return ""
    if src[:5].lower() == "data:":
        return src[:64]
    if _CANONICAL_HTTP_URL.fullmatch(src):  # absolute and canonical: urljoin and canonical_url give it back
        return src
    src = re.sub(r"[\t\n\r]", "", src)  # browsers drop these inside URLs
    try:
        return canonical_url(urljoin(base, src))
    except ValueError:
        return src[:200]


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _context(text: str, offset: int, chars: int) -> tuple[str, str]:
    """About `chars` characters of page text on each side of `offset`, whitespace collapsed, cut at
    word boundaries: from the 4 x `chars` characters on each side (`_context_window`)."""
    return _context_before(text, offset, chars), _context_after(text, offset, chars)


def _context_window(text: str, offset: int, chars: int) -> tuple[str, str]:
    """_context by its definition: the 4 x `chars` characters on each side collapsed, then cut (the oracle
    of _context_before and _context_after)."""
    before = _collapse(text[max(0, offset - 4 * chars):offset])
    after = _collapse(text[offset:offset + 4 * chars])
    if len(before) > chars:
        cut = before[-chars:]
        before = cut.split(" ", 1)[1] if " " in cut else cut
    if len(after) > chars:
        cut = after[:chars]
        after = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return before, after


# _context reads 2 x chars characters on a side first. Collapsing a shorter window gives the same words but
# the first (before) or last (after) one, which it may cut; where the words it gives whole hold `chars`
# characters, the cut comes from them alone, and so is the same.
def _context_before(text: str, offset: int, chars: int) -> str:
    if offset > 2 * chars:
        near = _collapse(text[offset - 2 * chars:offset])
        whole = near.find(" ") + 1  # where the words read whole begin (0: none is)
        if whole and len(near) - whole >= chars:
            cut = near[-chars:]
            return cut.split(" ", 1)[1] if " " in cut else cut
    return _context_window(text, offset, chars)[0]


def _context_after(text: str, offset: int, chars: int) -> str:
    if len(text) - offset > 2 * chars:
        near = _collapse(text[offset:offset + 2 * chars])
        if near.rfind(" ") >= chars:  # the words read whole hold `chars` characters
            cut = near[:chars]
            return cut.rsplit(" ", 1)[0] if " " in cut else cut
    return _context_window(text, offset, chars)[1]


def _picture_sources(img, memo: dict) -> list[str]:
    """srcset values of the <source> children of the <picture> the img sits in (none if it sits in none),
    read once per <picture> (`memo`: picture -> its values), however many images it holds."""
    parent = img.parent
    if parent is None or parent.tag != "picture":
        return []
    if parent not in memo:
        memo[parent] = [s.getattr("srcset") or s.getattr("data-srcset") or ""
                        for s in parent.children.values() if s.tag == "source"]
    return memo[parent]


def image_refs(tree: HTMLTree, imgs: list, page_url: str) -> list[ImageRef]:
    """An ImageRef (no context yet) for each of `imgs`, the tree's <img> elements in document order,
    their URL resolved against `<base href>` and the page URL."""
    base = page_url
    base_el = tree.document.query_selector("base[href]")
    if base_el is not None:
        base = _resolve(page_url, (base_el.getattr("href") or "").strip()) or page_url
    refs, pictures = [], {}
    for position, img in enumerate(imgs):
        alt = img.getattr("alt")
        refs.append(ImageRef(
            page_url=page_url, url=_resolve(base, _choose_src(img, pictures)),
            alt=_collapse(alt) if alt is not None else None,
            width=_dimension(img.getattr("width")), height=_dimension(img.getattr("height")),
            position=position, context_before="", context_after=""))
    return refs


def without_marker_lookalikes(html: str) -> str:
    """`html` with the marker's first character (private use, no meaning on a page) as U+FFFD, so that
    text on the page cannot pass for an image's marker and move it."""
    return html.replace(MARKER_START, "\ufffd") if MARKER_START in html else html


def may_hold_images(html: str) -> bool:
    """False when `html` cannot hold an <img> element (no `<img` or `<image` start tag anywhere), so
    nothing needs parsing to know it has no images; true does not promise one (a tag in a comment)."""
    return IMG_START_TAG.search(html) is not None


def extract_images(html: str, page_url: str, context_chars: int = 200) -> list[ImageRef]:
    """Every <img> of `html` as an ImageRef, in document order. Context: each img is replaced by a
    marker text node and the page goes through resiliparse's plain-text extractor (visible text,
    block structure kept), so the text around the marker is what a reader sees around the image."""
    if not may_hold_images(html):
        return []
    tree = HTMLTree.parse(without_marker_lookalikes(html))
    imgs = tree.document.get_elements_by_tag_name("img").values()  # a list: indexing the collection is O(n)
    refs = image_refs(tree, imgs, page_url)
    add_contexts(tree, imgs, refs, context_chars)
    return refs


def add_contexts(tree: HTMLTree, imgs: list, refs: list[ImageRef], context_chars: int, restore: bool = False) -> None:
    """Sets each ref's context (see extract_images): a marker text node goes before each of `imgs`, the
    page's text is extracted, and the text around each marker is its image's. With `restore`, the
    markers are taken out again: the tree is left as it was parsed, for another walk."""
    markers = []
    for position, img in enumerate(imgs):
        markers.append(tree.create_text_node(f" \ue000{position}\ue001 "))
        img.parent.insert_before(markers[-1], img)
    text = extract_plain_text(tree, preserve_formatting=True, main_content=False, list_bullets=False,
                              alt_texts=False, links=False, form_fields=False, noscript=True, comments=False)
    if restore:
        for marker in markers:
            marker.decompose()
    pieces = MARKER.split(text)  # text, position, text, position, ..., text
    parts, offsets, length = [], {}, 0
    for i, piece in enumerate(pieces):
        if i % 2:
            offsets.setdefault(int(piece), length)
        else:
            parts.append(piece)
            length += len(piece)
    text = "".join(parts)
    for position, offset in offsets.items():
        if position < len(refs):
            refs[position].context_before, refs[position].context_after = _context(text, offset, context_chars)


def image_ref_rows(html: str, page_url: str, context_chars: int) -> list[tuple]:
    """extract_images as plain rows (the page step "image_refs" of extract/sandbox.py)."""
    return [ref.row() for ref in extract_images(html, page_url, context_chars)]


def extract_images_bounded(html: str, page_url: str, context_chars: int, timeout_ms: float) -> list[ImageRef]:
    """extract_images within `timeout_ms`, native code included (extract/sandbox.py run_page_step: a page
    that may run long goes to a child process killed at the deadline): the refs, or SandboxError
    ("page_timeout" or "page_error", the detail naming the step)."""
    if not may_hold_images(html):
        return []
    from extract import sandbox

    rows = sandbox.run_page_step("image_refs", html, (page_url, context_chars), timeout_ms)
    return [ImageRef(*row) for row in rows]


def page_disallows_ai(html: str) -> bool:
    """`<meta name="robots" content="noai, noimageai">` (the DeviantArt / Spawning opt-out): the page's
    images are not to be used for AI training. One pass over the page's first 200,000 characters: each
    `<meta` tag is read up to its `>` and the scan goes on after it (a regex over the whole tag,
    retried at every `<meta` of a page whose tags never close, was quadratic)."""
    head = html[:200_000]
    pos = 0
    while (m := META_START.search(head, pos)) is not None:
        end = head.find(">", m.end())
        if end < 0:
            return False
        tag = head[m.start():end + 1]
        pos = end + 1
        if META_ROBOTS.search(tag):
            content = META_CONTENT.search(tag)
            if content and NOAI.search(next(g for g in content.groups() if g is not None)):
                return True
    return False


def _alt_length(alt: str) -> int:
    """Characters, with East Asian wide characters (Han, kana, Hangul) counted twice."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in alt)


def is_generic_alt(alt: str) -> bool:
    words = GENERIC_STRIP.sub(" ", alt.casefold()).strip()
    if words in GENERIC_ALT:
        return True
    m = GENERIC_NUMBERED.match(words)  # "image 3", "photo_2", a number sign before the digits too
    return bool(m and m.group(1).strip() in GENERIC_ALT)


def url_path(url: str) -> str | None:
    """urlsplit(url).path, or None where the URL has no host or does not parse; a URL in canonical form
    (most image references: canonical_url gives them) is read by one match instead (url_path_parsed is the
    oracle)."""
    m = _CANONICAL_HTTP_URL.fullmatch(url)
    return m.group(1) if m else url_path_parsed(url)


def url_path_parsed(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        return parts.path if parts.hostname else None
    except ValueError:
        return None


# The URL rules' patterns (all lower case) without re.I, for an ASCII text lower-cased: the same matches (re.I
# differs only on a few non-ASCII letters, such as the Kelvin sign), and faster.
_LOWER = {rx: re.compile(rx.pattern) for rx in (TRACKING_URL, ICON_URL, CHROME_URL)}


def _found(rx: re.Pattern, text: str, ascii_: bool) -> bool:
    return (_LOWER[rx].search(text.lower()) if ascii_ else rx.search(text)) is not None


def check_image_url(ref: ImageRef, min_side: int, chrome_words: bool = False) -> str | None:
    """The URL and declared-size rules, which need no pixels and no alt text: the first failed rule's
    reason, or None. With `chrome_words` (the interleaved branch, as OBELICS), a URL naming site chrome
    (logo, avatar, banner, ad, badge, button) is `banned_url` too."""
    url = ref.url
    if not url:
        return "no_src"
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return "data_uri"
    if scheme not in ("http", "https"):
        return "bad_scheme"
    path = url_path(url)
    if path is None:
        return "bad_url"
    w, h = ref.width, ref.height
    ascii_ = url.isascii()
    if (w is not None and h is not None and w <= 2 and h <= 2) or _found(TRACKING_URL, url, ascii_):
        return "tracking_pixel"
    if _found(ICON_URL, path, ascii_):
        return "icon_or_sprite"
    if chrome_words and _found(CHROME_URL, path, ascii_):
        return "banned_url"
    if (w is not None and w < min_side) or (h is not None and h < min_side):
        return "declared_too_small"
    return None


class RefRules(Protocol):
    """The settings check_image_ref reads: the pairs branch's config section has them."""

    min_side: int
    min_alt_chars: int
    max_alt_chars: int
    alt_languages: list[str] | None  # None = any language
    alt_lang_min_score: float


def check_image_ref(ref: ImageRef, cfg: RefRules, lid=None) -> str | None:
    """The first failed rule's reason, or None: the URL rules, then the alt-text rules;
    `lid(text) -> (lang, prob)` is needed only when alt_languages is set."""
    reason = check_image_url(ref, cfg.min_side)
    if reason:
        return reason
    alt = ref.alt
    if alt is None:
        return "missing_alt"
    if not alt.strip():
        return "empty_alt"
    if FILENAME_ALT.search(alt.strip()):
        return "filename_alt"
    if is_generic_alt(alt):
        return "generic_alt"
    length = _alt_length(alt)
    if length < cfg.min_alt_chars:
        return "alt_too_short"
    if length > cfg.max_alt_chars:
        return "alt_too_long"
    if cfg.alt_languages:
        lang, prob = lid(alt)
        if lang not in cfg.alt_languages or prob < cfg.alt_lang_min_score:
            return "alt_language"
    return None


def image_record(url: str, http_status: int | None, content_type: str, payload: bytes,
                 x_robots_tag: str = "") -> dict | None:
    """The image branch's view of a WARC record (what the read stage hands over): a dict for a 200
    response with an image/* content type, None otherwise. `x_robots_tag` is the capture's HTTP
    X-Robots-Tag header, if the reader kept it (noai / noimageai captures are refused)."""
    if http_status != 200 or not content_type.startswith("image/") or not payload:
        return None
    return {"url": canonical_url(url), "payload": payload, "content_type": content_type,
            "x_robots_tag": x_robots_tag}


def read_pages_and_images(path) -> tuple[list[dict], list[dict]]:
    """HTML pages and image records of one local WARC file, in the form the read stage hands them to
    `ImagePairs` (for benchmarks and tests that run the image branch without the whole pipeline)."""
    from extract.records import doc_id, route
    from extract.warc import RawRecord, iter_records

    path = str(path)
    pages, images = [], []
    with open(path, "rb") as fh:
        for rec in iter_records(fh):
            if not isinstance(rec, RawRecord):
                continue
            if route(rec)[0] == "html":
                pages.append({"id": doc_id(rec, path), "url": rec.url, "warc_file": path, "warc_date": rec.date,
                              "source": "html", "payload": rec.payload, "http_charset": rec.http_charset})
            else:
                image = image_record(rec.url, rec.http_status, rec.http_content_type, rec.payload)
                if image:
                    images.append(image)
    return pages, images
