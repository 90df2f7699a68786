"""A safe image fetcher (stdlib only): SSRF guard, byte and time caps, retries, AI opt-outs.

SSRF (OWASP SSRF Prevention Cheat Sheet): the host is resolved once, *every* resolved address is
checked (loopback, RFC 1918 private, link-local, multicast, reserved, unspecified, CGNAT, IPv4-mapped
or 6to4/Teredo-embedded IPv4, and the cloud metadata endpoints in METADATA_ADDRESSES), and the
connection goes to the vetted IP itself with the original Host header (and TLS SNI plus certificate
check against the host name), so a second DNS answer cannot rebind the name to an internal address
between check and connect. Redirects are followed by hand, each hop re-checked.
`allow_private=True` lifts the private-address refusal (tests against 127.0.0.1); the metadata
endpoints stay refused: they hand out instance credentials, and 168.63.129.16 (Azure) is a public
address that no private-range rule would catch.

URLs (the given one and every redirect Location) are normalised before anything is checked, so the
name that is vetted is the name on the wire, and the request line (ASCII) and Host header (Latin-1)
always encode: a non-ASCII host name is IDNA-encoded (the stdlib codec, IDNA 2003: a few names such as
ones with "ß" encode otherwise than the UTS 46 of browsers), one the codec rejects is a `bad_url`; in
path and query, non-ASCII, controls, space and the characters " < > ` { } ^ are percent-encoded as
UTF-8 (the WHATWG path percent-encode set: what a browser sends), existing %XX escapes are kept and a
lone "%" becomes %25. http.client hands header bytes over as Latin-1 text; a Location is turned back
into those bytes and read as UTF-8, a byte that is not UTF-8 being percent-encoded as itself.

Opt-outs: `X-Robots-Tag: noai` / `noimageai` (DeviantArt / Spawning convention; per-agent forms
`agent: noai` apply to that agent only) drops the response; robots.txt (RFC 9309, urllib.robotparser,
cached per host) is checked when `respect_robots` is set: a 4xx robots.txt allows everything, an
unreachable one (5xx, network error) disallows everything, as the RFC says.

Time: one deadline, `timeout_s` after fetch() starts, covers everything: name resolution (waited for
in a daemon thread, as the system resolver keeps its own retry schedule), connect, TLS handshake,
sending, the status line and headers, the body, robots.txt, redirects, retries and backoff. A socket
timeout bounds a single recv only, so a server sending one byte every few seconds would never trip it:
the socket timeout is set to the time left before every recv. And so that a trickle does not hold one
of a worker's fetch threads for all of `timeout_s`: once MIN_RATE_GRACE_S have passed since a
response's first byte, an average below `min_bytes_per_s` ends the fetch (`too_slow`; 0 turns this
off). Retries: connection errors, timeouts, 429 and
5xx, with exponential backoff (backoff_s * 2^attempt), only while the wait fits before the deadline.
fetch() never raises: every failure is a FetchResult with a reason.
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import re
import socket
import ssl
import threading
import time
import urllib.robotparser
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urljoin, urlsplit

METADATA_ADDRESSES = {ipaddress.ip_address(address) for address in (
    "169.254.169.254",  # AWS, GCP, Azure, Oracle Cloud, DigitalOcean, ... instance metadata
    "fd00:ec2::254",  # AWS instance metadata over IPv6
    "169.254.170.2",  # AWS ECS task metadata and task-role credentials
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud (legacy)
    "168.63.129.16",  # Azure WireServer (a public address)
)}
REDIRECTS = {301, 302, 303, 307, 308}
RETRY_STATUS = {429, 500, 502, 503, 504}
MAX_REDIRECTS = 5
ROBOTS_MAX_BYTES = 512 << 10
ROBOTS_CACHE_HOSTS = 10_000
CHUNK = 64 << 10
MIN_RATE_GRACE_S = 1.0
# Printable ASCII left as it is in a path or query: all but the WHATWG path percent-encode set
# ("%" stays, so existing escapes are kept; LONE_PERCENT finds the others)
URL_KEEP = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"<>`{}^')
LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass
class FetchResult:
    """`reason` is None on success (then `status` is 200 and `bytes` the body)."""

    status: int | None
    bytes: bytes
    reason: str | None
    detail: str = ""
    content_type: str = ""


def address_refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, allow_private: bool) -> str | None:
    """Why `ip` must not be contacted ("metadata_address", "private_address:<kind>"), or None."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return address_refusal(embedded, allow_private)
    if ip in METADATA_ADDRESSES:
        return "metadata_address"
    if allow_private:
        return None
    for kind in ("loopback", "private", "link_local", "multicast", "reserved", "unspecified"):
        if getattr(ip, f"is_{kind}"):
            return f"private_address:{kind}"
    if not ip.is_global:  # CGNAT 100.64/10, documentation and benchmark ranges, ...
        return "private_address:not_global"
    return None


def robots_tag_disallows_ai(values: list[str] | str, agent: str) -> bool:
    """True when an X-Robots-Tag header value says noai/noimageai for every agent or for `agent`."""
    agent = agent.lower()
    for value in [values] if isinstance(values, str) else values:
        scope = None
        for token in value.split(","):
            token = token.strip().lower()
            if ":" in token:
                name, _, rest = token.partition(":")
                if name.strip() not in ("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"):
                    scope, token = name.strip(), rest.strip()
            if token in ("noai", "noimageai") and scope in (None, agent):
                return True
    return False


class _Refused(Exception):
    def __init__(self, reason: str, detail: str = "", retryable: bool = False, status: int | None = None):
        super().__init__(reason)
        self.reason, self.detail, self.retryable, self.status = reason, detail, retryable, status


def _remaining(deadline: float) -> float:
    """Seconds left before `deadline` (for a socket timeout); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _resolve(host: str, port: int, timeout: float) -> list:
    """socket.getaddrinfo, waited for at most `timeout` s: the system resolver retries on its own
    schedule (resolv.conf timeout x attempts, per name server), which a slow name server of the URL's
    domain stretches past any deadline. A lookup still running finishes in its daemon thread."""
    answer = []

    def lookup():
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except Exception as exc:  # handed to the caller, which sorts it
            answer.append(exc)

    thread = threading.Thread(target=lookup, name="fetch-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if not answer:
        raise TimeoutError(f"resolving {host}")
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]


def _normalise_url(url: str) -> SplitResult:
    """`url` as it goes on the wire: host lower-cased and IDNA-encoded, userinfo and fragment dropped
    (neither is ever sent), path and query percent-encoded (module docstring). Lone surrogates stand
    for raw bytes (a Location read with "surrogateescape") and are encoded as those bytes. Raises
    _Refused("bad_url")."""
    try:
        parts = urlsplit(url)
        port = parts.port  # a ValueError for a bad port or IPv6 literal
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError("not an http(s) URL with a host")
        if not host.isascii():
            host = host.encode("idna").decode("ascii")  # a UnicodeError (a ValueError) if not a valid IDN
    except ValueError as exc:
        raise _Refused("bad_url", f"{url[:200]!r}: {str(exc)[:100]}") from None
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")

    def encode(text: str) -> str:
        return quote(LONE_PERCENT.sub("%25", text), safe=URL_KEEP, errors="surrogateescape")

    return SplitResult(parts.scheme, netloc, encode(parts.path), encode(parts.query), "")


class _DeadlineStream(io.RawIOBase):
    """The read side of a connection as http.client's response sees it (status line, headers, body):
    before every recv the socket timeout is set to the time left before the deadline, and once
    MIN_RATE_GRACE_S have passed since the first byte, an average below `min_bytes_per_s` raises
    _Refused("too_slow"). Reads go through the socket's own makefile stream, which keeps the socket
    open after http.client closes the connection object to hand the socket to the response."""

    def __init__(self, sock: socket.socket, deadline: float, min_bytes_per_s: float):
        super().__init__()
        self._sock, self._raw = sock, sock.makefile("rb", buffering=0)
        self._deadline, self._min_rate = deadline, min_bytes_per_s
        self._first: float | None = None
        self._received = 0

    def makefile(self, mode: str) -> io.BufferedReader:  # http.client.HTTPResponse reads sock.makefile("rb")
        return io.BufferedReader(self)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._sock.settimeout(_remaining(self._deadline))
        n = self._raw.readinto(buffer)
        if n:
            now = time.monotonic()
            if self._first is None:
                self._first = now
            self._received += n
            elapsed = now - self._first
            if elapsed > MIN_RATE_GRACE_S and self._received < self._min_rate * elapsed:
                raise _Refused("too_slow", f"{self._received} bytes in {elapsed:.1f}s < {self._min_rate} B/s")
        return n

    def close(self):
        self._raw.close()
        super().close()


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to a vetted IP; connect, send and every read end by `deadline`."""

    def __init__(self, ip: str, port: int, deadline: float, min_bytes_per_s: float):
        super().__init__(ip, port)
        self.deadline, self.min_bytes_per_s = deadline, min_bytes_per_s

    def connect(self):
        self.sock = socket.create_connection((self.host, self.port), _remaining(self.deadline))
        self.sock.settimeout(_remaining(self.deadline))  # for the next step; a sendall's timeout is its total

    def response_class(self, sock, method=None):
        """What getresponse() calls to make the response: one reading through a _DeadlineStream."""
        return http.client.HTTPResponse(_DeadlineStream(sock, self.deadline, self.min_bytes_per_s), method=method)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    """HTTPS to a vetted IP, with SNI and certificate verification against the original host name."""

    def __init__(self, ip: str, port: int, server_name: str, deadline: float, min_bytes_per_s: float):
        super().__init__(ip, port, deadline, min_bytes_per_s)
        self.server_name = server_name

    def connect(self):
        super().connect()  # the handshake runs under the timeout set there
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.server_name)
        self.sock.settimeout(_remaining(self.deadline))


class SafeFetcher:
    """`fetch(url) -> FetchResult`; thread-safe (one instance serves a worker's thread pool)."""

    def __init__(self, user_agent: str, max_bytes: int = 10 << 20, timeout_s: float = 10.0, retries: int = 2,
                 backoff_s: float = 1.0, allow_private: bool = False, respect_robots: bool = False,
                 min_bytes_per_s: float = 1024):
        self.user_agent, self.max_bytes, self.timeout_s = user_agent, max_bytes, timeout_s
        self.retries, self.backoff_s, self.min_bytes_per_s = retries, backoff_s, min_bytes_per_s
        self.allow_private, self.respect_robots = allow_private, respect_robots
        self.agent = user_agent.split("/", 1)[0].strip() or user_agent
        self._robots: OrderedDict[str, urllib.robotparser.RobotFileParser | None] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------ public
    def fetch(self, url: str) -> FetchResult:
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                return self._follow(url, deadline, self.max_bytes, check_robots=self.respect_robots)
            except _Refused as err:
                remaining = deadline - time.monotonic()
                wait = self.backoff_s * 2 ** attempt
                if not err.retryable or attempt >= self.retries or wait >= remaining:
                    detail = f"{err.detail} (after {attempt + 1} attempts)" if attempt else err.detail
                    return FetchResult(err.status, b"", err.reason, detail)
                time.sleep(wait)
                attempt += 1
            except Exception as exc:  # an unforeseen failure is this URL's, not the whole image stage's
                return FetchResult(None, b"", "internal_error", repr(exc)[:200])

    # ---------------------------------------------------------------------------------- internal
    def vet(self, host: str, port: int, deadline: float) -> str:
        """Resolve `host` once and return the first address, if every address may be contacted."""
        try:
            infos = _resolve(host, port, _remaining(deadline))
        except TimeoutError:
            raise _Refused("timeout", f"resolving {host}: >{self.timeout_s}s") from None
        except (OSError, UnicodeError) as exc:  # getaddrinfo IDNA-encodes too: "a..b" is a UnicodeError
            raise _Refused("dns_error", str(exc)[:200]) from None
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        for address in addresses:
            refusal = address_refusal(ipaddress.ip_address(address.split("%", 1)[0]), self.allow_private)
            if refusal:
                reason, _, kind = refusal.partition(":")
                raise _Refused(reason, f"{host} -> {address} {kind}".strip())
        if not addresses:
            raise _Refused("dns_error", f"{host}: no address")
        return addresses[0]

    def _follow(self, url: str, deadline: float, max_bytes: int, check_robots: bool) -> FetchResult:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            parts = _normalise_url(current)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            ip = self.vet(parts.hostname, port, deadline)
            if check_robots:
                self._check_robots(parts, deadline)
            status, headers, body = self._request(parts, ip, port, deadline, max_bytes)
            if status in REDIRECTS:
                location = headers.get("location")
                if not location:
                    raise _Refused("bad_redirect", f"{status} without Location", status=status)
                # http.client decoded the header bytes as Latin-1: back to the bytes, read as UTF-8
                location = location.strip().encode("latin-1").decode("utf-8", "surrogateescape")
                current = urljoin(parts.geturl(), location)
                continue
            return FetchResult(status, body, None, content_type=headers.get("content-type", ""))
        raise _Refused("too_many_redirects", url[:200])

    def _request(self, parts, ip: str, port: int, deadline: float, max_bytes: int) -> tuple[int, dict, bytes]:
        """One GET to the vetted address `ip`: (status, lower-cased headers, body of a 200 response)."""
        conn = (_PinnedHTTPSConnection(ip, port, parts.hostname, deadline, self.min_bytes_per_s)
                if parts.scheme == "https" else _PinnedHTTPConnection(ip, port, deadline, self.min_bytes_per_s))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        resp = None
        try:
            conn.request("GET", target, headers={"Host": parts.netloc, "User-Agent": self.user_agent,
                                                 "Accept": "image/*,*/*;q=0.5", "Accept-Encoding": "identity",
                                                 "Connection": "close"})
            resp = conn.getresponse()
            headers = {k.lower(): v for k, v in resp.getheaders()}
            robots_tags = resp.msg.get_all("X-Robots-Tag") or []
            if robots_tag_disallows_ai(robots_tags, self.agent):
                raise _Refused("robots_noai", ", ".join(robots_tags)[:200], status=resp.status)
            if resp.status in REDIRECTS:
                return resp.status, headers, b""
            if resp.status != 200:
                raise _Refused(f"http_{resp.status}", retryable=resp.status in RETRY_STATUS, status=resp.status)
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise _Refused("too_large", f"Content-Length {declared} > {max_bytes}", status=200)
            return 200, headers, self._read(resp, max_bytes)
        except TimeoutError:
            raise _Refused("timeout", f">{self.timeout_s}s", retryable=True) from None
        except ssl.SSLError as exc:
            raise _Refused("tls_error", str(exc)[:200]) from None
        except (http.client.HTTPException, OSError) as exc:
            raise _Refused("connection_error", repr(exc)[:200], retryable=True) from None
        finally:
            if resp is not None:  # the response owns the socket once the headers are read
                resp.close()
            conn.close()

    @staticmethod
    def _read(resp, max_bytes: int) -> bytes:
        """The body, at most `max_bytes` (the deadline and minimum rate are the stream's)."""
        chunks, size = [], 0
        while chunk := resp.read(min(CHUNK, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise _Refused("too_large", f"> {max_bytes} bytes", status=200)
        return b"".join(chunks)

    def _check_robots(self, parts, deadline: float) -> None:
        key = f"{parts.scheme}://{parts.netloc}"
        with self._lock:
            known = key in self._robots
            parser = self._robots.get(key)
        if not known:
            parser = self._load_robots(key, deadline)
            with self._lock:
                self._robots[key] = parser
                while len(self._robots) > ROBOTS_CACHE_HOSTS:
                    self._robots.popitem(last=False)
        if parser is None:
            raise _Refused("robots_unavailable", f"{key}/robots.txt")
        if not parser.can_fetch(self.agent, parts.geturl()):
            raise _Refused("robots_disallowed", parts.geturl()[:200])

    def _load_robots(self, origin: str, deadline: float) -> urllib.robotparser.RobotFileParser | None:
        """The parsed robots.txt of `origin`: allow-all for a 4xx answer, None (everything
        disallowed, RFC 9309 section 2.3.1.4) when it cannot be read."""
        parser = urllib.robotparser.RobotFileParser()
        try:
            result = self._follow(f"{origin}/robots.txt", deadline, ROBOTS_MAX_BYTES, check_robots=False)
            parser.parse(result.bytes.decode("utf-8", "replace").splitlines())
        except _Refused as err:
            if err.status is None or not 400 <= err.status < 500:
                return None
            parser.allow_all = True
        return parser
