"""<img> extraction and the pre-fetch filters (extract/images.py), on the real multimodal page of
mini.warc.gz, the real Wikipedia main page of the ukwa capture, and small pages for the HTML edge
cases (picture/srcset, lazy loading, base href, data: URIs)."""

import pytest

from pipelines.image_pairs import ImagePairsConfig
from extract.html import decode_html
from extract.images import (ImageRef, canonical_url, check_image_ref, extract_images, image_record,
                            page_disallows_ai, parse_srcset)
from extract.records import route
from extract.warc import RawRecord, iter_records
from tests.test_images_decode import UKWA
from tests.warc_factory import MINI

CFG = ImagePairsConfig()


def html_of(path, url_part):
    with open(path, "rb") as fh:
        for r in iter_records(fh):
            if isinstance(r, RawRecord) and route(r)[0] == "html" and url_part in r.url:
                return r.url, decode_html(r.payload, r.http_charset).text
    raise LookupError(url_part)


def ref(url="https://example.org/photos/harbour.jpg", alt="Fishing boats in the harbour at dawn", w=None, h=None):
    return ImageRef("https://example.org/a", url, alt, w, h, 0, "", "")


def test_real_multimodal_page():
    url, html = html_of(MINI, "prairie-tribune.io/p/5b7b1115")
    refs = extract_images(html, url)
    assert [r.position for r in refs] == list(range(6))
    assert refs[0].alt == "BREAKING: Tottenham Sack Head Coach Mauricio Pochettino"
    assert refs[0].url.startswith("https://i1.wp.com/www.theparadigmng.com/")
    assert "&amp;" not in refs[1].url and "itok=Kq-5-Gzv" in refs[1].url
    assert (refs[2].alt, refs[2].width, refs[2].height) == ("Facebook", 32, 32)
    reasons = [check_image_ref(r, CFG) for r in refs]
    assert reasons == [None, None, "icon_or_sprite", "icon_or_sprite", "icon_or_sprite", "tracking_pixel"]
    assert all(len(r.context_before) <= 200 and len(r.context_after) <= 200 for r in refs)
    assert sum(bool(r.context_before or r.context_after) for r in refs) >= 4


def test_real_wikipedia_page_context_and_urls():
    url, html = html_of(UKWA, "Main_Page")
    refs = extract_images(html, url)
    assert len(refs) == 17 and all(r.alt for r in refs)
    shrimp = next(r for r in refs if r.alt == "Emperor shrimp")
    assert shrimp.url.startswith("http://upload.wikimedia.org/wikipedia/commons/thumb/a/ae/Periclimenes_imperator")
    assert "The Emperor shrimp (Periclimenes imperator)" in shrimp.context_after
    assert "featured picture" in shrimp.context_before
    # at 150 px only the shrimp passes by its declared size, and the search button, which declares none
    assert [r.alt for r in refs if check_image_ref(r, CFG) is None] == ["Emperor shrimp", "Search"]
    small = ImagePairsConfig(min_side=50)
    kept = [r.alt for r in refs if check_image_ref(r, small) is None]
    assert kept == ["Nick Drake's grave in Tanworth-in-Arden", "John Acland in 1893", "Ma Ying-jeou", "Emperor shrimp",
                    "Search"]
    facade = next(r for r in refs if r.alt == "San agustin facade.jpg")
    assert check_image_ref(facade, small) == "filename_alt"


def test_picture_srcset_lazy_base_and_data_uris():
    html = """<html><head><base href="https://cdn.example.org/media/"></head><body>
    <p>Before the picture.</p>
    <picture><source srcset="big.webp 1600w, small.webp 400w"><img src="fallback.jpg" alt="A"></picture>
    <img srcset="https://x.org/a,b_1.jpg 300w, https://x.org/c,d_2.jpg 900w, https://x.org/e.jpg 600w" alt="B">
    <picture><source srcset="only-source.avif 2x, lo.avif 1x"><img alt="C"></picture>
    <img src="data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="
         data-src="/lazy/real.jpg#frag" alt="D">
    <img src="data:image/png;base64,iVBORw0KGgo=" alt="E">
    <img alt="F"><img src=" //other.example.net/x y.png " alt="G" width="100%" height="300px">
    <noscript><img src="/lazy/real.jpg" alt="D"></noscript>
    <p>After the images.</p></body></html>"""
    refs = extract_images(html, "https://www.example.org/article/1")
    urls = [r.url for r in refs]
    assert urls[0] == "https://cdn.example.org/media/fallback.jpg"  # src first: what crawlers capture
    assert urls[1] == "https://x.org/c,d_2.jpg"                      # widest srcset candidate, commas kept
    assert urls[2] == "https://cdn.example.org/media/only-source.avif"  # <picture> source when no src
    assert urls[3] == "https://cdn.example.org/lazy/real.jpg"       # lazy-loading attribute, no fragment
    assert urls[4].startswith("data:image/png")
    assert urls[5] == ""
    assert urls[6] == "https://other.example.net/x%20y.png"
    assert (refs[6].width, refs[6].height) == (None, 300)
    assert urls[7] == urls[3]                                        # the noscript twin
    assert [check_image_ref(r, CFG) for r in refs][4:6] == ["data_uri", "no_src"]
    assert refs[0].context_before.endswith("Before the picture.")
    assert refs[-1].context_after == "After the images."


def test_parse_srcset():
    assert parse_srcset("a.jpg 1x, b.jpg 2x") == [("a.jpg", "x", 1.0), ("b.jpg", "x", 2.0)]
    assert parse_srcset("a.jpg, b.jpg 640w,") == [("a.jpg", "x", 1.0), ("b.jpg", "w", 640.0)]
    assert parse_srcset("") == []


@pytest.mark.parametrize("alt, reason", [
    (None, "missing_alt"), ("", "empty_alt"), ("   ", "empty_alt"),
    ("IMG_4032.JPG", "filename_alt"), ("San agustin facade.jpg", "filename_alt"), ("DSC 0012", "filename_alt"),
    ("Screen Shot 2019-11-07 at 12.32.11 PM", "filename_alt"), ("shutterstock_1234567", "filename_alt"),
    ("5dd3c38685f54015fa4a9873", "filename_alt"), ("2019-11-20", "filename_alt"), ("P1010234", "filename_alt"),
    ("untitled-1", "filename_alt"), ("P-38 Lightning over the Pacific", None), ("Scan of the 1912 letter", None),
    ("image", "generic_alt"), ("Photo", "generic_alt"), ("Bild", "generic_alt"), ("图片", "generic_alt"),
    ("image 3", "generic_alt"), ("Thumbnail!", "generic_alt"), ("Logo", "generic_alt"),
    ("Rss", "alt_too_short"), ("x" * 1001, "alt_too_long"),
    ("熊猫宝宝", None), ("Fishing boats in the harbour at dawn", None), ("A380 landing at Heathrow", None),
])
def test_alt_rules(alt, reason):
    assert check_image_ref(ref(alt=alt), CFG) == reason


@pytest.mark.parametrize("url, w, h, reason", [
    ("https://px.adtrack-cdn.com/collect?sid=9&ev=pageview", None, None, "tracking_pixel"),
    ("https://www.facebook.com/tr?id=1&ev=PageView&noscript=1", None, None, "tracking_pixel"),
    ("https://pixel.wp.com/b.gif?v=noscript", None, None, "tracking_pixel"),
    ("https://example.org/img/spacer.gif", None, None, "tracking_pixel"),
    ("https://example.org/a/photo.jpg", 1, 1, "tracking_pixel"),
    ("https://example.org/static/icons/facebook.png", None, None, "icon_or_sprite"),
    ("https://example.org/favicon.ico", None, None, "icon_or_sprite"),
    ("https://example.org/theme/sprites-2x.png", None, None, "icon_or_sprite"),
    ("https://example.org/a/photo.jpg", 100, None, "declared_too_small"),
    ("https://example.org/a/photo.jpg", 600, 149, "declared_too_small"),
    ("javascript:void(0)", None, None, "bad_scheme"),
    ("https://example.org/analytics-report-chart.png", 800, 600, None),
    ("https://example.org/lexicon/pixelated-art.png", None, None, None),
])
def test_url_rules(url, w, h, reason):
    assert check_image_ref(ref(url=url, w=w, h=h), CFG) == reason


def test_alt_language_rule_uses_lid():
    cfg = CFG.model_copy(update={"alt_languages": ["de"]})
    lid = {"Ein Hund im Park": ("de", 0.98), "A dog in the park": ("en", 0.97)}.get
    assert check_image_ref(ref(alt="Ein Hund im Park"), cfg, lid) is None
    assert check_image_ref(ref(alt="A dog in the park"), cfg, lid) == "alt_language"


def test_a_url_already_canonical_comes_back_as_parsing_it_gives_it():
    """canonical_url and an img's resolved URL take a URL of the canonical form as it is, and the image URL
    rules read its path by one match: the same as parsing, joining and re-encoding it gives, on random URLs near
    that form (upper case, ports, users,
    fragments, empty queries, ';' parameters, spaces, non-ASCII, relative paths) and on the real pages'
    image sources."""
    import random
    import re
    from urllib.parse import urljoin

    from extract.images import _CANONICAL_HTTP_URL, _resolve, canonical_url_parsed, url_path, url_path_parsed

    rng = random.Random(11)
    pieces = ["http://", "https://", "HTTP://", "ftp://", "//", "/", "", "a.org", "A.org", "x-y.b9.net", ":80", ":8080",
              "u@", "/p", "/Q", "?", "?a=1", "#f", ";k", "%2F", " ", "é", "~", "..", "./", "&b", "(c)", "'", "=",
              "\t", "?", "/", "data:x"]
    urls = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(10_000)]
    safe, tricky = "aZ09/%:@!$&'()*+,=~._-", "?#;: A@é\t/%[]"
    for _ in range(10_000):  # URLs of the canonical form, half of them with one character more
        path = "".join(rng.choice(safe) for _ in range(rng.randint(0, 12)))
        query = "?" + "".join(rng.choice(safe + "?") for _ in range(rng.randint(0, 6))) if rng.random() < 0.5 else ""
        url = f"{rng.choice(['http', 'https'])}://{rng.choice(['a.org', 'x-y.b9.net', 'h'])}/{path}{query}"
        if rng.random() < 0.5:
            at = rng.randint(0, len(url))
            url = url[:at] + rng.choice(tricky) + url[at:]
        urls.append(url)
    bases = ["https://example.org/a/b.html", "http://Example.ORG:80/x?y#z", ""]
    fast = 0
    for url in urls:
        assert canonical_url(url) == canonical_url_parsed(url), url
        assert url_path(url) == url_path_parsed(url), url
        if url and url[:5].lower() != "data:":
            for base in bases:
                try:
                    expected = canonical_url_parsed(urljoin(base, re.sub(r"[\t\n\r]", "", url)))
                except ValueError:
                    expected = re.sub(r"[\t\n\r]", "", url)[:200]
                assert _resolve(base, url) == expected, (base, url)
        fast += _CANONICAL_HTTP_URL.fullmatch(url) is not None
    assert fast > 500  # the fast path is what is tested
    refs = [r for path, part in ((MINI, "prairie-tribune.io/p/5b7b1115"), (UKWA, "Main_Page"))
            for r in extract_images(*reversed(html_of(path, part))) if r.url[:5] != "data:"]
    assert len(refs) > 10 and all(canonical_url(r.url) == canonical_url_parsed(r.url) == r.url for r in refs)
    assert all(url_path(r.url) == url_path_parsed(r.url) for r in refs)


def test_an_images_context_read_from_the_near_text_is_the_one_its_definition_gives(monkeypatch):
    """_context reads 2 x chars characters on a side where the words read whole hold enough: the same
    contexts as collapsing the 4 x chars characters its definition reads (_context_window), on random texts
    of words and whitespace runs of every kind, at every offset and several widths, and on the real page."""
    import random

    from extract.images import _context, _context_window

    rng = random.Random(11)
    pieces = ["a", "bb", "word", "longerword", " ", "  ", "\n", "\n\n   ", "\t", "\xa0", "\u3000", "\u2028", "é"]
    for _ in range(1000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        for chars in (0, 1, 3, 8, 20):
            for offset in range(len(text) + 1):
                assert _context(text, offset, chars) == _context_window(text, offset, chars), (text, offset, chars)
    url, html = html_of(UKWA, "Main_Page")
    fast = extract_images(html, url)
    monkeypatch.setattr("extract.images._context", _context_window)
    assert fast == extract_images(html, url)


def test_url_rules_read_an_ascii_url_lower_cased_as_their_case_blind_patterns_do():
    """check_image_url searches an ASCII URL lower-cased with its patterns' case-sensitive forms: the same
    matches as the re.I patterns on random URLs made of the rules' words in mixed case."""
    import random

    from extract.images import _LOWER, CHROME_URL, ICON_URL, TRACKING_URL

    rng = random.Random(5)
    words = ["pixel", "Beacon", "TRACK", "collect", "g/collect", "1x1", "Spacer", "favicon", "ICONS", "sprite", "btn",
             "Logo", "avatars", "ADS", "share", "stats2", ".gif", ".PNG", "?", "/", "_", "-", ".", "a", "Z", "9", "é",
             "\u212a"]
    for _ in range(20_000):
        url = "https://" + "".join(rng.choice(words) for _ in range(rng.randint(1, 7)))
        for rx in (TRACKING_URL, ICON_URL, CHROME_URL):
            if url.isascii():
                assert (_LOWER[rx].search(url.lower()) is None) == (rx.search(url) is None), (rx.pattern, url)
    assert all(pattern.pattern == pattern.pattern.lower() for pattern in _LOWER)


def test_page_noai_meta_and_canonical_urls():
    assert page_disallows_ai('<head><meta name="robots" content="noai, noimageai"></head>')
    assert page_disallows_ai("<meta content='noimageai' name=robots>")
    assert not page_disallows_ai('<meta name="robots" content="noindex">')
    assert canonical_url("HTTP://Example.ORG:80/a b.jpg#x") == "http://example.org/a%20b.jpg"
    assert canonical_url("https://example.org") == "https://example.org/"
    rec = image_record("http://Example.org/x.png", 200, "image/png", b"\x89PNG", "noai")
    assert rec == {"url": "http://example.org/x.png", "payload": b"\x89PNG", "content_type": "image/png",
                   "x_robots_tag": "noai"}
    assert image_record("http://example.org/x.png", 404, "image/png", b"x") is None
    assert image_record("http://example.org/x.html", 200, "text/html", b"x") is None
