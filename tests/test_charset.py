"""Charset validation on real pages re-encoded at test time (fault-injection bug "mojibake kept as good text").

Real bytes: tests/data/warc/mini.warc.gz (UTF-8 de/zh/en pages, a windows-1252 page) and, for the scripts
that fixture lacks, the real Common Crawl excerpt sample/cc-main-2020-34-excerpt.warc.gz (a windows-1251
Russian page, GBK/GB2312 Chinese pages, ISO-8859-1-declared German pages) and the Japanese link texts of one
page of sample/mixed-dev-slice.warc.gz (see sample/SOURCE.md). Each page is re-encoded and (mis)declared here:
UTF-8 declared as a legacy charset, legacy charsets declared as each other, UTF-16, Python-only codec names,
double-encoded UTF-8 and bytes that no charset turns into text.
"""

from __future__ import annotations

import codecs
import random
import re
from functools import lru_cache
from pathlib import Path

import pytest

import extract.html as html_mod
from extract.html import ExtractionError, _canonical, decode_html, extract_main_text
from extract.records import route
from extract.warc import RawRecord, iter_records
from tests.warc_factory import MINI, html_page

ROOT = Path(__file__).resolve().parents[1]
CC = ROOT / "sample" / "cc-main-2020-34-excerpt.warc.gz"
SLICE = ROOT / "sample" / "mixed-dev-slice.warc.gz"
META_VALUE = re.compile(r"""(<meta[^>]{0,200}?charset\s*=\s*["']?\s*)([A-Za-z0-9_:.\-]{1,40})""", re.I)


@lru_cache(maxsize=None)
def _html_records(path: Path) -> tuple[RawRecord, ...]:
    return tuple(r for r in iter_records(open(path, "rb")) if isinstance(r, RawRecord) and route(r)[0] == "html")


def _record(path: Path, url_part: str) -> RawRecord:
    return next(r for r in _html_records(path) if url_part in r.url)


@lru_cache(maxsize=None)
def _japanese_page() -> str:
    """Real Japanese blog-post titles (link texts of one captured page), as a page of their own."""
    for r in iter_records(open(SLICE, "rb")):
        if isinstance(r, RawRecord) and "will-hadley-14-from-stoke-golding" in r.url:
            titles = re.findall(r'"text": "([^"]*[\u3041-\u3096\u30a1-\u30fa][^"]*)"', r.payload.decode("utf-8"))
            titles = list(dict.fromkeys(titles))
            assert len(titles) >= 40
            return html_page(titles, title="ブログ").decode("utf-8")
    raise AssertionError("Japanese page missing from the sample slice")


def real_text(lang: str) -> str:
    """A real page as text (its own markup, meta charset included where it has one)."""
    if lang == "de":
        return _record(MINI, "muehlenecho.de").payload.decode("utf-8")
    if lang == "de2":
        return _record(MINI, "seeblick-blog.de").payload.decode("utf-8")
    if lang == "zh":
        return _record(MINI, "qingfeng-ribao").payload.decode("utf-8")
    if lang == "ru":
        return _record(CC, "01spb.ru").payload.decode("cp1251")
    if lang == "ja":
        return _japanese_page()
    raise KeyError(lang)


def encode_page(text: str, codec: str, label: str | None) -> bytes:
    """`text` in `codec` (characters it lacks as HTML character references, as a real server would send
    them); its <meta charset> set to `label` (None: left as it is, "": removed)."""
    if label is not None:
        if label == "":
            text = META_VALUE.sub(lambda m: m.group(1) + "x-none", text)  # not a label: no declaration
        elif META_VALUE.search(text):
            text = META_VALUE.sub(lambda m: m.group(1) + label, text, count=1)
        else:
            text = text.replace("<head>", f'<head><meta charset="{label}">', 1)
    return text.encode(codec, "xmlcharrefreplace")


def same_codec(a: str, b: str) -> bool:
    groups = [{"gbk", "gb18030"}, {"shift_jis", "cp932"}, {"big5", "big5hkscs"}, {"euc_kr", "cp949"}]
    a, b = codecs.lookup(a).name, codecs.lookup(b).name
    return a == b or any(a in g and b in g for g in groups)


def assert_decoded(payload: bytes, http: str, codec: str, source: str | tuple[str, ...]):
    decoded = decode_html(payload, http)
    expected = payload.decode(codec)
    assert same_codec(decoded.charset, codec), (decoded.charset, codec)
    assert decoded.source in ((source,) if isinstance(source, str) else source), decoded.source
    assert decoded.text == expected
    return decoded


# --- names -------------------------------------------------------------------------------------------------

PYTHON_ONLY = ["unicode_escape", "raw_unicode_escape", "rot13", "rot_13", "base64", "zlib", "bz2", "hex", "uu",
               "quopri", "punycode", "idna", "utf-7", "utf-32", "utf_8", "utf-8-sig", "mbcs", "cp437", "palmos",
               "undefined", "latin-1"]


@pytest.mark.parametrize("name", PYTHON_ONLY)
def test_python_only_codec_names_are_no_charset(name):
    assert _canonical(name) is None


@pytest.mark.parametrize("label,codec", [("utf8", "utf-8"), ("unicode-1-1-utf-8", "utf-8"), ("latin1", "cp1252"),
                                         ("iso-8859-1", "cp1252"), ("us-ascii", "cp1252"), ("koi8-r", "koi8-r"),
                                         ("windows-1251", "cp1251"), ("x-sjis", "shift_jis"), ("euc-jp", "euc_jp"),
                                         ("gb2312", "gbk"), ("big5", "big5"), ("ks_c_5601-1987", "euc_kr"),
                                         ("ibm866", "cp866"), (" UTF-8 ", "utf-8")])
def test_whatwg_labels_are_charsets(label, codec):
    assert same_codec(_canonical(label), codec)


@pytest.mark.parametrize("name", ["unicode_escape", "raw_unicode_escape", "rot13", "base64", "zlib", "utf-7"])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_python_codec_declaration_is_ignored(name, where):
    # the 434 KB page carries 1,138 \\uXXXX escapes in inline JSON: unicode_escape would rewrite them
    pages = [_record(MINI, "trumps-made-for-tv-trade-war-keeps").payload, encode_page(real_text("de"), "utf-8", None)]
    for payload in pages:
        if where == "meta":
            payload = encode_page(payload.decode("utf-8"), "utf-8", name)
        decoded = decode_html(payload, name if where == "http" else "")
        assert decoded.charset == "utf-8" and decoded.text == payload.decode("utf-8")
        if where == "http":  # as if there were no header (the page's own <meta> utf-8 may still declare it)
            assert decoded == decode_html(payload, "")
        else:
            assert decoded.source == "detected"


# --- UTF-8 declared as something else -----------------------------------------------------------------------

@pytest.mark.parametrize("lang", ["de", "ru", "zh", "ja"])
@pytest.mark.parametrize("label", ["iso-8859-1", "latin1", "latin-1", "windows-1252", "koi8-r", "windows-1251",
                                   "iso-8859-5", "shift_jis", "euc-jp", "gbk", "big5"])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_utf8_page_declared_legacy_decodes_as_utf8(lang, label, where):
    payload = encode_page(real_text(lang), "utf-8", label if where == "meta" else None)
    decoded = assert_decoded(payload, label if where == "http" else "", "utf-8", ("detected", "declared"))
    assert "Ã" not in decoded.text and "Ð" not in decoded.text
    assert decoded.source == "detected" or (where == "http" and "utf-8" in payload[:4096].decode().lower())


@pytest.mark.parametrize("lang", ["de", "ru", "zh", "ja"])
@pytest.mark.parametrize("label", ["utf-16", "utf-16le", "utf-16be"])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_utf8_page_declared_utf16_is_not_cjk_garbage(lang, label, where):
    text = real_text(lang)
    for pad in ("", " "):  # even and odd byte counts: an even one decodes as UTF-16 without complaint
        payload = encode_page(text + pad, "utf-8", label if where == "meta" else "")
        # a <meta> utf-16 means utf-8 (WHATWG), so that one may count as declared
        decoded = assert_decoded(payload, label if where == "http" else "", "utf-8", ("detected", "declared"))
        assert decoded.source == "detected" or where == "meta"


@pytest.mark.parametrize("lang", ["de", "zh", "ja"])
def test_real_utf16_pages(lang):
    text = encode_page(real_text(lang), "utf-8", "utf-16").decode("utf-8")
    for codec, bom in (("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE)):
        body = text.encode(codec)
        label = "utf-16le" if codec.endswith("le") else "utf-16be"
        for payload, http in ((bom + body, ""), (bom + body, "utf-8"), (body, label)):
            decoded = decode_html(payload, http)
            assert decoded.charset == codec and decoded.text == text
        # no BOM, no header: the NUL in every other byte still gives it away
        decoded = decode_html(body, "")
        assert decoded.charset == codec and decoded.text == text and decoded.source == "detected"


def test_utf8_bom_wins_over_declarations():
    text = encode_page(real_text("de"), "utf-8", "windows-1252").decode("utf-8")
    decoded = decode_html(codecs.BOM_UTF8 + text.encode("utf-8"), "koi8-r")
    assert decoded.charset == "utf-8" and decoded.text == text


# --- legacy charsets declared correctly: no false rejection ----------------------------------------------

def test_real_iso_8859_1_german_pages_stay_cp1252():
    pages = [r for r in _html_records(CC) if "live-radsport.ch" in r.url] + [_record(MINI, "bergland-echo")]
    assert len(pages) == 3
    for page in pages:  # a handful of umlauts, a dash and a curly quote each: little evidence either way
        assert_decoded(page.payload, page.http_charset, "cp1252", "declared")


@pytest.mark.parametrize("lang", ["de", "de2"])
@pytest.mark.parametrize("label", ["iso-8859-1", "latin1", "windows-1252", "us-ascii"])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_german_cp1252_declared_correctly(lang, label, where):
    payload = encode_page(real_text(lang), "cp1252", label if where == "meta" else "")
    decoded = assert_decoded(payload, label if where == "http" else "", "cp1252", "declared")
    assert "während" in decoded.text or "für" in decoded.text


def test_real_windows_1251_page():
    page = _record(CC, "01spb.ru")
    decoded = assert_decoded(page.payload, page.http_charset, "cp1251", "declared")
    assert "пожарной безопасности" in decoded.text


@pytest.mark.parametrize("codec,label", [("koi8-r", "koi8-r"), ("koi8-r", "koi8"), ("cp1251", "windows-1251"),
                                         ("iso8859-5", "iso-8859-5"), ("cp866", "ibm866")])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_russian_legacy_declared_correctly(codec, label, where):
    payload = encode_page(real_text("ru"), codec, label if where == "meta" else "")
    decoded = assert_decoded(payload, label if where == "http" else "", codec, "declared")
    assert "пожарной безопасности" in decoded.text


@pytest.mark.parametrize("lang,codec,label", [("zh", "gbk", "gbk"), ("zh", "gbk", "gb2312"), ("zh", "big5", "big5"),
                                              ("ja", "shift_jis", "shift_jis"), ("ja", "shift_jis", "windows-31j"),
                                              ("ja", "euc_jp", "euc-jp")])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_cjk_declared_correctly(lang, codec, label, where):
    payload = encode_page(real_text(lang), codec, label if where == "meta" else "")
    decoded = assert_decoded(payload, label if where == "http" else "", codec, "declared")
    assert ("宇宙" if lang == "zh" else "商標") in decoded.text


def test_real_gbk_pages():
    for url in ("041696.com", "037426.cn", "0755krk.com", "0760.jxtdw.com", "077678u.info"):
        page = _record(CC, url)
        decoded = decode_html(page.payload, page.http_charset)
        assert decoded.source == "declared" and same_codec(decoded.charset, "gbk")
        assert decoded.text == page.payload.decode(decoded.charset)


# --- legacy charsets declared as each other ----------------------------------------------------------------

@pytest.mark.parametrize("codec,label", [("koi8-r", "windows-1251"), ("koi8-r", "windows-1252"),
                                         ("koi8-r", "iso-8859-1"), ("cp1251", "koi8-r"), ("cp1251", "windows-1252"),
                                         ("cp1251", "iso-8859-5")])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_russian_declared_wrongly_is_detected(codec, label, where):
    payload = encode_page(real_text("ru"), codec, label if where == "meta" else "")
    decoded = assert_decoded(payload, label if where == "http" else "", codec, "detected")
    assert "пожарной безопасности" in decoded.text


@pytest.mark.parametrize("lang,codec,label", [("ja", "shift_jis", "gbk"), ("ja", "shift_jis", "euc-jp"),
                                              ("ja", "shift_jis", "windows-1252"), ("ja", "shift_jis", "koi8-r"),
                                              ("ja", "euc_jp", "gbk"), ("ja", "euc_jp", "shift_jis"),
                                              ("ja", "euc_jp", "windows-1252"), ("ja", "euc_jp", "big5"),
                                              ("zh", "gbk", "shift_jis"), ("zh", "gbk", "euc-jp"),
                                              ("zh", "gbk", "big5"),
                                              ("zh", "gbk", "windows-1252"), ("zh", "gbk", "koi8-r"),
                                              ("zh", "gbk", "windows-1251"), ("zh", "big5", "gbk"),
                                              ("zh", "big5", "windows-1252")])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_cjk_declared_wrongly_is_detected(lang, codec, label, where):
    payload = encode_page(real_text(lang), codec, label if where == "meta" else "")
    decoded = assert_decoded(payload, label if where == "http" else "", codec, "detected")
    assert ("宇宙" if lang == "zh" else "商標") in decoded.text


@pytest.mark.parametrize("label", ["windows-1251", "koi8-r", "iso-8859-5"])
@pytest.mark.parametrize("where", ["http", "meta"])
def test_latin_page_declared_cyrillic_is_detected(label, where):
    """windows-1252 German read as windows-1251 is "fьr", "wдhrend": Cyrillic letters without the common ones."""
    payload = encode_page(real_text("de2"), "cp1252", label if where == "meta" else "")
    decoded = assert_decoded(payload, label if where == "http" else "", "cp1252", "detected")
    assert "während" in decoded.text


def test_all_caps_russian_is_no_mojibake():
    """Capitals inside words also mark KOI8-R read as windows-1251, but a real all-caps page stays."""
    text = real_text("ru")
    payload = encode_page(text[: text.index("<body")] + text[text.index("<body"):].upper(), "cp1251", None)
    decoded = assert_decoded(payload, "windows-1251", "cp1251", "declared")
    assert "ПОЖАРНОЙ БЕЗОПАСНОСТИ" in decoded.text


def test_unlabelled_page_without_verdict_is_windows_1252(monkeypatch):
    """No usable declaration and no detector verdict: WHATWG's default for unlabelled pages, not lossy UTF-8."""
    monkeypatch.setattr(html_mod, "detect_encoding", lambda *a, **k: "utf-8")  # uchardet's "no idea"
    payload = encode_page(real_text("de2"), "cp1252", "")
    for http in ("", "utf-8"):
        decoded = assert_decoded(payload, http, "cp1252", "fallback")
        assert "\ufffd" not in decoded.text


def test_cp1252_german_declared_iso_8859_2_keeps_its_quotes():
    """windows-1252 bytes 0x80-0x9F (dashes, curly quotes) are C1 controls in ISO-8859-2."""
    text = real_text("de").replace("Ungleichheit", "„Ungleichheit“").replace("Prozent", "„Prozent“")
    payload = encode_page(text, "cp1252", "iso-8859-2")
    decoded = decode_html(payload, "")
    assert not re.search("[\x80-\x9f]", decoded.text)
    assert "„Ungleichheit“" in decoded.text and "für" in decoded.text


# --- double-encoded UTF-8 --------------------------------------------------------------------------------------

def _as_cp1252_browser(data: bytes) -> str:
    """What a browser shows for bytes under windows-1252 (0x81, 0x8D, 0x8F, 0x90, 0x9D pass through as C1)."""
    undefined = (0x81, 0x8D, 0x8F, 0x90, 0x9D)
    return "".join(chr(b) if b in undefined else bytes([b]).decode("cp1252") for b in data)


@pytest.mark.parametrize("lang", ["de", "de2", "ru", "zh", "ja"])
@pytest.mark.parametrize("route_", ["cp1252", "latin-1"])
def test_double_encoded_utf8_is_repaired(lang, route_):
    text = encode_page(real_text(lang), "utf-8", "utf-8").decode("utf-8")
    raw = text.encode("utf-8")
    mojibake = _as_cp1252_browser(raw) if route_ == "cp1252" else raw.decode("latin-1")
    payload = mojibake.encode("utf-8")
    if lang.startswith("de"):
        assert "Ã¤" in mojibake or "Ã¼" in mojibake
    decoded = decode_html(payload, "utf-8")
    assert decoded.source == "repaired" and decoded.charset == "utf-8"
    assert decoded.text == text


def test_double_encoded_german_extracts_clean_text():
    text = real_text("de")
    payload = _as_cp1252_browser(text.encode("utf-8")).encode("utf-8")
    main = extract_main_text(decode_html(payload, "utf-8").text)
    assert "während" in main or "für" in main
    assert "Ã" not in main


def test_a_quoted_mojibake_word_is_not_a_double_encoding():
    """A real UTF-8 page that mentions mojibake once (or has „Fuß“-style quotes) is left as it is."""
    quoted = "Ungleichheit („wÃ¤hrend“, „Fuß“, „Ärger“)"
    text = real_text("de").replace("Ungleichheit", quoted, 2)
    payload = text.encode("utf-8")
    decoded = decode_html(payload, "utf-8")
    assert decoded.source == "declared" and decoded.text == text


# --- undecodable --------------------------------------------------------------------------------------------

def test_binary_garbage_is_dropped_as_undecodable():
    rng = random.Random(0)
    garbage = bytes(rng.randrange(128, 256) for _ in range(20000))
    for http in ("utf-8", "windows-1252", "koi8-r", ""):
        with pytest.raises(ExtractionError) as err:
            decode_html(garbage, http)
        assert err.value.reason == "undecodable_charset"


def test_undetectable_misdeclared_legacy_page_is_dropped(monkeypatch):
    """windows-1251 Russian declared ISO-8859-1 reads as 'Ñòðàòåãèÿ', declared IBM866 as no Russian at all;
    when detection has no better answer the page is dropped as undecodable_charset, not kept as text."""
    monkeypatch.setattr(html_mod, "detect_encoding", lambda *a, **k: "utf-8")  # uchardet's "no idea"
    for label in ("iso-8859-1", "ibm866"):
        payload = encode_page(real_text("ru"), "cp1251", label)
        with pytest.raises(ExtractionError) as err:
            decode_html(payload, "")
        assert err.value.reason == "undecodable_charset"


def test_mostly_utf8_page_with_a_stray_byte_stays_utf8():
    text = real_text("ru").replace("windows-1251", "utf-8")
    raw = text.encode("utf-8")
    cut = raw.index("безопасности".encode())
    payload = raw[:cut] + b"\xff" + raw[cut:]  # one stray byte in 25 KB of Cyrillic UTF-8
    decoded = decode_html(payload, "windows-1251")
    assert decoded.charset == "utf-8" and "пожарной" in decoded.text and "Ð" not in decoded.text
    truncated = raw[:-len(raw) // 3]
    truncated = truncated[: truncated.rindex("о".encode()) + 1]  # cut inside a two-byte character
    assert decode_html(truncated, "windows-1252").text == truncated[:-1].decode("utf-8")
