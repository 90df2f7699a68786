"""Seed corpora for the fuzz targets, built at run time from the real fixtures in tests/data.

Deliberately independent of the product code (no extract.warc import): the WARC members are split
with zlib and the records parsed with a few regular expressions, so the pool the WARC oracle checks
against cannot share a bug with the reader it checks.
"""

from __future__ import annotations

import functools
import io
import random
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
WARC_FILES = sorted([*(DATA / "warc").glob("*.warc*.gz"), *(DATA / "images").glob("*.warc*.gz")])

_HEADER = re.compile(rb"^([A-Za-z0-9-]+):[ \t]*(.*?)[ \t]*\r?$", re.M)
_CHARSET = re.compile(rb"charset\s*=\s*[\"']?([A-Za-z0-9_:.\-]+)", re.I)


@dataclass(frozen=True)
class Record:
    """One real WARC record of a fixture: its gzip member as stored and its uncompressed bytes."""

    source: str
    member: bytes          # the gzip member, byte for byte from the fixture
    raw: bytes             # the uncompressed record (header, block, trailing CRLFCRLF)
    warc_type: str
    record_id: str
    content_length: int
    header_end: int        # offset of the blank line that ends the WARC header

    @property
    def block(self) -> bytes:
        start = self.header_end + 4
        return self.raw[start:start + self.content_length]


def gzip_members(raw: bytes) -> list[tuple[bytes, bytes]]:
    """(member bytes, decompressed bytes) of every gzip member of an intact file."""
    out, pos, view = [], 0, memoryview(raw)
    while pos < len(raw):
        d = zlib.decompressobj(31)
        data = d.decompress(view[pos:])
        if not d.eof:
            raise ValueError(f"truncated gzip member at {pos}")
        end = len(raw) - len(d.unused_data)
        out.append((raw[pos:end], data))
        pos = end
    return out


def headers(block: bytes) -> dict[str, str]:
    """Header lines of a WARC or HTTP header block, names lower-cased (first occurrence wins)."""
    out: dict[str, str] = {}
    for m in _HEADER.finditer(block):
        out.setdefault(m.group(1).decode("latin-1").lower(), m.group(2).decode("latin-1"))
    return out


def parse_record(source: str, member: bytes, raw: bytes) -> Record:
    end = raw.find(b"\r\n\r\n")
    h = headers(raw[:end])
    return Record(source, member, raw, h.get("warc-type", ""), h.get("warc-record-id", ""),
                  int(h.get("content-length", "0")), end)


@functools.lru_cache(maxsize=1)
def records() -> tuple[Record, ...]:
    """Every record of every fixture WARC (gzip-per-record files), in file order."""
    out = []
    for path in WARC_FILES:
        for member, raw in gzip_members(path.read_bytes()):
            out.append(parse_record(path.name, member, raw))
    return tuple(out)


def http_split(block: bytes) -> tuple[dict[str, str], bytes] | None:
    end = block.find(b"\r\n\r\n")
    if not block.startswith(b"HTTP/") or end < 0:
        return None
    return headers(block[:end]), block[end + 4:]


def http_bodies(kind: str) -> list[tuple[bytes, str]]:
    """(body, declared HTTP charset) of every 200 response whose Content-Type starts with `kind`."""
    out = []
    for rec in records():
        if rec.warc_type != "response":
            continue
        parsed = http_split(rec.block)
        if parsed is None:
            continue
        h, body = parsed
        ctype = h.get("content-type", "").lower()
        if ctype.startswith(kind) and body and "chunked" not in h.get("transfer-encoding", "").lower():
            m = _CHARSET.search(ctype.encode())
            out.append((body, m.group(1).decode() if m else ""))
    return out


# --- per-target seeds ---------------------------------------------------------------------------

SEED_MAX = 64 << 10  # keep single seeds small: libFuzzer mutates faster on short units


def seeds_warc_raw() -> list[bytes]:
    """Whole small fixtures, single members, uncompressed records and short runs of real records in
    each of the three containers (gzip per record, plain, whole-file gzip)."""
    recs = records()
    out = [p.read_bytes() for p in WARC_FILES if p.stat().st_size <= SEED_MAX]
    small = [r for r in recs if len(r.raw) <= 8 << 10]
    out += [r.member for r in small[::3]]
    out += [r.raw for r in small[1::6]]
    for i in range(0, len(small) - 3, 9):
        run = small[i:i + 3]
        out.append(b"".join(r.member for r in run))
        out.append(b"".join(r.raw for r in run))
        out.append(zlib.compress(b"".join(r.raw for r in run), 6, 31))
    return out


def seeds_warc_records() -> list[bytes]:
    """The structured target reads its input through atheris.FuzzedDataProvider, so any bytes are a
    valid input: deterministic random strings of a few lengths, plus the empty input."""
    rng = random.Random(20240601)
    return [b""] + [rng.randbytes(n) for n in (8, 16, 32, 48, 64, 96, 128, 192, 256) for _ in range(6)]


# Charset names the charset target can pick by index (first byte < 0xC0): WHATWG labels, Python
# aliases, and names a hostile server can send that Python knows but are not text encodings.
CHARSETS = (
    "", "utf-8", "utf8", "UTF-8", "iso-8859-1", "latin1", "windows-1252", "cp1252", "us-ascii", "ascii",
    "gbk", "gb2312", "gb18030", "big5", "big5-hkscs", "shift_jis", "sjis", "x-sjis", "euc-jp", "iso-2022-jp",
    "euc-kr", "ks_c_5601-1987", "koi8-r", "koi8-u", "windows-1251", "cp866", "iso-8859-2", "iso-8859-15",
    "windows-1250", "windows-1256", "windows-874", "tis-620", "utf-16", "utf-16le", "utf-16be",
    "utf-32", "utf-7", "x-user-defined", "replacement", "hz-gb-2312", "macintosh", "x-mac-cyrillic",
    "mbcs", "unicode", "ucs-2", "cp65001", "idna", "punycode", "unicode_escape", "raw_unicode_escape",
    "base64", "hex", "rot13", "zlib", "bz2", "uu", "quopri", "bogus", "utf-8;", " utf-8 ", "none", "auto",
)


def charset_input(payload: bytes, charset: str) -> bytes:
    """Encode (payload, http_charset) in the charset target's input format."""
    if charset in CHARSETS:
        return bytes([CHARSETS.index(charset)]) + payload
    name = charset.encode("latin-1", "replace")[:63]
    return bytes([0xC0 | len(name)]) + name + payload


def seeds_charset() -> list[bytes]:
    out = []
    pages = http_bodies("text/html")
    for body, charset in pages:
        out.append(charset_input(body[:SEED_MAX], charset.lower()))
    # the same real bytes under wrong or hostile declarations
    for i, (body, _) in enumerate(pages[:12]):
        out.append(charset_input(body[:4096], CHARSETS[(7 * i + 3) % len(CHARSETS)]))
        out.append(charset_input(body[:4096].decode("utf-8", "replace").encode("utf-16"), "utf-16"))
    for body, _ in http_bodies("text/plain")[:4]:
        out.append(charset_input(body[:SEED_MAX], ""))
    return out


def seeds_html() -> list[bytes]:
    out = [body[:SEED_MAX] for body, _ in http_bodies("text/html")]
    out += [r.block[:SEED_MAX] for r in records() if r.warc_type == "conversion"]
    return out


IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"RIFF", b"BM", b"II*\x00", b"MM\x00*")


def image_payloads() -> list[bytes]:
    return [body for body, _ in http_bodies("image/") if body.startswith(IMAGE_MAGIC)]


def seeds_image() -> list[bytes]:
    """The fixture's real images (the first input byte picks the decoder config, see targets.image),
    plus the largest photo re-encoded into the allowed formats the fixture lacks (WEBP, BMP, TIFF,
    AVIF), animated GIF and EXIF-rotated JPEG, so every decoder plugin starts with a valid file."""
    from PIL import Image

    imgs = image_payloads()
    out = [bytes([i % 4]) + b for i, b in enumerate(imgs) if len(b) <= SEED_MAX]
    photo = max((b for b in imgs if b.startswith(b"\xff\xd8\xff")), key=len, default=None)
    if photo is None:
        return out
    im = Image.open(io.BytesIO(photo)).convert("RGB")
    small = im.resize((max(1, im.width // 2), max(1, im.height // 2)))
    variants = [("WEBP", {}), ("BMP", {}), ("TIFF", {}), ("TIFF", {"compression": "tiff_lzw"}),
                ("AVIF", {}), ("PNG", {}), ("GIF", {})]
    for fmt, kw in variants:
        buf = io.BytesIO()
        try:
            small.save(buf, fmt, **kw)
        except (KeyError, OSError, ValueError):  # a Pillow build without that encoder
            continue
        out.append(bytes([1]) + buf.getvalue())
    frames = [small.convert("P"), small.rotate(90).convert("P")]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    out.append(bytes([1]) + buf.getvalue())
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    small.save(buf, "JPEG", exif=exif)
    out.append(bytes([1]) + buf.getvalue())
    rgba = small.convert("RGBA")
    buf = io.BytesIO()
    rgba.save(buf, "PNG")
    out.append(bytes([3]) + buf.getvalue())
    return out


def seeds_text_rules() -> list[bytes]:
    """Extracted texts the quality stage judges, each in a language TEXT_LANGS picks (first byte): the
    fixtures' HTML pages through resiliparse's main-content extraction (the pipeline's extractor; its
    flags do not matter for seeds), and the boilerplate fixtures' pages (menus, galleries, ad labels)."""
    import gzip

    from resiliparse.extract.html2text import extract_plain_text

    pages = [body.decode("utf-8", "replace") for body, _ in http_bodies("text/html")]
    pages += [gzip.decompress(f.read_bytes()).decode("utf-8", "replace")
              for f in sorted((DATA / "boilerplate").glob("*.html.gz"))]
    out = []
    for i, html in enumerate(pages):
        text = extract_plain_text(html, main_content=True).strip()
        if text:
            out.append(bytes([i % 8]) + text.encode("utf-8")[:SEED_MAX])
    return out


def seeds_pages() -> list[bytes]:
    """Pages with images for the DOM walks (interleaved, image_refs): the interleaved fixtures (figures,
    tables, lists, chrome), the boilerplate fixtures and the WARC fixtures' HTML, and small copies of
    the hostile pages (tests/hostile_pages.py: galleries, bare images, nested figures, wide tables)."""
    import gzip

    from tests import hostile_pages

    out = [f.read_bytes()[:SEED_MAX] for f in sorted((DATA / "interleaved").glob("*.html"))]
    out += [gzip.decompress(f.read_bytes())[:SEED_MAX] for f in sorted((DATA / "boilerplate").glob("*.html.gz"))]
    out += [body[:SEED_MAX] for body, _ in http_bodies("text/html") if b"<img" in body.lower()]
    out += [page.encode() for page in (hostile_pages.gallery(40), hostile_pages.bare_images(200),
                                       hostile_pages.nested_figures(60), hostile_pages.wide_table(40, 10))]
    return out


def seeds_pdf() -> list[bytes]:
    """The PDF fixtures whole (text layers, images, columns, encrypted, broken)."""
    return [f.read_bytes() for f in sorted((DATA / "pdf").glob("*.pdf"))]


SEEDS = {
    "warc_raw": seeds_warc_raw,
    "warc_records": seeds_warc_records,
    "charset": seeds_charset,
    "html": seeds_html,
    "image": seeds_image,
    "text_rules": seeds_text_rules,
    "interleaved": seeds_pages,
    "image_refs": seeds_pages,
    "pdf": seeds_pdf,
}


def write_seeds(target: str, directory: Path) -> int:
    """Write the target's seeds into `directory` (named by content hash); returns how many."""
    import hashlib

    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for data in SEEDS[target]():
        (directory / f"seed-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
        n += 1
    return n
