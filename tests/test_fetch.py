"""SafeFetcher (extract/fetch.py) against a local threaded HTTP server on 127.0.0.1. The default
fetcher refuses it (a private address); `allow_private=True` (this test only) lets the other rules
be exercised. No request leaves the machine: every URL is 127.0.0.1 or an address refused before
any connection."""

import contextlib
import http.server
import ipaddress
import sys
import threading
import time
from pathlib import Path

import pytest

from extract import fetch
from extract.fetch import SafeFetcher, address_refusal, robots_tag_disallows_ai

BODY = (Path(__file__).parent / "data" / "images" / "main-page.warc.gz").read_bytes()[:50_000]
UA = "curate-imagebot/0.1"


class Handler(http.server.BaseHTTPRequestHandler):
    """Routes: /img, /big (declared length), /stream (no length), /slow, /noai, /otherbot-noai,
    /redirect?to=URL, /flaky (503 twice, then 200), /robots.txt, /private/img, and `files`."""

    timeout = 5  # a stuck client cannot hold a server thread
    hits: dict = {}
    files: dict = {}  # path -> bytes, set by other tests

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, status=200, headers=(), length=True):
        self.send_response(status)
        self.send_header("Content-Type", "image/jpeg")
        for k, v in headers:
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path, _, query = self.path.partition("?")
        Handler.hits[path] = Handler.hits.get(path, 0) + 1
        if path in ("/img", "/private/img"):
            self._send(BODY, headers=[("X-Seen-Host", self.headers.get("Host", ""))])
        elif path == "/big":
            self._send(BODY * 3)
        elif path == "/stream":
            self.close_connection = True
            self._send(BODY * 3, length=False)
        elif path == "/slow":
            time.sleep(1.5)
            self._send(BODY)
        elif path == "/noai":
            self._send(BODY, headers=[("X-Robots-Tag", "noindex"), ("X-Robots-Tag", "noai, noimageai")])
        elif path == "/otherbot-noai":
            self._send(BODY, headers=[("X-Robots-Tag", "otherbot: noai")])
        elif path == "/redirect":
            self._send(b"", status=302, headers=[("Location", query.removeprefix("to="))])
        elif path == "/flaky":
            self._send(b"busy", status=503) if Handler.hits[path] <= 2 else self._send(BODY)
        elif path == "/robots.txt":
            self._send(b"User-agent: *\nDisallow: /private/\n", headers=[("Content-Type", "text/plain")])
        elif path in Handler.files:
            self._send(Handler.files[path])
        else:
            self._send(b"not found", status=404)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that stopped reading (byte cap)
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(limit_s: float = 60.0):
    """A threaded server on 127.0.0.1 that shuts itself down after `limit_s` at the latest."""
    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stopper = threading.Timer(limit_s, server.shutdown)
    stopper.daemon = True
    stopper.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stopper.cancel()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def base():
    with serve() as url:
        yield url


def relaxed(**kw):
    return SafeFetcher(UA, **{"timeout_s": 3.0, "retries": 0, "backoff_s": 0.05, "allow_private": True, **kw})


def test_default_fetcher_refuses_loopback(base):
    result = SafeFetcher(UA).fetch(f"{base}/img")
    assert result.reason == "private_address" and "loopback" in result.detail
    assert Handler.hits.get("/img", 0) == 0  # refused before connecting


def test_allow_private_fetches_with_host_header_and_user_agent(base):
    result = relaxed().fetch(f"{base}/img")
    assert result.reason is None and result.status == 200 and result.bytes == BODY
    assert result.content_type == "image/jpeg"


@pytest.mark.parametrize("route", ["/big", "/stream"])
def test_byte_cap(base, route):
    result = relaxed(max_bytes=len(BODY)).fetch(base + route)
    assert result.reason == "too_large"


def test_timeout_is_a_reason_and_bounded(base):
    started = time.monotonic()
    result = relaxed(timeout_s=0.5).fetch(f"{base}/slow")
    assert result.reason == "timeout"
    assert time.monotonic() - started < 1.4


def test_x_robots_tag_noai(base):
    assert relaxed().fetch(f"{base}/noai").reason == "robots_noai"
    assert relaxed().fetch(f"{base}/otherbot-noai").reason is None  # addressed to another agent
    assert robots_tag_disallows_ai(["curate-imagebot: noimageai"], "curate-imagebot")
    assert not robots_tag_disallows_ai(["noindex, nofollow", "max-image-preview:large"], "curate-imagebot")


def test_redirects_are_rechecked_every_hop(base, monkeypatch):
    # relaxed: metadata endpoints stay refused even with allow_private
    assert relaxed().fetch(f"{base}/redirect?to=http://169.254.169.254/latest/meta-data/").reason == "metadata_address"
    assert relaxed().fetch(f"{base}/redirect?to=/img").bytes == BODY
    # guard relaxed for 127.0.0.1 only: a redirect to a private address is refused
    strict = address_refusal
    monkeypatch.setattr(fetch, "address_refusal",
                        lambda ip, allow: None if str(ip) == "127.0.0.1" else strict(ip, allow))
    result = SafeFetcher(UA, timeout_s=3.0).fetch(f"{base}/redirect?to=http://10.1.2.3/x.jpg")
    assert result.reason == "private_address" and "10.1.2.3" in result.detail
    too_many = relaxed().fetch(f"{base}/redirect?to={base}/redirect?to={base}/redirect?to={base}/redirect?to="
                               f"{base}/redirect?to={base}/redirect?to={base}/img")
    assert too_many.reason == "too_many_redirects"


def test_retries_with_backoff(base):
    Handler.hits.pop("/flaky", None)
    assert relaxed(retries=1).fetch(f"{base}/flaky").reason == "http_503"
    Handler.hits.pop("/flaky", None)
    result = relaxed(retries=2).fetch(f"{base}/flaky")
    assert result.reason is None and Handler.hits["/flaky"] == 3
    assert relaxed(retries=3).fetch(f"{base}/missing").reason == "http_404"  # 404 is not retried


def test_robots_txt_when_configured(base):
    fetcher = relaxed(respect_robots=True)
    Handler.hits.pop("/robots.txt", None)
    assert fetcher.fetch(f"{base}/private/img").reason == "robots_disallowed"
    assert fetcher.fetch(f"{base}/img").reason is None
    assert Handler.hits["/robots.txt"] == 1  # cached per host
    assert relaxed().fetch(f"{base}/private/img").reason is None  # not configured: not consulted


@pytest.mark.parametrize("address, refusal", [
    ("127.0.0.1", "private_address:loopback"), ("10.0.0.8", "private_address:private"),
    ("192.168.1.1", "private_address:private"), ("172.16.5.4", "private_address:private"),
    ("169.254.10.10", "private_address:private"), ("169.254.169.254", "metadata_address"),
    ("100.64.0.1", "private_address:not_global"), ("0.0.0.0", "private_address:private"),
    ("224.0.0.1", "private_address:multicast"), ("::1", "private_address:loopback"),
    ("fe80::1", "private_address:private"), ("fd00:ec2::254", "metadata_address"),
    ("::ffff:127.0.0.1", "private_address:loopback"), ("::ffff:169.254.169.254", "metadata_address"),
    ("2002:7f00:1::", "private_address:loopback"),  # 6to4 embedding 127.0.0.1
    ("8.8.8.8", None), ("2606:4700:4700::1111", None),
])
def test_address_policy(address, refusal):
    assert address_refusal(ipaddress.ip_address(address), allow_private=False) == refusal
    if refusal != "metadata_address":
        assert address_refusal(ipaddress.ip_address(address), allow_private=True) is None


def test_every_resolved_address_is_checked():
    """"localhost" resolves (from /etc/hosts, no DNS traffic) to loopback addresses only."""
    result = SafeFetcher(UA, timeout_s=2.0).fetch("http://localhost:9/x.jpg")
    assert result.reason == "private_address"
    assert SafeFetcher(UA).fetch("ftp://127.0.0.1/x.jpg").reason == "bad_url"
    assert SafeFetcher(UA).fetch("http://127.0.0.1:99999/x.jpg").reason == "bad_url"
