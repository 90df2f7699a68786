"""SafeFetcher (extract/fetch.py) against a local threaded HTTP server on 127.0.0.1. The default
fetcher refuses it (a private address); `allow_private=True` (this test only) lets the other rules
be exercised. No request leaves the machine: every URL is 127.0.0.1 or an address refused before
any connection."""

import contextlib
import http.server
import ipaddress
import socket
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes

import pytest

from extract import fetch
from extract.fetch import SafeFetcher, address_refusal, robots_tag_disallows_ai

BODY = (Path(__file__).parent / "data" / "images" / "main-page.warc.gz").read_bytes()[:50_000]
UA = "curate-imagebot/0.1"


class Handler(http.server.BaseHTTPRequestHandler):
    """Routes: /img, /big (declared length), /stream (no length), /slow, /noai, /otherbot-noai,
    /redirect?to=URL, /redirect-raw?to=BYTES (percent-decoded into raw Location bytes), /echo...
    (body: the Host header and request target as received), /drip-body and /drip-head (one byte every
    0.2 s of the body / of the status line and headers), /flaky (503 twice, then 200), /robots.txt
    (dripped like /drip-head while `drip_robots`), /private/img, and `files`."""

    timeout = 5  # a stuck client cannot hold a server thread
    hits: dict = {}
    files: dict = {}  # path -> bytes, set by other tests
    drip_robots = False
    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 40\r\nX-Pad: " + b"a" * 40 + b"\r\n\r\n"

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

    def _drip(self, data: bytes, every_s: float = 0.2):
        """Each byte alone (the socket is unbuffered), until the client hangs up (a ConnectionError)."""
        self.close_connection = True
        for i in range(len(data)):
            self.wfile.write(data[i:i + 1])
            time.sleep(every_s)

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
        elif path == "/redirect-raw":  # send_header writes latin-1: one character per raw byte
            location = unquote_to_bytes(query.removeprefix("to=")).decode("latin-1")
            self._send(b"", status=302, headers=[("Location", location)])
        elif path.startswith("/echo"):
            self._send(f"{self.headers.get('Host')} {self.path}".encode("latin-1"))
        elif path == "/drip-body":
            self.send_response(200)
            self.send_header("Content-Length", "40")
            self.end_headers()
            self._drip(b"x" * 40)
        elif path == "/drip-head" or (path == "/robots.txt" and Handler.drip_robots):
            self._drip(Handler.HEAD + b"x" * 40)
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


@pytest.fixture
def dns(monkeypatch):
    """socket.getaddrinfo without DNS traffic: names in `dns.names` (IDNA-encoded by the fake, as the
    real one does) resolve to 127.0.0.1, "slow.test" answers only when the test ends, IP literals and
    localhost pass through; every other name fails. `dns.asked` lists the names asked for."""
    real, release = socket.getaddrinfo, threading.Event()
    table = types.SimpleNamespace(names=set(), asked=[])

    def getaddrinfo(host, port, *args, **kw):
        table.asked.append(host)
        if host == "slow.test":
            release.wait(30)
        elif host.encode("idna").decode() in table.names:
            host = "127.0.0.1"
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(host)
            return real(host, port, *args, **kw)
        if host == "localhost":
            return real(host, port, *args, **kw)
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: not in the test's table")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield table
    release.set()


IDN = "例え.テスト"
IDN_ASCII = "xn--r8jz45g.xn--zckzah"


def test_non_latin1_host_is_idna_encoded(base, dns):
    dns.names.add(IDN_ASCII)
    port = base.rsplit(":", 1)[1]
    result = relaxed().fetch(f"http://{IDN}:{port}/echo")
    assert result.reason is None and result.bytes == f"{IDN_ASCII}:{port} /echo".encode()
    # a redirect naming the host in raw UTF-8 bytes: the same name on the wire
    result = relaxed().fetch(f"{base}/redirect-raw?to={quote(f'http://{IDN}:{port}/echo')}")
    assert result.reason is None and result.bytes == f"{IDN_ASCII}:{port} /echo".encode()
    # the default fetcher vets the encoded name (here resolving to loopback) before connecting
    result = SafeFetcher(UA).fetch(f"http://{IDN}/a.jpg")
    assert result.reason == "private_address" and IDN_ASCII in result.detail


def test_host_that_fails_idna_is_a_bad_url(base, dns):
    too_long = "é" * 64 + ".test"  # an IDNA label has at most 63 characters
    assert relaxed().fetch(f"http://{too_long}/a.jpg").reason == "bad_url"
    assert relaxed().fetch(f"{base}/redirect-raw?to={quote(f'http://{too_long}/a.jpg')}").reason == "bad_url"
    assert relaxed().fetch(f"{base}/redirect-raw?to=http://%FF%FE.test/a.jpg").reason == "bad_url"  # not UTF-8
    assert not any(not host.isascii() or host.startswith("xn--") for host in dns.asked)  # never resolved


def test_path_and_query_are_percent_encoded(base):
    host = base.removeprefix("http://")
    result = relaxed().fetch(f"{base}/echo/a b/ü.jpg?q=ä ö&x=%41&y=100%")
    assert result.reason is None
    assert result.bytes == f"{host} /echo/a%20b/%C3%BC.jpg?q=%C3%A4%20%C3%B6&x=%41&y=100%25".encode()


@pytest.mark.parametrize("location, target", [
    ("/echo/ü ä.jpg".encode(), "/echo/%C3%BC%20%C3%A4.jpg"),  # raw UTF-8 bytes
    (b"/echo/\xe9.jpg", "/echo/%E9.jpg"),  # a raw byte that is not UTF-8 is kept as that byte
    (b"/echo/%C3%BC.jpg", "/echo/%C3%BC.jpg"),  # an existing escape is kept
])
def test_redirect_location_with_raw_non_ascii_bytes(base, location, target):
    result = relaxed().fetch(f"{base}/redirect-raw?to={quote(location)}")
    assert result.reason is None and result.bytes == f"{base.removeprefix('http://')} {target}".encode()


def test_total_deadline_holds_for_any_server(base, dns, monkeypatch):
    """A socket timeout bounds one recv, and a byte every 0.2 s never trips it: the deadline covers the
    whole fetch (name resolution, headers, body, robots.txt, retries), and the minimum rate ends a
    trickle sooner. The cases run at once: the fetcher serves a thread pool."""
    monkeypatch.setattr(Handler, "drip_robots", True)
    silent = socket.create_server(("127.0.0.1", 0))  # connects (the backlog), never answers a TLS handshake
    timeout_s = 2.0
    cases = [  # (route, fetcher options, reason)
        ("/drip-head", {"min_bytes_per_s": 0}, "timeout"),
        ("/drip-body", {"min_bytes_per_s": 0}, "timeout"),
        ("/drip-head", {}, "too_slow"),
        ("/drip-body", {}, "too_slow"),
        ("/img", {"respect_robots": True, "min_bytes_per_s": 0}, "robots_unavailable"),
        ("http://slow.test/a.jpg", {}, "timeout"),
        (f"https://127.0.0.1:{silent.getsockname()[1]}/a.jpg", {}, "timeout"),
    ]

    def timed(case):
        route, options, _ = case
        fetcher = relaxed(timeout_s=timeout_s, retries=3, backoff_s=0.05, **options)
        started = time.monotonic()
        result = fetcher.fetch(route if route.startswith("http") else base + route)
        return result, time.monotonic() - started

    with silent, ThreadPoolExecutor(len(cases)) as pool:
        outcomes = list(pool.map(timed, cases))
    for (route, options, reason), (result, elapsed) in zip(cases, outcomes):
        assert (result.reason, result.bytes) == (reason, b""), (route, options, result)
        assert elapsed < timeout_s + 1.5, (route, options, elapsed)
        if reason == "too_slow":
            assert elapsed < timeout_s  # ended by the rate (after its grace period), not the deadline


@pytest.mark.parametrize("address", [
    "169.254.169.254", "169.254.170.2", "192.0.0.192", "168.63.129.16", "100.100.100.200", "fd00:ec2::254",
    "::ffff:169.254.170.2", "::ffff:192.0.0.192", "::ffff:168.63.129.16",
    "2002:a83f:8110::",  # 6to4 embedding 168.63.129.16
])
def test_metadata_endpoints_are_refused_even_with_allow_private(address):
    for allow_private in (False, True):
        assert address_refusal(ipaddress.ip_address(address), allow_private) == "metadata_address"
