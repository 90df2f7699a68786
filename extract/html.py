"""Charset decoding and main-content extraction for HTML payloads.

Decoding follows the WHATWG Encoding Standard, but checks every declaration against the bytes, since
declarations on the web are often wrong and single-byte charsets decode any bytes: a byte order mark wins;
only WHATWG labels count (Python-only codecs such as unicode_escape or rot13 are no declaration), and UTF-16
only when the bytes look like UTF-16. Bytes that are valid UTF-8 with multi-byte sequences are UTF-8 whatever
is declared, and UTF-8 that was once read as windows-1252 and saved again ("wÃ¤hrend") is repaired. For other
bytes a declared charset (HTTP header, then <meta>) that decodes them is kept unless resiliparse's detector
(uchardet) names one that reads clearly less like mojibake; a single-byte reading that is still mostly
mojibake, or lossy UTF-8 with too many replacement characters, is dropped as "undecodable_charset".

Extraction uses resiliparse's main-content extractor by default (Bevendorff et al. 2018, the
extractor behind ChatNoir and FineWeb-2 comparisons) or trafilatura (Barbaresi 2021) as an option, each
document under a hard deadline and a size cap (extract/sandbox.py).
"""

from __future__ import annotations

import codecs
import functools
import re
from dataclasses import dataclass

from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]{1,40})""", re.I)
# A few undecodable bytes are normal on the web; beyond this share the text is garbage.
MAX_REPLACEMENT_SHARE = 0.01
# A page that is UTF-8 apart from a few stray bytes (a legacy-encoded footer, a cut character) is still UTF-8
# when its valid multi-byte characters outnumber the invalid bytes this many times; legacy text forms valid
# multi-byte UTF-8 only by accident, pair by pair, far below this ratio.
MOSTLY_UTF8 = 8
# uchardet reads half of this from each end of a page: enough for a verdict, bounded cost on huge pages.
DETECT_SAMPLE = 32768
# Long pages are scored in 4 evenly spaced windows (head, body, tail) of this many bytes or characters: a few
# thousand characters of text settle a share, and the cost stays bounded on huge pages.
SAMPLE_WINDOW = 2048
# Mojibake score of a reading: the share of its non-ASCII characters that look mis-decoded (_single_byte_score,
# _SUSPECT); right readings of real pages score under 0.01, wrong ones mostly 0.4 to 1. A declared single-byte
# reading scoring at most CLEAN_MAX (and, for Cyrillic, with at least MIN_COMMON_CYRILLIC of its letters among
# _COMMON_CYRILLIC) is kept without asking the detector; otherwise a detected charset replaces it when it
# decodes the bytes and scores GARBAGE_GAP lower and at most half. A single-byte reading is dropped when, on
# GARBAGE_MIN_CHARS characters or more, its score without the capitals (all-caps menus are real) exceeds
# GARBAGE_MAX or, for Cyrillic, its common letters fall below GARBAGE_COMMON_CYRILLIC.
CLEAN_MAX = 0.05
MIN_COMMON_CYRILLIC = 0.45
GARBAGE_GAP = 0.1
GARBAGE_MAX = 0.3
GARBAGE_COMMON_CYRILLIC = 0.3
GARBAGE_MIN_CHARS = 16
# A GBK reading asks the detector when this share of its double-byte characters lies outside GB2312 (Shift_JIS,
# Big5 or Latin-1 bytes read as GBK) or starts with a kana-row byte 0xA4/0xA5 (EUC-JP read as GBK).
GBK_RARE_MAX = 0.1
GBK_KANA_MAX = 0.15
# Double-encoded UTF-8 is repaired when it is frequent: at least MOJIBAKE_MIN sequences, and at least this
# share of the page's characters U+00C0..U+00FF start one (in a fully double-encoded page all do; a real
# German or French page quoting one "wÃ¤hrend" is far below).
MOJIBAKE_MIN = 3
MOJIBAKE_SHARE = 0.5

# Some WHATWG decoders are Microsoft supersets of the codecs resiliparse names for them: Shift_JIS is
# windows-31j (NEC/IBM rows: ①, ㈱), EUC-KR is windows-949, Big5 is Big5-HKSCS, windows-874 has the quotes
# that ISO-8859-11 lacks. Decoding with those keeps real pages decoding strictly.
_WHATWG_CODEC = {"shift_jis": "cp932", "euc_kr": "cp949", "big5": "big5hkscs", "iso8859-11": "cp874"}
_UTF16 = ("utf-16-le", "utf-16-be")
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_BOM_PREFIXES = tuple(bom for bom, _ in _BOMS)
# Single-byte Cyrillic charsets: the same letters in different layouts, so one read as another stays Cyrillic.
_CYRILLIC = {"cp1251", "koi8-r", "koi8-u", "iso8859-5", "cp866", "mac-cyrillic"}
# The commonest letters of Russian, Ukrainian, Bulgarian, Serbian text, either case: about 0.7 of a right
# reading's letters (all-caps or not), about 0.36 of KOI8-R read as windows-1251 or back, less in others.
_COMMON_CYRILLIC = frozenset("оеаинтсрвлк" + "оеаинтсрвлк".upper())
# The multi-byte legacy decoders and the script each writes; every other WHATWG encoding is single-byte.
_CJK = {"gbk": "zh-hans", "gb18030": "zh-hans", "big5hkscs": "zh-hant", "cp932": "ja", "euc_jp": "ja",
        "iso2022_jp": "ja", "cp949": "ko"}

# windows-1252's non-ASCII letters and symbols: Cyrillic or CJK bytes read as windows-1252 are long runs of
# them ("Ñòðàòåãèÿ", "¤å¤Æ"), while real Latin text has its accented letters between ASCII ones ("Größe").
# Left out: the punctuation real pages repeat ("»»»", "•••", "–––"), the C1 range's typography, NBSP, soft hyphen.
_CP1252_CHARS = (frozenset(bytes(range(0xA1, 0x100)).decode("cp1252")) - frozenset("«»·°¦¯¬\xad")
                 | frozenset("ŒœŠšŸŽžƒ"))


def _char_class(ch: str) -> str:
    """One letter standing for a character's class in _single_byte_score."""
    if ch.isascii():
        return "A" if ch.isalpha() else " "
    if ch == "\ufffd" or "\x80" <= ch <= "\x9f" or "\u2500" <= ch <= "\u259f":
        return "S"  # undefined byte, C1 control, box drawing (a KOI8/IBM866 reading of other bytes)
    if ch in _CP1252_CHARS or "\u0100" <= ch <= "\u024f":  # Latin letters and windows-1252's symbols
        return "L"
    if ch.isalpha():  # Cyrillic, Greek, Hebrew, Arabic, Thai: common Cyrillic, other capital, other
        return "F" if ch in _COMMON_CYRILLIC else "C" if ch.isupper() else "y"
    return "o"


@functools.lru_cache(maxsize=64)
def _byte_classes(codec: str) -> tuple[bytes, bytes | None]:
    """bytes.translate tables for single-byte `codec`: the class (_char_class) of each byte's character (ASCII
    letters apart only where needed), and for Greek, Hebrew, Arabic, Thai charsets a second one for adjacency
    (ASCII letter "A", non-Latin letter "c"). Latin charsets read nothing as non-Latin letters; a Cyrillic
    reading of Latin text shows in its lack of common letters ("fьr", "wдhrend"), no adjacency needed."""
    classes = bytes(ord(_char_class(bytes((b,)).decode(codec, "replace"))) for b in range(256))
    if codec in _CYRILLIC or sum(classes.count(c) for c in b"FCy") < 16:
        return classes.replace(b"A", b" "), None
    return classes, bytes(ord("c") if c in b"FCy" else c if c == ord("A") else ord(" ") for c in classes)


def _windows(n: int, window: int = SAMPLE_WINDOW) -> list[tuple[int, int]]:
    """Up to 4 evenly spaced windows (head, body, tail) of a page of length n, or the whole page."""
    if n <= 4 * window:
        return [(0, n)]
    step = (n - window) // 3
    return [(i, i + window) for i in range(0, 4 * step, step)]


def _sample(seq, window: int = SAMPLE_WINDOW):
    """The _windows of a page (bytes or str), joined; the page itself if short."""
    if len(seq) <= 4 * window:
        return seq
    return seq[:0].join(seq[a:b] for a, b in _windows(len(seq), window))


def _single_byte_score(payload: bytes, codec: str) -> tuple[float, float, int, float, int]:
    """(mojibake share, the same without capitals, its characters, share of the commonest Cyrillic letters
    among the non-Latin letters, those letters) of the reading of `payload` under single-byte `codec`.

    Computed on the sampled bytes, as the reading maps byte to character: one translate into class letters
    (_char_class), then substring counts, each a fast scan (a regex over the decoded text costs some 30 times
    more). Counted as mojibake: undefined bytes, C1 controls and box drawing; runs of 3+ windows-1252 letters
    or symbols ("Ñòðàòåãèÿ", "¤å¤Æ": Cyrillic or CJK bytes read as windows-1252); capitals after a letter
    ("пРХБЕР": KOI8-R read as windows-1251 and back) and Cyrillic letters lacking the commonest ones ("fьr":
    windows-1252 bytes read as windows-1251), both only in the first share; Greek, Hebrew, Arabic, Thai letters
    touching ASCII ones ("fόr")."""
    sample = _sample(payload)
    classes, adjacency = _byte_classes(codec)
    k = sample.translate(classes)
    non_ascii = len(k) - k.count(b" ") - (k.count(b"A") if adjacency else 0)
    if not non_ascii:
        return 0.0, 0.0, 0, 1.0, 0
    hard = k.count(b"S")
    if codec not in _CYRILLIC and adjacency is None:  # a Latin charset: only the runs are left to count
        hard += 3 * k.count(b"LLL")
        return min(hard / non_ascii, 1.0), min(hard / non_ascii, 1.0), hard, 1.0, 0
    common, capital = k.count(b"F"), k.count(b"C")
    letters = common + capital + k.count(b"y")
    if adjacency:
        a = sample.translate(adjacency)
        hard += a.count(b"Ac") + a.count(b"cA")
    soft = k.count(b"CC") + k.count(b"yC") + k.count(b"FC") if capital else 0
    if codec in _CYRILLIC and letters and common < MIN_COMMON_CYRILLIC * letters:
        soft += letters - common
    return (min((hard + soft) / non_ascii, 1.0), min(hard / non_ascii, 1.0), hard,
            common / letters if letters else 1.0, letters)


# The same signs in a multi-byte reading's text, plus what multi-byte misreadings produce; each alternative
# starts with a non-ASCII character. Only used to compare two readings, on a sample.
_SUSPECT = re.compile(
    "[\x80-\x9f\ufffd\u2500-\u259f\uff61-\uff9f\ue000-\uf8ff]"  # also half-width katakana, private use:
    # ^ EUC or GBK bytes read as Shift_JIS
    "|[\u00a1-\u00ff\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc\u2013-\u2026\u2030\u2039\u203a"
    "\u20ac\u2122]{3,}"
    "|(?<=[A-Za-z])[\u0370-\u06ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff](?=[A-Za-z])"  # "w鋒rend": Latin-1 as GBK
)
_HANZI = re.compile("[\u3400-\u9fff\uf900-\ufaff]")


def _score(payload: bytes, codec: str, text: str) -> float:
    """Mojibake share of the reading `text` of `payload` under `codec`."""
    if codec not in _CJK:
        return _single_byte_score(payload, codec)[0]
    text = _sample(text)
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return sum(map(len, _SUSPECT.findall(text))) / non_ascii if non_ascii else 0.0


@functools.lru_cache(maxsize=1)
def _common_hanzi() -> frozenset[str]:
    """The hanzi of GB2312 (simplified) and of Big5 level 1 (traditional): the common ones of either script."""
    chars = set()
    for codec, leads, trails in (("gb2312", range(0xB0, 0xF8), range(0xA1, 0xFF)),
                                 ("big5", range(0xA4, 0xC7), [*range(0x40, 0x7F), *range(0xA1, 0xFF)])):
        for lead in leads:
            for trail in trails:
                try:
                    chars.add(bytes((lead, trail)).decode(codec))
                except UnicodeDecodeError:
                    pass
    return frozenset(chars)


def _common_hanzi_share(text: str) -> float:
    hanzi = _HANZI.findall(_sample(text))
    common = _common_hanzi()
    return sum(c in common for c in hanzi) / len(hanzi) if hanzi else 1.0


def _gbk_suspect(text: str) -> bool:
    """Whether a GBK reading deserves the detector's opinion (GBK_RARE_MAX, GBK_KANA_MAX). Python's CJK codecs
    are slow, so this looks at 4 windows of 512 characters: misreadings show at once."""
    sample = _sample(text, 512)
    ascii_ = len(sample.encode("ascii", "ignore"))
    double = len(sample) - ascii_
    if double <= 0:
        return False
    common = sample.encode("gb2312", "ignore")
    rare = double - (len(common) - ascii_) // 2
    kana_rows = common.count(b"\xa4") + common.count(b"\xa5")  # also counts trail bytes: about 2% in Chinese
    return rare > GBK_RARE_MAX * double or kana_rows > GBK_KANA_MAX * double


# UTF-8 read as windows-1252 (browsers pass its five undefined bytes through as C1) or as Latin-1, then saved
# as UTF-8: each multi-byte character became a lead U+00C2..U+00F4 plus readings of continuation bytes.
_MOJIBAKE_BYTE = {chr(b): b for b in range(0x80, 0x100)}
_MOJIBAKE_BYTE.update({bytes([b]).decode("cp1252"): b for b in range(0x80, 0xA0)
                       if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)})
_CONT = "[" + re.escape("".join(c for c, b in _MOJIBAKE_BYTE.items() if b < 0xC0)) + "]"
_MOJIBAKE_TEXT = re.compile(f"[\u00c2-\u00df]{_CONT}|[\u00e0-\u00ef]{_CONT}{{2}}|[\u00f0-\u00f4]{_CONT}{{3}}")
# The same in the bytes, for a cheap count: a lead (C3 82..C3 B4) followed by a continuation reading.
_MOJIBAKE_BYTES = re.compile(b"\xc3[\x82-\xb4](?:\xc2[\x80-\xbf]|"
                             + b"|".join(re.escape(c.encode()) for c, b in _MOJIBAKE_BYTE.items()
                                         if b < 0xA0 and ord(c) > 0xFF)
                             + b")")


class ExtractionError(Exception):
    """Raised with a reason code when a document cannot be turned into text."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@functools.lru_cache(maxsize=512)
def _canonical(name: str | None) -> str | None:
    """Python codec for a WHATWG encoding label, else None. A name outside the Encoding Standard is no
    declaration at all, even where Python has a codec by that name: unicode_escape would rewrite the page's
    backslash escapes, rot13/base64/zlib are not text encodings, utf-7 and utf-32 are banned on the web."""
    if not name or not name.isascii():
        return None
    html5 = map_encoding_to_html5(name.strip().lower(), fallback_utf8=False)
    return _codec(html5) if html5 else None


def _codec(html5: str | None) -> str | None:
    """Python codec for one of resiliparse's WHATWG names (map_encoding_to_html5, detect_encoding)."""
    try:
        name = codecs.lookup(html5 or "").name
    except LookupError:
        return None
    return _WHATWG_CODEC.get(name, name)


def _strict(payload: bytes, encoding: str) -> str | None:
    try:
        return payload.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _utf16_layout(head: bytes) -> str | None:
    """utf-16-le/-be when NULs fill one byte parity of `head` (ASCII markup in UTF-16) and hardly the other:
    text in any other charset has no NULs, binary junk has them at both parities."""
    half = len(head) // 2
    if half < 8:
        return None
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if odd >= 0.1 * half and even * 16 <= odd:
        return "utf-16-le"
    if even >= 0.1 * half and odd * 16 <= even:
        return "utf-16-be"
    return None


def _meta_charset(head: bytes) -> str | None:
    match = META_CHARSET.search(head)
    charset = _canonical(match.group(1).decode("ascii", "ignore")) if match else None
    # WHATWG prescan: a <meta> readable as ASCII is not in UTF-16, so a utf-16 label there means UTF-8
    return "utf-8" if charset in _UTF16 else charset


def _detect(payload: bytes) -> str | None:
    """uchardet's charset, or None where it has no verdict. Only asked about bytes that are not UTF-8, where its
    "utf-8" is resiliparse's fallback for "unknown"; UTF-16 was settled by _utf16_layout."""
    try:
        detected = _codec(detect_encoding(payload, max_len=DETECT_SAMPLE))
    except BaseException as err:  # the detector (Rust) panicked on these bytes: no verdict, as for any other
        from extract.sandbox import is_panic

        if not is_panic(err):
            raise
        return None
    return None if detected in ("utf-8",) + _UTF16 else detected


def _lossy(payload: bytes, encoding: str, source: str) -> Decoded:
    text = payload.decode(encoding, errors="replace")
    if text.count("\ufffd") > MAX_REPLACEMENT_SHARE * max(len(text), 1):
        raise ExtractionError("undecodable_charset", encoding)
    return Decoded(text, encoding, source)


def _checked(decoded: Decoded, payload: bytes) -> Decoded:
    """`decoded`, unless it is a single-byte reading that is mostly mojibake (Cyrillic or CJK bytes read as
    windows-1252 look like accented Latin): that text is dropped, not kept as a Latin-script page."""
    if decoded.charset in _CJK or decoded.charset == "utf-8" or decoded.charset in _UTF16:
        return decoded
    _, share, bad, common, letters = _single_byte_score(payload, decoded.charset)
    if share > GARBAGE_MAX and bad >= GARBAGE_MIN_CHARS:
        raise ExtractionError("undecodable_charset", f"{decoded.charset} reads as mojibake ({share:.0%})")
    if decoded.charset in _CYRILLIC and common < GARBAGE_COMMON_CYRILLIC and letters >= GARBAGE_MIN_CHARS:
        raise ExtractionError("undecodable_charset", f"{decoded.charset} reads as no Cyrillic text ({common:.0%})")
    return decoded


def _validated(payload: bytes, charset: str, text: str) -> Decoded:
    """A declared `charset` that decodes the (non-UTF-8) bytes as `text`. A reading that looks right is kept
    as it is (no detector: that is the cost of most legacy pages); a suspect one is checked against the
    detector, whose charset replaces it when it decodes the bytes too and reads clearly less like mojibake."""
    if charset in _CJK:  # GBK, the commonest, has a cheap test; the rarer ones always ask the detector
        suspect = _gbk_suspect(text) if _CJK[charset] == "zh-hans" else True
    else:
        share, _, _, common, _ = _single_byte_score(payload, charset)
        suspect = share > CLEAN_MAX or (charset in _CYRILLIC and common < MIN_COMMON_CYRILLIC)
    if not suspect:
        return Decoded(text, charset, "declared")
    detected = _detect(payload)
    if detected is None or detected == charset or {detected, charset} <= {"gbk", "gb18030"}:
        return _checked(Decoded(text, charset, "declared"), payload)
    other = _strict(payload, detected)
    if other is None:
        return _checked(Decoded(text, charset, "declared"), payload)
    if charset in _CJK and detected in _CJK and _CJK[charset] != _CJK[detected]:
        if {_CJK[charset], _CJK[detected]} == {"zh-hans", "zh-hant"}:
            # GBK vs Big5: uchardet sometimes takes short Big5 for GB18030, which accepts any Big5 bytes; a
            # wrong reading is full of rare hanzi, a right one almost never leaves the common sets
            better = _common_hanzi_share(other) >= _common_hanzi_share(text) + GARBAGE_GAP
            return Decoded(other, detected, "detected") if better else Decoded(text, charset, "declared")
        # e.g. EUC-JP read as GBK: the kana rows coincide and the kanji come out as ordinary (wrong) hanzi,
        # which no mojibake score sees; uchardet tells Japanese from Chinese reliably
        return Decoded(other, detected, "detected")
    declared_score, detected_score = _score(payload, charset, text), _score(payload, detected, other)
    if declared_score >= detected_score + GARBAGE_GAP and declared_score >= 2 * detected_score:
        return _checked(Decoded(other, detected, "detected"), payload)
    if charset in _CYRILLIC and detected in _CYRILLIC and detected_score < declared_score + GARBAGE_GAP:
        # windows-1251 read as ISO-8859-5 is a soup of lowercase Cyrillic that the score barely sees; uchardet
        # tells the Cyrillic layouts apart reliably, so it decides unless its reading looks clearly worse
        return _checked(Decoded(other, detected, "detected"), payload)
    return _checked(Decoded(text, charset, "declared"), payload)


def _near_first_error_utf8(payload: bytes, start: int) -> bool:
    """Cheap pre-test for _mostly_utf8: 2 KB from the first invalid byte on hold few invalid bytes. In legacy
    text they are dense (each accented letter, each CJK character); a stray byte in UTF-8 stands alone."""
    window = payload[start:start + 2048].decode("utf-8", errors="replace")
    bad = window.count("\ufffd")
    return bad <= 2 or bad * MOSTLY_UTF8 <= len(window) - len(window.encode("ascii", "ignore")) - bad


def _mostly_utf8(payload: bytes) -> bool:
    """Valid multi-byte characters outnumber invalid bytes MOSTLY_UTF8 times, and those stay rare."""
    lossy = payload.decode("utf-8", errors="replace")
    bad = lossy.count("\ufffd")
    multibyte = len(lossy) - len(lossy.encode("ascii", "ignore")) - bad
    return multibyte >= MOSTLY_UTF8 * bad and bad <= MAX_REPLACEMENT_SHARE * len(lossy)


def _repair_double_utf8(text: str, payload: bytes) -> str | None:
    """`text` with its double-encoded UTF-8 undone, or None where there is none to speak of. Repaired rather
    than dropped: each sequence is inverted exactly (its bytes must decode as UTF-8, else it stays), so the
    page's real text comes back; the frequency gate keeps real Latin text ("Fuß“", a quoted "Ã¤") as it is."""
    # Every double-encoded sequence starts with a character U+00C2..U+00F4, in UTF-8 a C3 byte. Most pages
    # have fewer than MOJIBAKE_MIN of those: a few memchr calls, no copy, settle them.
    found = 0
    for start, end in _windows(len(payload)):
        at = payload.find(b"\xc3", start, end)
        while at >= 0 and found < MOJIBAKE_MIN:
            found += 1
            at = payload.find(b"\xc3", at + 1, end)
    if found < MOJIBAKE_MIN:
        return None
    sample = _sample(payload)
    leads = sample.count(b"\xc3")
    marks = len(_MOJIBAKE_BYTES.findall(sample))
    if marks < MOJIBAKE_MIN or marks < MOJIBAKE_SHARE * leads:
        return None
    fixed = _MOJIBAKE_TEXT.sub(_undo_mojibake, text)
    return fixed if len(fixed) < len(text) else None


def _undo_mojibake(match: re.Match) -> str:
    try:
        return bytes(_MOJIBAKE_BYTE[c] for c in match.group()).decode("utf-8")
    except UnicodeDecodeError:
        return match.group()


@dataclass
class Decoded:
    text: str
    charset: str
    # "declared", "detected", "fallback" (lossy UTF-8, lossy declared charset, windows-1252 default) or "repaired"
    source: str
    # text.encode("utf-8") where the payload already is those bytes (ASCII and valid UTF-8 pages, most of the web),
    # else None: the extractor's child process is handed them instead of a re-encoding of the text
    utf8: bytes | None = None


def decode_html(payload: bytes, http_charset: str = "") -> Decoded:
    """Decode `payload` to str, checking every declaration against the bytes: a BOM; else UTF-8 when the bytes
    are UTF-8 (double-encoded UTF-8 undone: "repaired"); else the declared charset (HTTP header, then <meta>)
    that decodes them unless it reads as mojibake and the detector finds a better one ("detected"); else the
    detected one; else windows-1252 or lossy UTF-8 ("fallback"). ExtractionError("undecodable_charset") where
    the text is still garbage. ASCII and UTF-8 pages cost one strict UTF-8 decode and a few byte scans; legacy
    pages add a byte-level score, and the detector only where that score finds the declaration suspect."""
    if payload.startswith(_BOM_PREFIXES):
        for bom, encoding in _BOMS:
            if payload.startswith(bom):  # WHATWG: a byte order mark beats every declaration
                return _lossy(payload[len(bom):], encoding, "declared")
    declared = _canonical(http_charset)
    if declared in _UTF16 or payload.find(b"\x00", 0, 4096) >= 0:
        # UTF-16 only with its shape, NULs in every other byte of the markup: a UTF-8 page declared UTF-16
        # would otherwise decode without complaint into CJK garbage
        layout = _utf16_layout(payload[:4096])
        if layout:
            return _lossy(payload, layout, "declared" if layout == declared else "detected")
        if declared in _UTF16:
            declared = None
    try:
        text, first_error = payload.decode("utf-8"), -1
    except UnicodeDecodeError as err:  # a page cut inside its last character (size caps do that) is still UTF-8
        first_error = err.start
        cut = err.reason == "unexpected end of data" and err.start >= len(payload) - 3
        text = payload[:err.start].decode("utf-8") if cut else None
    if text is not None:
        utf8 = payload if first_error < 0 else payload[:first_error]
        if len(text) == len(payload):  # all ASCII (a UTF-8 decode only shrinks with multi-byte characters)
            if b"\x1b" not in payload:  # ISO-2022-JP is 7-bit: its escapes are the only ASCII read otherwise
                charset = declared or _meta_charset(payload[:4096])
                return Decoded(text, charset or "utf-8", "declared" if charset else "detected", utf8)
        else:
            # Valid UTF-8 with multi-byte sequences is UTF-8 whatever the declaration says: legacy text is valid
            # UTF-8 only by accident in tiny samples, while UTF-8 read as a single-byte charset always decodes,
            # as "wÃ¤hrend" (and often as GBK or Shift_JIS too).
            fixed = _repair_double_utf8(text, payload)
            if fixed is not None:
                return Decoded(fixed, "utf-8", "repaired")
            said = declared == "utf-8" or _meta_charset(payload[:4096]) == "utf-8"
            return Decoded(text, "utf-8", "declared" if said else "detected", utf8)
    elif _near_first_error_utf8(payload, first_error) and _mostly_utf8(payload):
        return Decoded(payload.decode("utf-8", errors="replace"), "utf-8", "fallback")
    meta = _meta_charset(payload[:4096])
    for charset in dict.fromkeys((declared, meta)):
        if charset and charset != "utf-8":  # UTF-8 did not fit
            legacy = _strict(payload, charset)
            if legacy is not None:
                return _validated(payload, charset, legacy)
    detected = _detect(payload)
    if detected:
        legacy = _strict(payload, detected)
        if legacy is not None:
            return _checked(Decoded(legacy, detected, "detected"), payload)
    named = next((c for c in (declared, meta, detected) if c and c != "utf-8"), None)
    if named is None:  # nothing usable names a charset: WHATWG's default for unlabelled pages
        legacy = _strict(payload, "cp1252")
        if legacy is not None:
            return _checked(Decoded(legacy, "cp1252", "fallback"), payload)
    return _checked(_lossy(payload, named or "utf-8", "fallback"), payload)


def extract_main_text(html: str, engine: str = "resiliparse", timeout_ms: int = 5000,
                      utf8: bytes | None = None, one_cpu: bool = True) -> str:
    """Main-content plain text of an HTML document (paragraphs separated by blank lines), or
    ExtractionError("extract_timeout") once `timeout_ms` has passed, native code included. `utf8`:
    html.encode("utf-8") if the caller has it (Decoded.utf8), which a page sent to the child process
    then travels as instead of a fresh encoding (~1 ms/MB saved; the text is the same). `one_cpu`: a
    page sent to the child is extracted with the calling thread and the child on one CPU
    (sandbox.on_one_cpu; the text is the same).

    Two paths (extract/sandbox.py has the details):
    - in process for pages with <= 256 '<' and <= 16k characters when the limit is >= 500 ms: the
      slowest page of an adversarial battery at those bounds takes ~60 ms, so the size check is the
      bound (nothing interrupts the library: an exception raised into native code that calls back into
      Python becomes a panic); a library's panic on the page is "extract_error";
    - every other page in a persistent child process, SIGKILLed at the deadline
      ("extract_timeout", ">N ms (killed)"; a child that dies: "extract_error", "extractor process
      died: signal N"); the next page gets a fresh child.
    Nothing in process could bound resiliparse's C++, whose cost grows about quadratically: nested
    <div> 1k/2k/4k/8k/16k/32k deep took 0.03/0.10/0.42/1.6/6.1/27 s (100k: ~711 s in the bug
    report), 1,000 misnested <b> then 1,000 <p> (18 kB) 3.5 s. On mixed-dev.warc.gz 85.6% of the
    1,692 HTML pages stay in process; the other 14.4% are 56% of the extraction time and 39 of 45 MB,
    and cost ~19% more through the child (see sandbox.py): extraction alone 2,372 -> 2,144 pages/s.
    """
    if engine not in ("resiliparse", "trafilatura"):
        raise ValueError(f"unknown extraction engine {engine!r}; use 'resiliparse' or 'trafilatura'")
    from extract import sandbox

    if not sandbox.in_process_is_safe(html, timeout_ms):
        try:
            return sandbox.extract(html, engine, timeout_ms, utf8, one_cpu)  # lone surrogates replaced as below
        except sandbox.SandboxError as err:
            raise ExtractionError(err.reason, err.detail) from None
    try:
        return sandbox.run_engine(html, engine)
    except (TypeError, UnicodeEncodeError):  # a str holding lone surrogates: extract it with them as '?'
        clean = html.encode("utf-8", "replace").decode("utf-8")
        if clean == html:
            raise
        return extract_main_text(clean, engine, timeout_ms)
    except BaseException as err:
        if sandbox.is_panic(err):
            raise ExtractionError("extract_error", repr(err)[:300]) from None
        raise


def page_html(page: dict, max_bytes: int) -> tuple[str | None, str]:
    """A read-stage page's HTML: its `html`, else its `payload` decoded with its `http_charset`; or
    (None, why not): "too_large" over `max_bytes` (bytes or characters), "undecodable"."""
    html = page.get("html")
    if html is None:
        payload = page.get("payload") or b""
        if len(payload) > max_bytes:
            return None, "too_large"
        try:
            html = decode_html(payload, page.get("http_charset") or "").text
        except ExtractionError:
            return None, "undecodable"
    if len(html) > max_bytes:
        return None, "too_large"
    return html, ""
