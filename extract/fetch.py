"""A safe image fetcher (stdlib only): SSRF guard, byte and time caps, retries, AI opt-outs.

SSRF (OWASP SSRF Prevention Cheat Sheet): the host is resolved once, *every* resolved address is
checked (loopback, RFC 1918 private, link-local, multicast, reserved, unspecified, CGNAT, IPv4-mapped
or 6to4/Teredo-embedded IPv4, and the cloud metadata endpoints 169.254.169.254 and fd00:ec2::254), and
the connection goes to the vetted IP itself with the original Host header (and TLS SNI plus
certificate check against the host name), so a second DNS answer cannot rebind the name to an
internal address between check and connect. Redirects are followed by hand, each hop re-checked.
`allow_private=True` lifts the private-address refusal (tests against 127.0.0.1); the metadata
endpoints stay refused.

Opt-outs: `X-Robots-Tag: noai` / `noimageai` (DeviantArt / Spawning convention; per-agent forms
`agent: noai` apply to that agent only) drops the response; robots.txt (RFC 9309, urllib.robotparser,
cached per host) is checked when `respect_robots` is set: a 4xx robots.txt allows everything, an
unreachable one (5xx, network error) disallows everything, as the RFC says.

Retries: connection errors, timeouts, 429 and 5xx, with exponential backoff (backoff_s * 2^attempt),
all within one overall `timeout_s` per URL (name resolution uses the system resolver and its own
timeouts).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.robotparser
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

METADATA_ADDRESSES = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"),
                      ipaddress.ip_address("100.100.100.200")}  # AWS/GCP/Azure, AWS IPv6, Alibaba
REDIRECTS = {301, 302, 303, 307, 308}
RETRY_STATUS = {429, 500, 502, 503, 504}
MAX_REDIRECTS = 5
ROBOTS_MAX_BYTES = 512 << 10
ROBOTS_CACHE_HOSTS = 10_000
CHUNK = 64 << 10


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


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a vetted IP, with SNI and certificate verification against the original host name."""

    def __init__(self, ip: str, port: int, server_name: str, timeout: float):
        super().__init__(ip, port, timeout=timeout, context=ssl.create_default_context())
        self.server_name = server_name

    def connect(self):
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.server_name)


class _Refused(Exception):
    def __init__(self, reason: str, detail: str = "", retryable: bool = False, status: int | None = None):
        super().__init__(reason)
        self.reason, self.detail, self.retryable, self.status = reason, detail, retryable, status


class SafeFetcher:
    """`fetch(url) -> FetchResult`; thread-safe (one instance serves a worker's thread pool)."""

    def __init__(self, user_agent: str, max_bytes: int = 10 << 20, timeout_s: float = 10.0, retries: int = 2,
                 backoff_s: float = 1.0, allow_private: bool = False, respect_robots: bool = False):
        self.user_agent, self.max_bytes, self.timeout_s = user_agent, max_bytes, timeout_s
        self.retries, self.backoff_s = retries, backoff_s
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

    # ---------------------------------------------------------------------------------- internal
    def vet(self, host: str, port: int) -> str:
        """Resolve `host` once and return the first address, if every address may be contacted."""
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
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
            try:
                parts = urlsplit(current)
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError:  # a bad port or IPv6 literal
                raise _Refused("bad_url", current[:200]) from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise _Refused("bad_url", current[:200])
            ip = self.vet(parts.hostname, port)
            if check_robots:
                self._check_robots(parts, deadline)
            status, headers, body = self._request(parts, ip, port, deadline, max_bytes)
            if status in REDIRECTS:
                location = headers.get("location")
                if not location:
                    raise _Refused("bad_redirect", f"{status} without Location", status=status)
                current = urljoin(current, location.strip())
                continue
            return FetchResult(status, body, None, content_type=headers.get("content-type", ""))
        raise _Refused("too_many_redirects", url[:200])

    def _request(self, parts, ip: str, port: int, deadline: float, max_bytes: int) -> tuple[int, dict, bytes]:
        """One GET to the vetted address `ip`: (status, lower-cased headers, body of a 200 response)."""
        host = parts.hostname
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            raise _Refused("timeout", "deadline passed")
        conn = (_PinnedHTTPSConnection(ip, port, host, timeout) if parts.scheme == "https"
                else http.client.HTTPConnection(ip, port, timeout=timeout))
        host_header = host if ":" not in host else f"[{host}]"
        if parts.port:
            host_header += f":{parts.port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("GET", target, headers={"Host": host_header, "User-Agent": self.user_agent,
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
            return 200, headers, self._read(conn, resp, deadline, max_bytes)
        except (TimeoutError, socket.timeout):
            raise _Refused("timeout", f">{self.timeout_s}s", retryable=True) from None
        except ssl.SSLError as exc:
            raise _Refused("tls_error", str(exc)[:200]) from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise _Refused("connection_error", repr(exc)[:200], retryable=True) from None
        finally:
            conn.close()

    @staticmethod
    def _read(conn, resp, deadline: float, max_bytes: int) -> bytes:
        chunks, size = [], 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if conn.sock is not None:
                conn.sock.settimeout(remaining)
            chunk = resp.read(min(CHUNK, max_bytes + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise _Refused("too_large", f"> {max_bytes} bytes", status=200)

    def _check_robots(self, parts, deadline: float) -> None:
        key = f"{parts.scheme}://{parts.netloc.lower()}"
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
