"""Robust WARC / WET record reading.

Common Crawl writes one gzip member per record, so a file is a sequence of independent members.
Intact files are read by fastwarc directly (fast path). At the first sign of damage (fastwarc stops on
a corrupt member, and cannot tell a truncated last member from a whole one) we switch to splitting
members ourselves (zlib, streaming) and handing each member's bytes to fastwarc, so a corrupt or
truncated member costs exactly one reason-coded record instead of the rest of the file. Offsets are
gzip member offsets, as the CC index uses. Uncompressed WARC/WET files go straight to fastwarc.

Every unit read yields one `RawRecord` (a parsed record) or one `ReadError` (a reason code): nothing is
skipped silently, so the read stage can prove `in = out + sum(dropped)`.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from fastwarc.warc import ArchiveIterator, WarcRecordType

GZIP_MAGIC = b"\x1f\x8b\x08"
READ_CHUNK = 1 << 16


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
    """A unit of the file that could not be read as a record, with the reason and where it was."""

    reason: str
    offset: int
    detail: str = ""


def _mime(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


_DOCUMENT_TYPES = WarcRecordType.response | WarcRecordType.resource | WarcRecordType.conversion | WarcRecordType.revisit


def _records_from_stream(stream: BinaryIO, offset: int | None, max_payload: int) -> Iterator[RawRecord | ReadError]:
    """Parse every record in `stream` with fastwarc. `offset` fixes the reported offset (gzip member start).
    Records that cannot hold a document (request, metadata, warcinfo) are only typed and counted:
    parsing their headers would cost more than everything else the reader does."""
    for rec in ArchiveIterator(stream, parse_http=False, strict_mode=False):
        rtype = rec.record_type
        pos = offset if offset is not None else rec.stream_pos
        if not rtype & _DOCUMENT_TYPES:
            if str(rtype) == "unknown" and not rec.headers.get("WARC-Record-ID"):
                yield ReadError("bad_warc_header", pos, "no WARC-Type / WARC-Record-ID")
            else:
                yield RawRecord(warc_type=str(rtype), record_id="", url="", offset=pos)
            continue
        if rec.content_length > max_payload:
            yield ReadError("record_too_large", pos, f"{rec.content_length} bytes")
            continue
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
        yield raw


class _MemberSplitter:
    """Streams a gzip file member by member: yields (member_offset, bytes | None, error_reason)."""

    def __init__(self, stream: BinaryIO, max_member_bytes: int, start: int = 0):
        self.stream = stream  # positioned at file offset `start`
        self.max_member_bytes = max_member_bytes
        self.buf = bytearray()
        self.buf_start = self.start = start  # file offset of buf[0]
        self.eof = False

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.stream.read(READ_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def _drop_before(self, file_pos: int) -> None:
        del self.buf[: file_pos - self.buf_start]
        self.buf_start = file_pos

    def _resync(self, after: int) -> int | None:
        """File offset of the next gzip magic after `after`, reading ahead as needed."""
        search_from = after + 1
        while True:
            i = self.buf.find(GZIP_MAGIC, search_from - self.buf_start)
            if i >= 0:
                return self.buf_start + i
            search_from = max(self.buf_start + len(self.buf) - len(GZIP_MAGIC) + 1, search_from)
            if not self._fill():
                return None

    def __iter__(self) -> Iterator[tuple[int, bytes | None, str]]:
        pos = self.start
        while True:
            self._drop_before(pos)
            while len(self.buf) < len(GZIP_MAGIC) and self._fill():
                pass
            if not self.buf:
                return
            if not self.buf.startswith(GZIP_MAGIC):
                nxt = self._resync(pos)
                yield pos, None, "not_gzip_data"
                if nxt is None:
                    return
                pos = nxt
                continue
            start = pos
            d = zlib.decompressobj(31)
            out, out_len, fed, too_large = [], 0, 0, False
            try:
                while not d.eof:
                    if fed >= len(self.buf) and not self._fill():
                        break
                    piece = bytes(self.buf[fed:fed + READ_CHUNK])
                    fed += len(piece)
                    data = d.decompress(piece)
                    while True:
                        if not too_large:
                            out.append(data)
                            out_len += len(data)
                            too_large = out_len > self.max_member_bytes
                            if too_large:
                                out = []
                        if not d.unconsumed_tail:
                            break
                        data = d.decompress(d.unconsumed_tail)
            except zlib.error as exc:
                nxt = self._resync(start)
                yield start, None, f"corrupt_gzip_member:{exc}"
                if nxt is None:
                    return
                pos = nxt
                continue
            if not d.eof:
                yield start, None, "truncated_gzip_member"
                return
            pos = start + fed - len(d.unused_data)
            if too_large:
                yield start, None, "record_too_large"
            else:
                yield start, b"".join(out), ""


def iter_records(stream: BinaryIO, max_record_bytes: int = 64 << 20) -> Iterator[RawRecord | ReadError]:
    """Yield every record (or read error) of a WARC/WET file, gzip-per-record or uncompressed."""
    head = stream.read(2)
    seekable = stream.seekable()
    if seekable:
        stream.seek(0)
    rest = stream if seekable else io.BufferedReader(_Prepend(head, stream))
    if head != GZIP_MAGIC[:2]:
        try:
            yield from _records_from_stream(rest, None, max_record_bytes)
        except BaseException as exc:  # fastwarc raises (or panics) on unparseable input: count it
            _reraise_interrupts(exc)
            yield ReadError("bad_warc_header", -1, repr(exc)[:200])
        return
    resume = 0
    if seekable:
        resume = yield from _fast_gzip_records(rest, max_record_bytes)
        rest.seek(resume)
    yield from _robust_gzip_records(rest, max_record_bytes, resume)


def _fast_gzip_records(stream: BinaryIO, max_record_bytes: int):
    """fastwarc over the whole gzip file, the fast path for intact files. The record last seen is held
    back: fastwarc yields a truncated final member as if it were whole, and stops with OSError at a
    corrupt one. Returns the offset of the held-back record, where the member-by-member reader resumes
    (re-reading that one member, and everything after a corruption, with reason-coded errors)."""
    held = None
    try:
        for item in _records_from_stream(stream, None, max_record_bytes):
            if held is not None:
                yield held
            held = item
    except BaseException as exc:
        _reraise_interrupts(exc)
    return held.offset if held is not None else 0


def _robust_gzip_records(stream: BinaryIO, max_record_bytes: int, start: int):
    for offset, member, error in _MemberSplitter(stream, max_record_bytes, start):
        if member is None:
            reason, _, detail = error.partition(":")
            yield ReadError(reason, offset, detail)
            continue
        if not member.strip():
            yield ReadError("empty_gzip_member", offset)
            continue
        n = 0
        try:
            for item in _records_from_stream(io.BytesIO(member), offset, max_record_bytes):
                n += 1
                yield item
        except BaseException as exc:
            _reraise_interrupts(exc)
            yield ReadError("bad_warc_header", offset, repr(exc)[:200])
            continue
        if n == 0:
            yield ReadError("bad_warc_header", offset, member[:60].decode("latin-1"))


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


def slice_captures(src: str, dst: str, keep: set[str]) -> int:
    """Copy, byte for byte and in order, the warcinfo member and every capture whose response/revisit
    record id is in `keep` (with the request before and the metadata after it) from one gzip-per-record
    WARC to another. Used to cut the bundled sample and test fixtures from real files. Returns records."""
    with open(src, "rb") as fh:
        raw = fh.read()
    members = []
    for offset, data, _ in _MemberSplitter(io.BytesIO(raw), 1 << 30):
        rec = next(iter(ArchiveIterator(io.BytesIO(data), parse_http=False)))
        members.append((offset, str(rec.record_type), rec.headers.get("WARC-Record-ID")))
    ends = [m[0] for m in members[1:]] + [len(raw)]
    chosen = set()
    for i, (_, rtype, rid) in enumerate(members):
        if rtype == "warcinfo" or (rtype in ("response", "revisit") and rid in keep):
            chosen.add(i)
            if i > 0 and members[i - 1][1] == "request":
                chosen.add(i - 1)
            if i + 1 < len(members) and members[i + 1][1] == "metadata":
                chosen.add(i + 1)
    with open(dst, "wb") as out:
        for i in sorted(chosen):
            out.write(raw[members[i][0]:ends[i]])
    return len(chosen)
