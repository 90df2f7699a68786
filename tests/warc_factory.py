"""Builds WARC files for tests: real records from the fixtures plus deliberately damaged ones."""

from __future__ import annotations

import gzip
import uuid
from pathlib import Path

DATA = Path(__file__).parent / "data"
MINI = DATA / "warc" / "mini.warc.gz"


def response_record(url: str, body: bytes, content_type: str = "text/html; charset=utf-8",
                    status: int = 200) -> bytes:
    """One uncompressed WARC/1.1 response record with an HTTP envelope."""
    http = (f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    rid = uuid.uuid5(uuid.NAMESPACE_URL, url)
    head = (f"WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{rid}>\r\n"
            f"WARC-Target-URI: {url}\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n").encode()
    return head + http + b"\r\n\r\n"


def gz(record: bytes) -> bytes:
    return gzip.compress(record, mtime=0)


def real_members(path: Path = MINI) -> list[bytes]:
    """The gzip members of a real fixture file, in order."""
    from extract.warc import member_offsets

    raw = path.read_bytes()
    offsets = member_offsets(raw)
    return [raw[a:b] for a, b in zip(offsets, offsets[1:] + [len(raw)])]


def html_page(paragraphs: list[str], title: str = "Page") -> bytes:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return f"<!doctype html><html><head><title>{title}</title></head><body><article>{body}</article></body></html>".encode()
