"""WARC reading: real fixtures, and every kind of damaged input costing exactly one reason-coded unit."""

import gzip
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
