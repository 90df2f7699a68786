"""Robust WARC / WET record reading: every byte of a file ends in a record or a reason-coded unit.

Three containers, as they occur in the wild:
- **gzip per record** (Common Crawl; the WARC 1.1 standard's Annex D recommends it): a file is a
  sequence of independent gzip members. The reader splits the members itself (zlib, streaming) and
  frames each one's records, so a corrupt or truncated member costs exactly one reason-coded unit,
  and a record's offset is the start of the member it was inflated from. (fastwarc reading the whole
  file is 2-3 times faster, but it reports, after a damaged member, the position where it began
  searching for the next record, and skips what it cannot parse without a sign: its positions cannot
  be trusted without inflating every member a second time.)
- **multi-record gzip members**, including **whole-file gzip** (`gzip file.warc`): a member is
  inflated as a stream and framed like an uncompressed file; its records share the member's offset,
  the only position one can seek to.
- **uncompressed** WARC/WET: framed record by record (version line, header block, Content-Length,
  trailer), each record's bytes parsed by fastwarc. A damaged version line, a Content-Length that
  does not end at the next record, or junk between records costs one unit (with the bytes skipped),
  and reading resynchronises on the next `WARC/1.x` version line.

Offsets are gzip member offsets (what the Common Crawl index stores) or, uncompressed, the record's
byte offset. Every unit yields one `RawRecord` or one `ReadError`, so the read stage can prove
`in = out + sum(dropped)`; `ReadError.skipped` says how many bytes the damaged unit cost (compressed
bytes for a gzip member, decompressed bytes inside one).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
# zlib's API and messages on zlib-ng's inflate, ~2x faster: 0.47 -> ~0.23 ms for an average real page of
# scrapinghub's set (174 kB), where CPython's zlib made our reader 3x slower than fastwarc's
from zlib_ng import zlib_ng as zlib

GZIP_MAGIC = b"\x1f\x8b\x08"
READ_CHUNK = 1 << 16
FIRST_PIECE = 1 << 11  # compressed bytes first fed to zlib per member
# A member that has inflated over this many times its compressed size and holds junk longer than the
# record cap is a decompression bomb (deflate's limit is about 1032:1; WARC text inflates 3-10 times).
BOMB_RATIO = 100
SNIFF_BYTES = 1 << 16  # read to tell gzip from plain, also when the first gzip header is damaged
MAX_HEADER_BYTES = 1 << 16  # a header block longer than this is damage, not a header
# The version line that starts a record (WARC 1.0/1.1, and the 0.17/0.18 drafts old crawls used).
VERSION_LINE = re.compile(rb"WARC/(?:1\.[01]|0\.1[78])\r?\n")
VERSION_LINE_MAX = 11
CONTENT_LENGTH = re.compile(rb"\ncontent-length[ \t]*:[ \t]*(\d{1,19})[ \t]*\r?\n", re.I)
BLANK = b"\r\n"


@dataclass
class RawRecord:
    """One parsed WARC record; `payload` is the HTTP body (or the block for non-HTTP records)."""

    warc_type: str
    record_id: str
    url: str
    offset: int
    date: str = ""
    http_status: int | None = None
    http_content_type: str = ""
    http_charset: str = ""
    identified_type: str = ""
    block_content_type: str = ""
    warc_truncated: str = ""
    x_robots_tag: str = ""
    payload: bytes = b""


@dataclass
class ReadError:
    """A unit of the file that could not be read as a record: why, where it began, and how many
    bytes it cost."""

    reason: str
    offset: int
    detail: str = ""
    skipped: int = 0


def _mime(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


_DOCUMENT_TYPES = WarcRecordType.response | WarcRecordType.resource | WarcRecordType.conversion | WarcRecordType.revisit


def _raw_record(rec, pos: int, max_payload: int) -> RawRecord | ReadError:
    """A fastwarc record as a RawRecord (or a ReadError). Records that cannot hold a document
    (request, metadata, warcinfo) are only typed: parsing their headers would cost more than
    everything else the reader does."""
    rtype = rec.record_type
    if not rtype & _DOCUMENT_TYPES:
        if str(rtype) == "unknown" and not rec.headers.get("WARC-Record-ID"):
            return ReadError("bad_warc_header", pos, "no WARC-Type / WARC-Record-ID")
        return RawRecord(warc_type=str(rtype), record_id="", url="", offset=pos)
    if rec.content_length > max_payload:
        return ReadError("record_too_large", pos, f"{rec.content_length} bytes", rec.content_length)
    headers = rec.headers
    raw = RawRecord(
        warc_type=str(rtype),
        record_id=rec.record_id or "",
        url=headers.get("WARC-Target-URI") or "",
        offset=pos,
        date=headers.get("WARC-Date") or "",
        identified_type=_mime(headers.get("WARC-Identified-Payload-Type")),
        block_content_type=_mime(headers.get("Content-Type")),
        warc_truncated=headers.get("WARC-Truncated") or "",
    )
    if raw.block_content_type.startswith("application/http"):
        rec.parse_http(strict_mode=False)
        raw.http_status = rec.http_headers.status_code
        raw.http_content_type = _mime(rec.http_content_type)
        raw.http_charset = (rec.http_charset or "").lower()
        raw.x_robots_tag = rec.http_headers.get("X-Robots-Tag") or ""
    raw.payload = rec.reader.read()
    return raw


def _parse_framed(block: bytes, pos: int, max_payload: int) -> RawRecord | ReadError:
    """Parse the bytes of exactly one framed record with fastwarc."""
    try:
        return _raw_record(WarcRecord.from_bytes(block), pos, max_payload)
    except BaseException as exc:  # fastwarc raises (or panics) on unparseable input: count it
        _reraise_interrupts(exc)
        return ReadError("bad_warc_header", pos, repr(exc)[:200], len(block))


class _ReadAhead:
    """A byte buffer over `read(n)`: `buf` holds the stream's bytes from position `buf_pos` on."""

    def __init__(self, read, start: int = 0):
        self.read, self.buf, self.buf_pos, self.eof = read, bytearray(), start, False

    def fill(self) -> bool:
        """Append the next chunk; False at the end of the stream."""
        if self.eof:
            return False
        chunk = self.read(READ_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def have(self, n: int) -> bool:
        while len(self.buf) < n:
            if not self.fill():
                return False
        return True

    def consume(self, n: int) -> None:
        del self.buf[:n]
        self.buf_pos += n


# --------------------------------------------------------------------------- uncompressed framing
class _Framer(_ReadAhead):
    """Splits an uncompressed WARC stream into records. `read(n)` supplies the bytes (a file, or a
    gzip member being inflated). With `offset` set (a gzip member's), every unit reports it; else each
    unit reports its own byte offset. `source_damaged()` tells whether the source ended early (a
    corrupt or truncated member): an incomplete record at its end is then the member's loss, which
    the caller reports, not a unit of its own. When `is_bomb(junk bytes)` says a stretch of junk is a
    decompression bomb's, the framing ends (`abandoned`) instead of inflating it to its end."""

    def __init__(self, read, max_record_bytes: int, offset: int | None = None,
                 source_damaged=lambda: False, is_bomb=lambda junk: False):
        super().__init__(read)
        self.max_record_bytes, self.offset = max_record_bytes, offset
        self.source_damaged, self.is_bomb = source_damaged, is_bomb
        self.abandoned = False

    def _where(self, start: int) -> int:
        """The offset a unit reports: the member's, else its own."""
        return start if self.offset is None else self.offset

    def _unit(self, reason: str, start: int, detail: str, cost: int) -> ReadError:
        detail = f"{detail}; {cost} bytes skipped" if detail else f"{cost} bytes skipped"
        return ReadError(reason, self._where(start), detail, cost)

    def _blank_then(self, i: int) -> int | None:
        """Index of the first byte at or after `i` that is not CR/LF (reading ahead), None at EOF."""
        while True:
            while i < len(self.buf) and self.buf[i] in BLANK:
                i += 1
            if i < len(self.buf):
                return i
            if not self.fill():
                return None

    def _starts_record(self, i: int) -> bool:
        self.have(i + VERSION_LINE_MAX)
        return VERSION_LINE.match(self.buf, i) is not None

    def __iter__(self) -> Iterator[RawRecord | ReadError]:
        while True:
            first = self._blank_then(0)
            if first is None:
                return
            self.consume(first)
            start = self.buf_pos
            if not self._starts_record(0):
                yield self._skip_to_next(start, "not_warc_data", "", 0)
            else:
                yield from self._record(start)
            if self.abandoned:
                return

    def _record(self, start: int) -> Iterator[RawRecord | ReadError]:
        header_end = self._header_end()
        if header_end is None:
            if self.eof and self.source_damaged():
                self.consume(len(self.buf))  # the member broke off inside this header: its loss
            else:
                yield self._skip_to_next(start, "bad_warc_header", "no end of header block", 1)
            return
        m = CONTENT_LENGTH.search(self.buf, 0, header_end)
        if m is None:
            yield self._skip_to_next(start, "bad_warc_header", "no Content-Length", 1)
            return
        length = int(m.group(1))
        if length > self.max_record_bytes:
            unit = self._skip_block(start, header_end, length)
            if unit is not None:
                yield unit
            return
        end = header_end + length
        if not self.have(end):
            if self.source_damaged():
                self.consume(len(self.buf))  # the member broke off inside this record: its loss
            else:
                yield self._skip_to_next(start, "truncated_record", f"Content-Length {length}", 1)
            return
        if not self._ends_block(end):
            if self.eof and self.source_damaged():
                self.consume(len(self.buf))  # it broke off inside the next record
                return
            yield self._skip_to_next(start, "bad_content_length", f"Content-Length {length}", 1)
            return
        item = _parse_framed(bytes(self.buf[:end]), self._where(start),
                             self.max_record_bytes)
        self.consume(end)
        yield item

    def _ends_block(self, end: int) -> bool:
        """Whether a block of the declared length ends at `end`: the standard's CRLF CRLF trailer
        (whatever follows is the next unit's business), or, from writers that deviate, blank bytes up
        to the next version line or the end of the stream."""
        self.have(end + 4)
        if self.buf[end:end + 4] == b"\r\n\r\n":
            return True
        nxt = self._blank_then(end)
        return nxt is None or self._starts_record(nxt)

    def _header_end(self) -> int | None:
        """Index just past the blank line that ends the header block at buf[0], or None."""
        searched = 0
        while True:
            crlf = self.buf.find(b"\r\n\r\n", max(searched - 3, 0), MAX_HEADER_BYTES)
            # writers that end header lines with bare LF: only before a CRLF end (keeps the scan short)
            lf = self.buf.find(b"\n\n", max(searched - 1, 0), crlf if crlf >= 0 else MAX_HEADER_BYTES)
            if lf >= 0:
                return lf + 2
            if crlf >= 0:
                return crlf + 4
            searched = len(self.buf)
            if searched >= MAX_HEADER_BYTES or not self.fill():
                return None

    def _skip_to_next(self, start: int, reason: str, detail: str, search_from: int) -> ReadError:
        """One damaged unit from `start` to the next version line (or the end of the stream),
        consumed as it is searched so junk is never held in memory."""
        cost = 0
        while True:
            m = VERSION_LINE.search(self.buf, search_from)
            if m:
                cost += m.start()
                self.consume(m.start())
                return self._unit(reason, start, detail, cost)
            keep = min(len(self.buf), VERSION_LINE_MAX - 1)  # a version line may straddle two reads
            cost += len(self.buf) - keep
            self.consume(len(self.buf) - keep)
            search_from = 0
            if self.is_bomb(cost):
                self.abandoned = True
                return self._unit(reason, start, f"{detail}; gave up".lstrip("; "), cost)
            if not self.fill():
                cost += len(self.buf)
                self.consume(len(self.buf))
                return self._unit(reason, start, detail, cost)

    def _skip_block(self, start: int, header_end: int, length: int) -> ReadError | None:
        """A record over the size cap: its block is streamed past, never held. None when the source
        broke off inside it (the member's loss, which the caller reports)."""
        remaining = header_end + length
        while remaining > 0 and (self.buf or self.fill()):
            n = min(remaining, len(self.buf))
            self.consume(n)
            remaining -= n
        if remaining > 0 and self.source_damaged():
            return None
        return ReadError("record_too_large", self._where(start),
                         f"{length} bytes", header_end + length)


# ---------------------------------------------------------------------------------- gzip members
class _Member:
    """One gzip member inflated on demand (`read`), from the compressed bytes of `_Members`."""

    def __init__(self, members: "_Members", start: int):
        self.members, self.start = members, start
        self.inflater = zlib.decompressobj(31)
        self.fed = 0            # compressed bytes of this member handed to zlib
        self.pending = b""      # inflated bytes not yet read
        self.error = ""         # "corrupt_gzip_member:<zlib message>" or "truncated_gzip_member"
        self.inflated = 0
        self.pieces = 0         # compressed pieces fed so far (each twice the size of the last)

    @property
    def done(self) -> bool:
        return self.inflater.eof or bool(self.error)

    def read(self, n: int) -> bytes:
        while not self.pending and not self.done:
            self._inflate()
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def _inflate(self) -> None:
        m = self.members
        if self.inflater.unconsumed_tail:
            piece = self.inflater.unconsumed_tail
        else:
            offset = self.start - m.buf_pos + self.fed
            if offset >= len(m.buf) and not m.fill():
                self.error = "truncated_gzip_member"
                return
            # Most members are a few KB: feed small pieces first, so that the bytes of the members
            # after this one are not copied into zlib's unused_data for every member.
            size = min(FIRST_PIECE << self.pieces, READ_CHUNK)
            with memoryview(m.buf) as view:
                piece = bytes(view[offset:offset + size])
            self.fed += len(piece)
            self.pieces += 1
        try:
            self.pending = self.inflater.decompress(piece, READ_CHUNK)
        except zlib.error as exc:
            self.error = f"corrupt_gzip_member:{exc}"
            return
        self.inflated += len(self.pending)

    def end(self) -> int:
        """File offset just past this member (inflating whatever the framer left)."""
        while not self.done:
            self.pending = b""
            self._inflate()
        return self.start + self.fed - len(self.inflater.unused_data)


class _Members(_ReadAhead):
    """Streams a gzip file member by member, from file offset `start` (the stream is there)."""

    def __init__(self, stream: BinaryIO, start: int = 0):
        super().__init__(stream.read, start)

    def drop_before(self, pos: int) -> None:
        self.consume(pos - self.buf_pos)

    def next_magic(self, after: int) -> int | None:
        """File offset of the next gzip header after `after`, reading ahead as needed."""
        search_from = after + 1
        while True:
            i = self.buf.find(GZIP_MAGIC, max(search_from - self.buf_pos, 0))
            if i >= 0:
                return self.buf_pos + i
            search_from = max(self.buf_pos + len(self.buf) - len(GZIP_MAGIC) + 1, search_from)
            self.drop_before(max(self.buf_pos, search_from - len(GZIP_MAGIC)))
            if not self.fill():
                return None

    def at(self, pos: int, n: int) -> bytes:
        while len(self.buf) < pos - self.buf_pos + n and self.fill():
            pass
        return bytes(self.buf[pos - self.buf_pos:pos - self.buf_pos + n])


def _one_record_member(members: _Members, pos: int,
                       max_record_bytes: int) -> tuple[RawRecord | ReadError, int] | None:
    """(its unit, the file offset past it) when the gzip member at `pos` inflates without error to exactly
    one framed record, CR/LF bytes around it aside (Common Crawl's files hold nothing else); else None,
    and the member takes the general path (`_Member` and `_Framer`), which yields the same unit for
    such a member: the same version line, header end, Content-Length and block, read in one go."""
    inflater = zlib.decompressobj(31)
    out, fed, pieces, inflated = [], 0, 0, 0
    while not inflater.eof:
        if inflater.unconsumed_tail:
            piece = inflater.unconsumed_tail
        else:
            offset = pos - members.buf_pos + fed
            if offset >= len(members.buf) and not members.fill():
                return None  # truncated
            size = min(FIRST_PIECE << pieces, READ_CHUNK)  # as `_Member`: small pieces first
            with memoryview(members.buf) as view:
                piece = bytes(view[offset:offset + size])
            fed += len(piece)
            pieces += 1
        try:
            chunk = inflater.decompress(piece, READ_CHUNK)
        except zlib.error:
            return None  # corrupt
        inflated += len(chunk)
        if inflated > max_record_bytes + MAX_HEADER_BYTES:
            return None  # no record under the cap: too large, or a bomb
        out.append(chunk)
    data = b"".join(out)
    start = len(data) - len(data.lstrip(BLANK))
    if VERSION_LINE.match(data, start) is None:
        return None
    header_max = start + MAX_HEADER_BYTES
    crlf = data.find(b"\r\n\r\n", start, header_max)
    lf = data.find(b"\n\n", start, crlf if crlf >= 0 else header_max)  # as `_Framer._header_end`
    if lf < 0 and crlf < 0:
        return None
    header_end = lf + 2 if lf >= 0 else crlf + 4
    m = CONTENT_LENGTH.search(data, start, header_end)
    if m is None:
        return None
    length = int(m.group(1))
    end = header_end + length
    if length > max_record_bytes or end > len(data) or data[end:].strip(BLANK):
        return None  # over the cap, cut short, or more than one record
    return _parse_framed(data[start:end], pos, max_record_bytes), pos + fed - len(inflater.unused_data)


def _gzip_records(stream: BinaryIO, max_record_bytes: int, start: int) -> Iterator[RawRecord | ReadError]:
    """Member by member from file offset `start`: each member's records, or one unit per damage."""
    members = _Members(stream, start)
    pos = start
    while True:
        members.drop_before(pos)
        head = members.at(pos, len(GZIP_MAGIC))
        if not head:
            return
        if head != GZIP_MAGIC:
            nxt = members.next_magic(pos)
            end = nxt if nxt is not None else members.buf_pos + len(members.buf)
            yield ReadError("not_gzip_data", pos, f"{end - pos} bytes skipped", end - pos)
            if nxt is None:
                return
            pos = nxt
            continue
        one = _one_record_member(members, pos, max_record_bytes)
        if one is not None:  # what the framing below yields for such a member
            item, pos = one
            yield item
            continue
        member = _Member(members, pos)
        framer = _Framer(member.read, max_record_bytes, pos, lambda: bool(member.error),
                         is_bomb=lambda junk: junk > max_record_bytes and member.inflated > BOMB_RATIO * member.fed)
        # The framer's damage units wait: a corrupt member's garbage is its own single unit; a truncated
        # member's units before the cut are real (the framer reports nothing for the cut record itself).
        records, held = 0, []
        for item in framer:
            if isinstance(item, ReadError):
                held.append(item)
                continue
            yield from held
            held = []
            records += 1
            yield item
        if framer.abandoned and not member.error:  # a decompression bomb's junk: stop inflating it
            yield from held
            nxt = members.next_magic(pos)
            if nxt is None:
                return
            pos = nxt
            continue
        end = member.end()
        if member.error:  # corrupt, or cut off (at the end of the file, or by the next member)
            reason, _, detail = member.error.partition(":")
            if reason == "truncated_gzip_member":  # what inflated before the cut is the file's own bytes
                yield from held
            nxt = members.next_magic(pos)
            skipped = (nxt if nxt is not None else members.buf_pos + len(members.buf)) - pos
            yield ReadError(reason, pos, detail, skipped)
            if nxt is None:
                return
            pos = nxt
            continue
        yield from held
        if records == 0 and not held:
            yield ReadError("empty_gzip_member", pos, "", end - pos)
        pos = end


def iter_records(stream: BinaryIO, max_record_bytes: int = 64 << 20) -> Iterator[RawRecord | ReadError]:
    """Yield every record (or read error) of a WARC/WET file: gzip per record, multi-record or
    whole-file gzip, or uncompressed. A file with no unit at all (empty) yields `empty_file`."""
    head = b""
    while len(head) < SNIFF_BYTES:  # a raw stream may return less than asked for
        chunk = stream.read(SNIFF_BYTES - len(head))
        if not chunk:
            break
        head += chunk
    if stream.seekable():
        stream.seek(0)
        rest = stream
    else:
        rest = io.BufferedReader(_Prepend(head, stream))
    units = 0
    if head.startswith(GZIP_MAGIC[:2]) or _gzip_after_damage(head):
        items = _gzip_records(rest, max_record_bytes, 0)
    else:
        items = _Framer(rest.read, max_record_bytes)
    for item in items:
        units += 1
        yield item
    if units == 0:
        yield ReadError("empty_file", 0)


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # never in WARC header text; common in deflate data


def _gzip_after_damage(head: bytes) -> bool:
    """A file that does not start with a gzip header is still gzip (its first member was damaged) when
    a member that inflates to a WARC record begins before the first version line, or when its first
    bytes hold no version line at all and are binary: deflate output is near-uniform bytes, one in
    nine a control byte, where a plain WARC starts with header text, in which a damaged byte or two
    may be control bytes but not one in 32. A plain WARC may hold gzip bytes too, as a gzip-encoded
    HTTP body, but those inflate to the body, not to a record."""
    version = VERSION_LINE.search(head)
    if version is None:
        start = head[:256]
        return len(_CONTROL.findall(start)) >= max(2, len(start) // 32)
    magic = head.find(GZIP_MAGIC, 0, version.start())
    while magic >= 0:
        try:
            if VERSION_LINE.match(zlib.decompressobj(31).decompress(head[magic:], 64)):
                return True
        except zlib.error:
            pass
        magic = head.find(GZIP_MAGIC, magic + 1, version.start())
    return False


def _reraise_interrupts(exc: BaseException) -> None:
    """fastwarc's Rust panics derive from BaseException; everything else of that kind must propagate."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        raise exc


class _Prepend(io.RawIOBase):
    """Puts back the bytes sniffed from the head of a stream."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self.head, self.stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.head:
            n = min(len(b), len(self.head))
            b[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.stream.read(len(b))
        b[: len(data)] = data
        return len(data)


def member_offsets(raw: bytes) -> list[int]:
    """File offsets of the gzip members of an intact file (cutting fixtures and samples)."""
    members, offsets, pos = _Members(io.BytesIO(raw)), [], 0
    while pos < len(raw):
        offsets.append(pos)
        pos = _Member(members, pos).end()
        members.drop_before(pos)
    return offsets


def slice_captures(src: str, dst: str, keep: set[str]) -> int:
    """Copy, byte for byte and in order, the warcinfo member and every capture whose response/revisit
    record id is in `keep` (with the request before and the metadata after it) from one gzip-per-record
    WARC to another. Used to cut the bundled sample and test fixtures from real files. Returns records."""
    with open(src, "rb") as fh:
        raw = fh.read()
    starts = member_offsets(raw)
    ends = starts[1:] + [len(raw)]
    members = []
    for start, end in zip(starts, ends):
        rec = next(iter(ArchiveIterator(io.BytesIO(raw[start:end]), parse_http=False)))
        members.append((str(rec.record_type), rec.headers.get("WARC-Record-ID")))
    chosen = set()
    for i, (rtype, rid) in enumerate(members):
        if rtype == "warcinfo" or (rtype in ("response", "revisit") and rid in keep):
            chosen.add(i)
            if i > 0 and members[i - 1][0] == "request":
                chosen.add(i - 1)
            if i + 1 < len(members) and members[i + 1][0] == "metadata":
                chosen.add(i + 1)
    with open(dst, "wb") as out:
        for i in sorted(chosen):
            out.write(raw[starts[i]:ends[i]])
    return len(chosen)
