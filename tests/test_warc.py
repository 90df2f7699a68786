"""WARC reading: real fixtures, and every kind of damaged input costing exactly one reason-coded unit."""

import gzip
import re
import zlib
import io
import os
from collections import Counter

import pytest

from extract.records import route
from extract.warc import RawRecord, ReadError, iter_records
from tests.warc_factory import DATA, MINI, gz, html_page, real_members, response_record


def kinds(data: bytes) -> Counter:
    return Counter(r.warc_type if isinstance(r, RawRecord) else f"error:{r.reason}"
                   for r in iter_records(io.BytesIO(data)))


def test_real_fixture_every_record_read():
    counts = kinds(MINI.read_bytes())
    assert counts == {"warcinfo": 1, "request": 42, "response": 41, "metadata": 41, "revisit": 1}


def test_offsets_are_gzip_member_offsets():
    raw = MINI.read_bytes()
    for rec in iter_records(io.BytesIO(raw)):
        assert raw[rec.offset:rec.offset + 2] == b"\x1f\x8b"
        first = gzip.GzipFile(fileobj=io.BytesIO(raw[rec.offset:])).read(8)
        assert first == b"WARC/1.1"


def test_wet_conversion_records():
    recs = [r for r in iter_records(open(DATA / "warc" / "whirlwind.warc.wet.gz", "rb"))]
    conv = [r for r in recs if r.warc_type == "conversion"]
    assert len(conv) == 1 and "Escopete" in conv[0].payload.decode()
    assert route(conv[0]) == ("text", "")


def test_uncompressed_warc():
    plain = gzip.decompress(MINI.read_bytes())  # concatenated members decompress to the plain WARC
    counts = kinds(plain)
    assert counts["response"] == 41 and counts["request"] == 42


@pytest.mark.parametrize("damage,reason", [
    (lambda m: m[: len(m) // 2], "corrupt_gzip_member"),           # truncated member mid-file
    (lambda m: gz(b"WARC/1.1\r\nthis is no header\r\n\r\n"), "bad_warc_header"),
    (lambda m: os.urandom(5000).replace(b"\x1f\x8b", b"xx"), "not_gzip_data"),
    (lambda m: b"\x1f\x8b\x08" + os.urandom(3000).replace(b"\x1f\x8b", b"xx"), "corrupt_gzip_member"),
])
def test_damage_costs_one_unit_and_keeps_neighbours(damage, reason):
    members = real_members()
    victim = next(m for m in members if len(m) > 2000)
    data = b"".join(members[:10]) + damage(victim) + b"".join(members[10:])
    counts = kinds(data)
    assert counts[f"error:{reason}"] == 1
    good = kinds(MINI.read_bytes())
    assert {k: v for k, v in counts.items() if not k.startswith("error:")} == good


def test_truncated_last_member():
    members = real_members()
    data = b"".join(members) + members[3][: len(members[3]) // 2]
    counts = kinds(data)
    assert counts["error:truncated_gzip_member"] == 1
    assert counts["response"] == 41


def test_decompression_bomb_capped():
    bomb = gz(response_record("http://x.test/bomb", b"a" * (3 << 20)))
    out = list(iter_records(io.BytesIO(MINI.read_bytes()[:0] + bomb + real_members()[0]), max_record_bytes=1 << 20))
    assert [type(o).__name__ for o in out] == ["ReadError", "RawRecord"]
    assert out[0].reason == "record_too_large"


def test_routes():
    def rec(**kw):
        base = dict(warc_type="response", record_id="<x>", url="http://a.test/", offset=0, http_status=200,
                    http_content_type="text/html", payload=html_page(["hello world"]))
        base.update(kw)
        return RawRecord(**base)

    assert route(rec()) == ("html", "")
    assert route(rec(warc_type="request")) == ("drop", "record_request")
    assert route(rec(warc_type="revisit")) == ("drop", "revisit")
    assert route(rec(http_status=404)) == ("drop", "http_404")
    assert route(rec(payload=b"")) == ("drop", "empty_body")
    assert route(rec(http_content_type="application/pdf", payload=b"%PDF-1.4 ...")) == ("pdf", "pdf_to_interleaved")
    assert route(rec(http_content_type="application/octet-stream", payload=b"%PDF-1.7")) == ("pdf", "pdf_to_interleaved")
    assert route(rec(http_content_type="image/png", payload=b"\x89PNG")) == ("drop", "non_html_image")
    assert route(rec(http_content_type="application/json", payload=b"{}")) == ("drop", "non_html")
    assert route(rec(http_content_type="", payload=b"<html><body>x</body></html>")) == ("html", "")
    assert route(rec(http_status=None)) == ("drop", "bad_http_header")


class _Unseekable(io.RawIOBase):
    def __init__(self, data: bytes):
        self.inner = io.BytesIO(data)

    def readable(self):
        return True

    def seekable(self):
        return False

    def readinto(self, b):
        chunk = self.inner.read(len(b))
        b[: len(chunk)] = chunk
        return len(chunk)


def test_unseekable_stream_uses_member_reader_from_the_start():
    members = real_members()
    data = b"".join(members[:10]) + os.urandom(2000).replace(b"\x1f\x8b", b"xx") + b"".join(members[10:])
    fast = [(type(r).__name__, r.offset) for r in iter_records(io.BytesIO(data))]
    slow = [(type(r).__name__, r.offset) for r in iter_records(_Unseekable(data))]
    assert fast == slow and ("ReadError", sum(map(len, members[:10]))) in slow


# ------------------------------------------------------------------ damage that used to lose records
def _ids(data: bytes, **kw) -> Counter:
    return Counter(r.record_id or f"{r.warc_type}@{r.offset}" for r in iter_records(io.BytesIO(data), **kw)
                   if isinstance(r, RawRecord) and r.warc_type in ("response", "revisit"))


def _plain_records() -> list[bytes]:
    return [gzip.decompress(m) for m in real_members()]


def _plain_case(damage: str) -> tuple[bytes, int]:
    """The plain WARC with record `victim` damaged; returns the bytes and the victim's index."""
    records = _plain_records()
    victim = next(i for i, r in enumerate(records) if i > 50 and b"WARC-Type: response" in r[:300])
    rec = records[victim]
    if damage == "content_length_long":
        rec = re.sub(rb"Content-Length: (\d+)", lambda m: b"Content-Length: %d" % (int(m.group(1)) + 5000), rec, 1)
    elif damage == "content_length_short":
        rec = re.sub(rb"Content-Length: (\d+)", lambda m: b"Content-Length: %d" % (int(m.group(1)) // 2), rec, 1)
    elif damage == "version_line":
        rec = b"WARX" + rec[4:]
    elif damage == "junk_before":
        rec = b"\x00junk!junk!junk" + rec
    records[victim] = rec
    return b"".join(records), victim


@pytest.mark.parametrize("damage", ["content_length_long", "content_length_short", "version_line", "junk_before"])
def test_uncompressed_damage_costs_one_unit_and_keeps_the_rest(damage):
    data, victim = _plain_case(damage)
    items = list(iter_records(io.BytesIO(data)))
    errors = [r for r in items if isinstance(r, ReadError)]
    assert len(errors) == 1 and errors[0].skipped > 0, errors
    good = Counter(r.record_id for r in iter_records(io.BytesIO(MINI.read_bytes())) if r.record_id)
    got = Counter(r.record_id for r in items if isinstance(r, RawRecord) and r.record_id)
    assert all(n == 1 for n in got.values())
    lost = good - got
    # at most the damaged record itself (and, for a too-long length, nothing else: the resync finds
    # the records its block swallowed)
    assert sum(lost.values()) <= 1
    if damage == "junk_before":
        assert not lost and errors[0].reason == "not_warc_data" and errors[0].skipped == 15


def test_whole_file_gzip_reads_every_record():
    plain = gzip.decompress(MINI.read_bytes())
    whole = gzip.compress(plain)
    assert kinds(whole) == kinds(MINI.read_bytes())
    assert {r.offset for r in iter_records(io.BytesIO(whole))} == {0}  # one member: one seekable offset


def test_multi_record_member_before_a_corrupt_member_is_read_once():
    members = real_members()
    multi = gz(gzip.decompress(b"".join(members[1:5])))
    data = members[0] + multi + b"\x1f\x8b\x08" + b"x" * 3000 + b"".join(members[5:])
    ids = _ids(data)
    assert all(n == 1 for n in ids.values())
    assert ids == _ids(MINI.read_bytes())
    assert kinds(data)["error:corrupt_gzip_member"] == 1


def test_multi_record_final_member_is_counted_once():
    members = real_members()
    data = b"".join(members[:-4]) + gz(gzip.decompress(b"".join(members[-4:])))
    assert kinds(data) == kinds(MINI.read_bytes())


def test_empty_file_is_one_unit():
    assert [(type(r).__name__, r.reason) for r in iter_records(io.BytesIO(b""))] == [("ReadError", "empty_file")]


def test_decompression_bomb_member_is_left_early_and_the_next_member_read():
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(packer.compress(b"\0" * (1 << 20)) for _ in range(256)) + packer.flush()  # 256 MiB of zeros
    members = real_members()
    items = list(iter_records(io.BytesIO(members[0] + bomb + members[1]), max_record_bytes=1 << 20))
    assert [type(i).__name__ for i in items] == ["RawRecord", "ReadError", "RawRecord"]
    assert items[1].reason == "not_warc_data" and "gave up" in items[1].detail
    assert items[1].skipped < 64 << 20  # left long before its end


def test_one_record_members_read_as_the_general_framing_reads_them(monkeypatch):
    """A gzip member that inflates to one framed record is read in one go (`_one_record_member`); the
    general path (`_Member` and `_Framer`) is its oracle: the same units, offsets and payloads, on the
    real fixtures, under a record cap, and on damaged copies (bytes flipped, cut, inserted or deleted;
    members holding only blank bytes, junk or two records)."""
    import random

    from extract import warc

    def units(data: bytes, cap: int, general: bool) -> list[str]:
        with monkeypatch.context() as m:
            if general:
                m.setattr(warc, "_one_record_member", lambda *args: None)
            return [repr(u) for u in iter_records(io.BytesIO(data), cap)]

    rng = random.Random(0)
    base = b"".join(real_members())
    cases = [MINI.read_bytes(), (DATA / "warc" / "whirlwind.warc.gz").read_bytes()]
    for t in range(60):
        d = bytearray(base)
        at = rng.randrange(len(d))
        if t % 5 == 0:
            d[at] ^= 1 + rng.randrange(255)
        elif t % 5 == 1:
            del d[at:]
        elif t % 5 == 2:
            d[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
        elif t % 5 == 3:
            del d[at:at + rng.randint(1, 5000)]
        else:
            member = rng.choice([b"\r\n" * 50, b"junk", bytes(response_record("http://a.example/", b"x")) * 2])
            d[at:at] = gz(member)
        cases.append(bytes(d))
    for data in cases:
        for cap in (64 << 20, 3000):
            assert units(data, cap, general=False) == units(data, cap, general=True)
