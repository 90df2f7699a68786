"""Fuzz targets (atheris / libFuzzer): each `TestOneInput(data: bytes)` raises on a crash or an oracle
violation and returns normally otherwise. Run them with `python -m tests.fuzz.run <target>` (which
instruments the product modules); the pytest replay of tests/fuzz/regressions/ calls them directly.

Targets
- warc_raw      extract.warc.iter_records on the input as a file (seekable and not): never raises,
                terminates, yields only RawRecord / ReadError(non-empty reason), offsets in [-1, len].
- warc_records  the accounting oracle: the input (through atheris.FuzzedDataProvider) picks real
                records of tests/data, damages some (truncate, flip bytes, insert junk, wrong
                Content-Length), adds junk between them, and picks the container (gzip per record,
                plain, whole-file gzip); every undamaged record must come out exactly once.
- charset       extract.html.decode_html: only ExtractionError; the text is a str the extractor can
                take (UTF-8-encodable: no lone surrogates, which Python's utf-7 codec produces).
- html          extract.html.extract_main_text (resiliparse, 2 s guard): only ExtractionError, a str.
- image         filters.image.decode_image: a DecodedImage or a reason string, never an exception.
- text_rules    the quality stage on an extracted text: filters.clean.clean_for_rules (every line step,
                the boilerplate model on) then filters.quality.QualityFilter: never raises, terminates,
                removes whole lines only (every output line is an input line), finite values; the compiled
                tokenizer and word statistics give their Python oracles' results.
- interleaved   extract.interleaved.linearise_bounded (2 s): a reason-coded SandboxError naming the step,
                or a document in which every <img> of the page is an image node or a chrome image
                exactly once, image nodes in DOM order, text nodes stripped and non-empty.
- image_refs    extract.images.extract_images_bounded (2 s): a reason-coded SandboxError naming the step,
                or one ref per <img> in DOM order, contexts within their length, a known rule reason.
- pdf           extract.sandbox.parse_pdf (the parser's child, 5 s, 512 MB): a PDF reason, or a result
                whose nodes are text or image nodes on pages of the document.
"""

from __future__ import annotations

import io
import math
import re
import zlib
from collections import Counter
from types import SimpleNamespace

import atheris

from extract import sandbox
from extract.html import ExtractionError, decode_html, extract_main_text
from extract.images import check_image_ref, extract_images_bounded, may_hold_images
from extract.interleaved import linearise_bounded
from extract.warc import RawRecord, ReadError, iter_records
from filters.clean import clean_for_rules
from filters.image import DecodedImage, decode_image
from filters import quality
from filters.quality import QualityConfig, QualityFilter
from tests.fuzz import seeds


class OracleViolation(AssertionError):
    """A result the contract forbids (as opposed to an exception escaping the product code)."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


def _check(cond: bool, kind: str, detail: str = "") -> None:
    if not cond:
        raise OracleViolation(kind, detail)


# ------------------------------------------------------------------------------------------ WARC
class _Unseekable(io.RawIOBase):
    """A pipe-like stream (no seek, short reads), as from a network or a decompressor."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, b) -> int:
        n = min(len(b), len(self.data) - self.pos, 4093)
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


def read_all(data: bytes, seekable: bool, max_record_bytes: int) -> list:
    """Every item iter_records yields for `data`, checked against the reader's general invariants."""
    stream = io.BytesIO(data) if seekable else _Unseekable(data)
    items = []
    cap = len(data) + 16  # every unit costs at least one byte (plus `empty_file`): more is a runaway loop
    for item in iter_records(stream, max_record_bytes):
        items.append(item)
        _check(len(items) <= cap, "runaway", f"more than {cap} items from {len(data)} bytes")
        _check(type(item) in (RawRecord, ReadError), "bad_item_type", type(item).__name__)
        _check(type(item.offset) is int and -1 <= item.offset <= len(data), "offset_out_of_range",
               f"{item.offset!r} not in [-1, {len(data)}]")
        if type(item) is ReadError:
            _check(isinstance(item.reason, str) and item.reason != "", "empty_reason", repr(item))
        else:
            _check(isinstance(item.payload, bytes), "payload_not_bytes", type(item.payload).__name__)
    return items


def warc_raw(data: bytes) -> None:
    for seekable in (True, False):
        read_all(data, seekable, 64 << 20)


GZIP_MEMBERS, PLAIN, WHOLE_GZIP = "gzip_members", "plain", "whole_gzip"
CONTAINERS = (GZIP_MEMBERS, PLAIN, WHOLE_GZIP)
DOC_TYPES = {"response", "resource", "conversion", "revisit"}  # the types iter_records reports IDs of
DAMAGES = ("truncate", "flip", "junk", "content_length")
_CL = re.compile(rb"(\ncontent-length[ \t]*:[ \t]*)(\d{1,19})", re.I)
_ANY_CL = re.compile(rb"content-length[ \t]*:[ \t]*(\d{1,19})", re.I)
_VERSION = re.compile(rb"WARC/")


def _damage(b: bytes, kind: str, fdp) -> bytes:
    if kind == "truncate":
        return b[:fdp.ConsumeIntInRange(0, len(b) - 1)]
    if kind == "flip":
        out = bytearray(b)
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            out[fdp.ConsumeIntInRange(0, len(out) - 1)] ^= fdp.ConsumeIntInRange(1, 255)
        return bytes(out)
    if kind == "junk":
        i = fdp.ConsumeIntInRange(0, len(b))
        return b[:i] + (fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 64)) or b"\x00") + b[i:]
    raise ValueError(kind)


def _wrong_content_length(raw: bytes, fdp) -> bytes:
    m = _CL.search(raw, 0, raw.find(b"\r\n\r\n"))
    old = int(m.group(2))
    new = fdp.ConsumeIntInRange(0, 2 * old + 64)
    if new == old:
        new = old + 1
    return raw[:m.start(2)] + str(new).encode() + raw[m.end(2):]


class _Piece:
    __slots__ = ("data", "record", "damaged", "damage", "start", "end")

    def __init__(self, data: bytes, record, damage: str = ""):
        self.data, self.record, self.damage = data, record, damage
        self.damaged = bool(damage)
        self.start = self.end = 0


def _shadow_end(stream: bytes, p: _Piece) -> int:
    """How far a Content-Length-framed reader may legitimately read from a damaged piece of an
    uncompressed stream: to the end of the piece, or to the end of any block a WARC header starting
    in the piece declares (the header block may run on into the next record if its blank line was
    damaged away). Records that start before this may be swallowed by the damage; those after not.
    Junk without a version line claims nothing: a reader resynchronises on the next record's."""
    reach = p.end
    starts = [p.start + m.start() for m in _VERSION.finditer(p.data)]  # headers in the piece
    if p.record is not None:
        starts.append(p.start)  # a damaged record's own header, even with its version line damaged
    for s in starts:
        ends = [i for i in (stream.find(b"\r\n\r\n", s), stream.find(b"\n\n", s)) if i >= 0]
        header_end = min(ends) + 4 if ends else len(stream)
        lengths = [int(m.group(1)) for m in _ANY_CL.finditer(stream, s, header_end)]
        if p.record is not None:
            lengths.append(p.record.content_length)
        reach = max(reach, header_end + max(lengths, default=0) + 4)
    return reach


def build_warc(data: bytes):
    """The WARC file the structured input describes, and what reading it must give."""
    pool = seeds.records()
    fdp = atheris.FuzzedDataProvider(data)
    container = CONTAINERS[fdp.ConsumeIntInRange(0, 2)]
    seekable = fdp.ConsumeIntInRange(0, 3) != 0
    max_bytes = 64 << 20 if fdp.ConsumeIntInRange(0, 7) else fdp.ConsumeIntInRange(64, 1 << 17)
    pieces: list[_Piece] = []
    for _ in range(fdp.ConsumeIntInRange(1, 8)):
        rec = pool[fdp.ConsumeIntInRange(0, len(pool) - 1)]
        choice = fdp.ConsumeIntInRange(0, 2 * len(DAMAGES) - 1)  # half of the records stay intact
        kind = DAMAGES[choice - len(DAMAGES)] if choice >= len(DAMAGES) else ""
        if container == GZIP_MEMBERS:
            if kind == "content_length":
                piece = zlib.compress(_wrong_content_length(rec.raw, fdp), 1, 31)
            elif kind and fdp.ConsumeBool():  # damage the record, then compress it: a valid member
                piece = zlib.compress(_damage(rec.raw, kind, fdp), 1, 31)
            elif kind:                        # damage the compressed member
                piece = _damage(rec.member, kind, fdp)
            else:
                piece = rec.member
        elif kind == "content_length":
            piece = _wrong_content_length(rec.raw, fdp)
        else:
            piece = _damage(rec.raw, kind, fdp) if kind else rec.raw
        pieces.append(_Piece(piece, rec, kind))
        if fdp.ConsumeIntInRange(0, 7) == 7:  # junk between records
            junk = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 128)) or b"\x00"
            if container == GZIP_MEMBERS and fdp.ConsumeBool():
                junk = zlib.compress(junk, 1, 31)  # a valid gzip member that holds no record
            pieces.append(_Piece(junk, None, "junk_between"))
    pos = 0
    for p in pieces:
        p.start, pos = pos, pos + len(p.data)
        p.end = pos
    body = b"".join(p.data for p in pieces)
    truncate_at = None
    if container == WHOLE_GZIP:
        file = zlib.compress(body, 1, 31)
        if fdp.ConsumeIntInRange(0, 7) == 0:  # the whole file cut short
            truncate_at = fdp.ConsumeIntInRange(0, len(file) - 1)
            file = file[:truncate_at]
    else:
        file = body
    return container, seekable, max_bytes, pieces, body, file, truncate_at


def warc_records(data: bytes) -> None:
    container, seekable, max_bytes, pieces, body, file, truncate_at = build_warc(data)
    items = read_all(file, seekable, max_bytes)

    # Which undamaged records the reader must return. Gzip per record: every one (a member is
    # self-delimiting, so damage cannot spread). Uncompressed and whole-file gzip: those not within
    # the reach of a damaged header's Content-Length, and, if the file was cut, those inflated whole.
    readable_to = len(body)
    if truncate_at is not None:
        d = zlib.decompressobj(31)
        readable_to = len(d.decompress(file))
    shadow = 0
    required, copies, undamaged = [], Counter(), 0
    for p in pieces:
        if p.record is not None:
            copies[p.record.record_id] += 1
        if container != GZIP_MEMBERS and p.damaged:
            shadow = max(shadow, _shadow_end(body, p))
        if p.record is None or p.damaged:
            continue
        if container != GZIP_MEMBERS and (p.start < shadow or p.end > readable_to):
            continue
        undamaged += 1
        if len(p.record.raw) <= max_bytes:
            required.append(p)
    junk = b"".join(p.data for p in pieces if p.record is None)

    ctx = f"[{container}{'' if seekable else ', unseekable'}]"
    _check(len(items) >= undamaged, "too_few_units", f"{ctx} {len(items)} items < {undamaged} undamaged records")
    by_id, by_type, offsets = Counter(), Counter(), {}
    for item in items:
        if type(item) is RawRecord:
            by_type[item.warc_type] += 1
            if item.record_id:
                by_id[item.record_id] += 1
                offsets.setdefault(item.record_id, []).append(item.offset)
    need_id, need_type = Counter(), Counter()
    for p in required:
        if p.record.warc_type in DOC_TYPES:
            need_id[p.record.record_id] += 1
        else:
            need_type[p.record.warc_type] += 1
    for rid, n in need_id.items():
        _check(by_id[rid] >= n, "lost_record", f"{ctx} {rid} read {by_id[rid]}x, {n} undamaged copies")
    for rid, n in by_id.items():
        if rid not in copies:  # an ID a byte flip or junk made up: damage coming out as damage
            continue
        allowed = copies[rid] + junk.count(rid.encode())
        _check(n <= allowed, "record_read_twice", f"{ctx} {rid} read {n}x, {allowed} copies in the file")
    for rtype, n in need_type.items():
        _check(by_type[rtype] >= n, "lost_record", f"{ctx} {rtype}: {by_type[rtype]} read < {n} undamaged")
    # Offsets (the module's contract): a gzip member's start, or uncompressed the record's own offset;
    # whole-file gzip: its one member's, 0.
    for p in required:
        if p.record.warc_type in DOC_TYPES and need_id[p.record.record_id] == copies[p.record.record_id] == 1:
            want = 0 if container == WHOLE_GZIP else p.start
            _check(offsets[p.record.record_id] == [want], "wrong_offset",
                   f"{ctx} {p.record.record_id} at {offsets[p.record.record_id]}, expected [{want}]")


# --------------------------------------------------------------------------------------- charset
def charset_args(data: bytes) -> tuple[bytes, str]:
    """Input format: first byte < 0xC0 indexes seeds.CHARSETS; else its low 6 bits give the length of
    a charset name that follows (latin-1, as a hostile Content-Type header may carry). Then payload."""
    if not data:
        return b"", ""
    b0 = data[0]
    if b0 < 0xC0:
        return data[1:], seeds.CHARSETS[b0 % len(seeds.CHARSETS)]
    n = b0 & 0x3F
    return data[1 + n:], data[1:1 + n].decode("latin-1")


def charset(data: bytes) -> None:
    payload, http_charset = charset_args(data)
    try:
        out = decode_html(payload, http_charset)
    except ExtractionError as err:
        _check(isinstance(err.reason, str) and err.reason != "", "empty_reason", repr(err))
        return
    _check(isinstance(out.text, str), "text_not_str", type(out.text).__name__)
    _check(isinstance(out.charset, str) and out.charset != "", "no_charset", repr(out.charset))
    _check(isinstance(out.source, str) and out.source != "", "no_source", repr(out.source))
    try:  # the next stage (extract_main_text, resiliparse) takes UTF-8-encodable text only
        out.text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise OracleViolation("lone_surrogate", f"{out.charset} ({out.source}): {err}") from None


# ------------------------------------------------------------------------------------------ html
HTML_TIMEOUT_MS = 2000


def html(data: bytes) -> None:
    # Input format: UTF-8 (invalid bytes replaced); after a leading 0xFF byte (never valid UTF-8),
    # invalid bytes become lone surrogates instead, which decode_html can hand on too (Python's utf-7
    # codec decodes "+2AA-" to U+D800), so extraction must take any str.
    if data[:1] == b"\xff":
        text = data[1:].decode("utf-8", "surrogateescape")
    else:
        text = data.decode("utf-8", "replace")
    try:
        out = extract_main_text(text, engine="resiliparse", timeout_ms=HTML_TIMEOUT_MS)
    except ExtractionError as err:
        _check(isinstance(err.reason, str) and err.reason != "", "empty_reason", repr(err))
        return
    _check(isinstance(out, str), "text_not_str", type(out).__name__)


# ----------------------------------------------------------------------------------------- image
def image_cfg(b0: int):
    """The decoder rules the first input byte picks: bit 0 lifts the minimum side to 1 px and bit 1
    the aspect rule, so small and odd-shaped fuzzed images reach the pixel decoders too."""
    from pipelines.image_pairs import ImagePairsConfig

    cfg = ImagePairsConfig().decode_rules()
    if b0 & 1:
        cfg = cfg._replace(min_side=1)
    if b0 & 2:
        cfg = cfg._replace(max_aspect=1e9)
    return cfg


_CFGS: dict = {}
IMAGE_REASONS = {"image_too_large", "decompression_bomb", "not_an_image", "truncated", "decode_error",
                 "too_small", "bad_aspect"}


def image(data: bytes) -> None:
    if not data:
        return
    key = data[0] & 3
    cfg = _CFGS.get(key) or _CFGS.setdefault(key, image_cfg(key))
    payload = data[1:]
    out = decode_image(payload, cfg)
    if isinstance(out, str):
        _check(out in IMAGE_REASONS, "unknown_reason", out)
        return
    _check(type(out) is DecodedImage, "bad_result_type", type(out).__name__)
    _check(min(out.width, out.height) >= cfg.min_side, "size_rule", f"{out.width}x{out.height}")
    _check(max(out.width, out.height) <= cfg.max_aspect * min(out.width, out.height), "aspect_rule",
           f"{out.width}x{out.height}")
    _check(out.width * out.height <= cfg.max_pixels, "bomb_rule", f"{out.width}x{out.height}")
    _check(0 <= out.phash < 1 << 64 and out.frames >= 1, "bad_fields", repr(out))
    _check(out.format in cfg.formats or out.format == "MPO", "format_not_allowed", out.format)


# ------------------------------------------------------------------------------------ text rules
# The languages the first input byte picks: each family of rules (stop words, CJK n-grams and brackets,
# Hangul word length, Thai without spaces) and "" (no language identified).
TEXT_LANGS = ("en", "de", "zh", "ja", "ko", "th", "ru", "")
_QUALITY = None


def text_rules(data: bytes) -> None:
    # Input format: the first byte picks TEXT_LANGS[b % len]; the rest is the text (UTF-8, invalid bytes
    # replaced): what the extract stage hands the quality stage.
    global _QUALITY
    if _QUALITY is None:
        config = QualityConfig()
        _QUALITY = (config, QualityFilter(config))
    config, rules = _QUALITY
    lang = TEXT_LANGS[data[0] % len(TEXT_LANGS)] if data else ""
    text = data[1:].decode("utf-8", "replace")
    cleaned, removed = clean_for_rules(text, config.c4_line_filter, config.link_list_lines, True,
                                       config.rendering_max_copies, config.label_lines)
    _check(isinstance(cleaned, str), "text_not_str", type(cleaned).__name__)
    _check(all(isinstance(n, int) and n >= 0 for n in removed.values()), "bad_count", repr(removed))
    have = {line.strip() for line in text.split("\n")}
    new = [line for line in cleaned.split("\n") if line.strip() and line.strip() not in have]
    _check(not new, "line_not_in_input", repr(new[:1])[:200])
    failed, values = rules(cleaned, lang)
    _check(all(isinstance(r, str) and r for r in failed), "bad_reason", repr(failed))
    words = quality.tokenize_python(cleaned)  # the compiled tokenizer and statistics against their oracles
    _check(quality.tokenize(cleaned) == words, "tokenize_not_oracle", repr(cleaned[:200]))
    stop = rules._stop_words.get(lang)
    _check(quality.word_stats(words, stop) == quality.word_stats_python(words, stop), "word_stats_not_oracle",
           repr(cleaned[:200]))
    bad = {k: v for k, v in values.items() if not (isinstance(v, float) and math.isfinite(v))}
    _check(not bad, "value_not_finite", repr(bad)[:200])


# ------------------------------------------------------------------------------------ page steps
PAGE_URL = "https://example.org/dir/page.html"
PAGE_TIMEOUT_MS = 2000
PAGE_FAILURES = {"page_timeout", "page_error"}


def page_text(data: bytes) -> str:
    """The html target's input format: UTF-8 (invalid bytes replaced); after a leading 0xFF byte,
    invalid bytes become lone surrogates."""
    if data[:1] == b"\xff":
        return data[1:].decode("utf-8", "surrogateescape")
    return data.decode("utf-8", "replace")


def img_count(html: str) -> int:
    """How many <img> elements the page's DOM holds (counted apart from the steps under test)."""
    if not may_hold_images(html):
        return 0
    from resiliparse.parse.html import HTMLTree

    return len(HTMLTree.parse(sandbox._encodable(html)).document.query_selector_all("img"))


def _step_failed(err: sandbox.SandboxError, step: str) -> None:
    _check(err.reason in PAGE_FAILURES and err.detail.startswith(f"{step}: "), "bad_failure", str(err)[:200])


def interleaved(data: bytes) -> None:
    html = page_text(data)
    try:
        doc = linearise_bounded(html, PAGE_URL, PAGE_TIMEOUT_MS)
    except sandbox.SandboxError as err:
        _step_failed(err, "linearise")
        return
    positions = [n.image.position for n in doc.nodes if n.type == "image"]
    _check(positions == sorted(set(positions)), "images_out_of_dom_order", repr(positions[:20]))
    found = sorted(positions + [ref.position for ref in doc.chrome_images])
    n = img_count(html)
    _check(found == list(range(n)), "image_not_accounted", f"{n} <img>, found {found[:20]}")
    for node in doc.nodes:
        if node.type == "text":
            _check(node.text != "" and node.text == node.text.strip(), "bad_text_node", repr(node.text[:80]))
        else:
            _check(node.type == "image" and "\n" not in node.caption, "bad_image_node", repr(node)[:200])


_REF_CFG = SimpleNamespace(min_side=150, min_alt_chars=5, max_alt_chars=1000, alt_languages=None,
                           alt_lang_min_score=0.0)
REF_REASONS = {"no_src", "data_uri", "bad_scheme", "bad_url", "tracking_pixel", "icon_or_sprite", "declared_too_small",
               "missing_alt", "empty_alt", "filename_alt", "generic_alt", "alt_too_short", "alt_too_long"}
CONTEXT_CHARS = 200


def image_refs(data: bytes) -> None:
    html = page_text(data)
    try:
        refs = extract_images_bounded(html, PAGE_URL, CONTEXT_CHARS, PAGE_TIMEOUT_MS)
    except sandbox.SandboxError as err:
        _step_failed(err, "image_refs")
        return
    n = img_count(html)
    _check([r.position for r in refs] == list(range(n)), "image_not_accounted",
           f"{n} <img>, positions {[r.position for r in refs][:20]}")
    for ref in refs:
        _check(isinstance(ref.url, str) and (ref.alt is None or isinstance(ref.alt, str)), "bad_ref", repr(ref)[:200])
        _check(len(ref.context_before) <= CONTEXT_CHARS and len(ref.context_after) <= CONTEXT_CHARS,
               "context_too_long", repr(ref)[:200])
        reason = check_image_ref(ref, _REF_CFG)
        _check(reason is None or reason in REF_REASONS, "unknown_reason", repr(reason))


PDF_TIMEOUT_MS, PDF_MEMORY_MB, PDF_MAX_PAGES, PDF_MIN_IMAGE_SIDE = 5000, 512, 20, 150


def pdf(data: bytes) -> None:
    from pipelines.interleaved import PDF_REASONS

    try:
        result = sandbox.parse_pdf(data, PDF_TIMEOUT_MS, PDF_MEMORY_MB, PDF_MAX_PAGES, PDF_MIN_IMAGE_SIDE)
    except sandbox.SandboxError as err:
        _check(err.reason in PDF_REASONS, "unknown_reason", str(err)[:200])
        return
    reason, pages, nodes = result["reason"], result["pages"], result["nodes"]
    _check(reason is None or reason in PDF_REASONS, "unknown_reason", repr(reason))
    _check(isinstance(pages, int) and pages >= 0 and isinstance(nodes, list), "bad_result", repr(result)[:200])
    if reason in ("pdf_too_many_pages", "pdf_broken", "pdf_encrypted"):
        _check(nodes == [], "nodes_of_an_unread_pdf", f"{reason}: {len(nodes)} nodes")
    for node in nodes:
        _check(node["type"] in ("text", "image") and 1 <= node["page"] <= min(pages, PDF_MAX_PAGES),
               "bad_node", repr(node)[:200])
        if node["type"] == "text":
            _check(isinstance(node["text"], str) and node["text"].strip() != "", "bad_text_node", repr(node)[:200])
        elif reason is None:
            _check(isinstance(node["data"], bytes) and node["data"] and isinstance(node["format"], str),
                   "image_without_data", repr({k: v for k, v in node.items() if k != "data"})[:200])


TARGETS = {
    "warc_raw": warc_raw,
    "warc_records": warc_records,
    "charset": charset,
    "html": html,
    "image": image,
    "text_rules": text_rules,
    "interleaved": interleaved,
    "image_refs": image_refs,
    "pdf": pdf,
}


def describe_warc(data: bytes) -> str:
    """What a warc_records input builds and what the reader gives (for reading a saved failure)."""
    container, seekable, max_bytes, pieces, body, file, truncate_at = build_warc(data)
    lines = [f"container={container} seekable={seekable} max_record_bytes={max_bytes} file={len(file)} bytes"
             + (f" cut at {truncate_at}" if truncate_at is not None else "")]
    for p in pieces:
        what = f"{p.record.source} {p.record.warc_type} {p.record.record_id}" if p.record else "junk"
        lines.append(f"  piece [{p.start}, {p.end}) {p.damage or 'intact'}: {what}")
    stream = io.BytesIO(file) if seekable else _Unseekable(file)
    try:
        for item in iter_records(stream, max_bytes):
            if type(item) is RawRecord:
                lines.append(f"  -> RawRecord {item.warc_type} {item.record_id or '-'} @{item.offset}")
            else:
                lines.append(f"  -> ReadError {item.reason} @{item.offset} {item.detail[:80]!r}")
    except BaseException as exc:  # noqa: BLE001
        lines.append(f"  -> raised {exc!r}")
    return "\n".join(lines)
