"""A hard per-document deadline for native extractor code: extraction in a child process killed at it.

Why: guard.py's watchdog raises an async exception that CPython delivers at the next bytecode, so it
cannot stop resiliparse's C++ (or lexbor's parser) once it is running, and their cost is not linear:
a 1.1 MB page of 100k nested <div> held a worker for ~711 s under a 5 s limit. This module keeps one
persistent extractor process per concurrently extracting thread (a pool, usually of one), started
lazily on the first page that needs it, and talks to it over two pipes. A page gets `timeout_ms` from
the moment it is sent; past that the child is SIGKILLed and reaped, and the page fails with
`SandboxError("extract_timeout", ">N ms (killed)")`; the next page gets a fresh child (its start-up,
about 0.1 s, is not charged to any page's deadline). A child that dies on a page (segfault, OOM kill,
someone's kill -9) costs that page `SandboxError("extract_error", "extractor process died: signal N")`.

The children never outlive the worker: each one asks the kernel for SIGKILL when its parent dies
(prctl PR_SET_PDEATHSIG; it then checks it was not orphaned before that), exits on end-of-file of its
request pipe, and is killed by an atexit hook. Linux delivers PDEATHSIG when the *thread* that forked
the child ends, and Beam harnesses retire idle threads, so children are forked by one long-lived
daemon thread of this module. After os.fork() the pool is forgotten in the forked process (its pipes
are the parent's). Nothing here is created before the first sandboxed page, so DoFns stay picklable.

Which pages take this path is extract_main_text's decision (extract/html.py, with `in_process_is_safe`
here): small pages whose worst case is bounded far below the limit stay in process, where the
watchdog still guards them; the rest come here. `run_engine` is the one extractor call both paths make.

Cost (single process, mixed-dev.warc.gz, fresh str per page as decode_html hands them over): a page
through the child costs ~15-19% more than in process: ~60 us of pipe round trip and wake-ups, and
transcoding, ~1.7 ms/MB (the parent encodes the str to UTF-8, the child decodes it; resiliparse then
encodes it again, as it does in process), against ~10 ms/MB of extraction. Moving the decoding into
the child (hand it the payload bytes and charset) would remove the transcoding.
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time

ENGINES = ("resiliparse", "trafilatura")

# A page stays in process only if it has at most SAFE_MAX_TAGS '<' and SAFE_MAX_CHARS characters and
# the limit is at least SAFE_MIN_TIMEOUT_MS. Every element of the DOM comes from a '<' in the source,
# an implied element (html, body, tbody...) or a reconstructed formatting element (at most one per
# active formatting element per '<'), so the tag count bounds the depth and the DOM is O(tags^2);
# text and attribute length are bounded by the character count. The slowest page of the adversarial
# battery at these bounds (tests/test_extract_bound.py::adversarial_pages: nested div/span/table/
# list/pre/section, misnested <b> that the parser reconstructs, long text and whitespace under deep
# nesting, CJK, long attributes, scripts, entities...) takes SAFE_WORST_MS with resiliparse 2.0
# (CJK text under 252 nested <div>, or 126 misnested <b> then 125 <p>; trafilatura: 30 ms, and mostly
# Python, which the watchdog interrupts anyway), best of 5 on a 2-core dev VM at load ~2. So the
# watchdog, which may fire only after the native call returns, is late by at most that, and
# SAFE_MIN_TIMEOUT_MS keeps it under ~1/8 of any limit the in-process path is used for. The worst
# case grows as tags x text: at 2x both bounds it is 140 ms, at 4x 620 ms. Going from 32k to 16k
# characters halved the CJK case and moved 0.2% of the dev corpus's pages to the child.
SAFE_MAX_TAGS = 256
SAFE_MAX_CHARS = 16 * 1024
SAFE_WORST_MS = 60
SAFE_MIN_TIMEOUT_MS = 500

STARTUP_TIMEOUT_S = 60.0  # start-up and engine import of a child, not charged to a page
_REQ = struct.Struct("<cBQ")  # op (b"L" load engine, b"X" extract), engine index, body length
_RESP = struct.Struct("<cQ")  # status (b"O" text follows, b"E" error repr follows), body length
_PIPE_SIZE = 1 << 20  # fewer wake-ups per page; best effort (Linux caps unprivileged pipes at 1 MiB)


class SandboxError(Exception):
    """Reason-coded failure of a sandboxed extraction (extract_main_text turns it into ExtractionError)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def in_process_is_safe(html: str, timeout_ms: float) -> bool:
    """True if `html` provably cannot run long in native code (see SAFE_*): two O(1) tests and one
    str.count over at most 16k characters (a few microseconds)."""
    return len(html) <= SAFE_MAX_CHARS and timeout_ms >= SAFE_MIN_TIMEOUT_MS and html.count("<") <= SAFE_MAX_TAGS


def run_engine(html: str, engine: str) -> str:
    """The extractor call itself, identical in process and in the child."""
    if engine == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text

        return extract_plain_text(html, main_content=True, preserve_formatting=True, alt_texts=False, links=False,
                                  form_fields=False, noscript=False, comments=False)
    import trafilatura

    return trafilatura.extract(html, include_comments=False, include_tables=True, deduplicate=False, fast=True) or ""


def extract(html: str, engine: str, timeout_ms: float) -> str:
    """Main-content text of `html` from a child process, within `timeout_ms` or SandboxError.
    The page travels as UTF-8 with lone surrogates replaced (what extract_main_text retries with
    in process when resiliparse refuses them), so both paths give the same text."""
    return _pool().extract(html, engine, timeout_ms)


def child_pids() -> list[int]:
    """Pids of this process's extractor children (for tests and fault injection)."""
    pool = _POOL
    return [c.proc.pid for c in list(pool.children)] if pool is not None and pool.pid == os.getpid() else []


def shutdown() -> None:
    """Kill and reap every extractor child of this process (atexit does it too)."""
    pool = _POOL
    if pool is not None and pool.pid == os.getpid():
        pool.close()


# ------------------------------------------------------------------------------------------- parent
def _set_pipe_size(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except (ImportError, AttributeError, OSError):
        pass


class _Child:
    """One extractor process and its two pipes; used by one thread at a time."""

    def __init__(self):
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        for fd in (req_r, resp_w):
            _set_pipe_size(fd)
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-c", "from extract.sandbox import _serve; _serve()", str(req_r), str(resp_w),
               str(os.getpid())]
        try:
            self.proc = _spawner().call(lambda: subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(req_r, resp_w), env=env))
        except BaseException:
            for fd in (req_r, resp_w, self.req_w, self.resp_r):
                os.close(fd)
            raise
        os.close(req_r)
        os.close(resp_w)
        os.set_blocking(self.req_w, False)
        os.set_blocking(self.resp_r, False)
        self.readable, self.writable = select.poll(), select.poll()
        self.readable.register(self.resp_r, select.POLLIN | select.POLLERR | select.POLLHUP)
        self.writable.register(self.req_w, select.POLLOUT | select.POLLERR | select.POLLHUP)
        self.loaded: set[str] = set()
        self.closed = False

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def kill(self) -> int | None:
        """SIGKILL, reap and close the pipes; returns the exit status (negative: the signal)."""
        if not self.closed:
            self.closed = True
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:  # unkillable (D state): leave it to the kernel, never hang
                pass
            self._close_pipes()
        return self.proc.returncode

    def forget(self) -> None:
        """In a forked process: close our copies of the pipes, leave the process to its real parent."""
        self.closed = True
        self._close_pipes()

    def _close_pipes(self) -> None:
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass

    def request(self, op: bytes, engine: str, body: bytes, seconds: float) -> tuple[bytes | None, bytes]:
        """Send one request and wait for its answer until `seconds` from now: (status, body), status
        None if the deadline passed first; EOFError if the child died. Only a full answer leaves the
        pipes in step (the caller discards the child otherwise)."""
        deadline = time.monotonic() + seconds
        if not self._write(_REQ.pack(op, ENGINES.index(engine), len(body)), body, deadline):
            return None, b""
        buf = bytearray()
        while len(buf) < _RESP.size or len(buf) < _RESP.size + _RESP.unpack_from(buf)[1]:
            if not self._wait(self.readable, deadline):
                return None, b""
            try:
                chunk = os.read(self.resp_r, _PIPE_SIZE)
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf[:1]), buf[_RESP.size:]

    @staticmethod
    def _wait(poller, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        return remaining > 0 and bool(poller.poll(max(1, math.ceil(remaining * 1000))))

    def _write(self, header: bytes, body: bytes, deadline: float) -> bool:
        parts = [memoryview(header), memoryview(body)]
        try:
            while True:
                try:
                    parts = _advance(parts, os.writev(self.req_w, parts))  # one syscall if the page fits
                except BlockingIOError:
                    pass
                if not parts:
                    return True
                if not self._wait(self.writable, deadline):
                    return False
        except BrokenPipeError:
            raise EOFError from None


def _advance(parts: list[memoryview], sent: int) -> list[memoryview]:
    """What is left of `parts` after a write of `sent` bytes."""
    while parts and sent >= len(parts[0]):
        sent -= len(parts.pop(0))
    if parts:
        parts[0] = parts[0][sent:]
    return parts


class _Pool:
    """This process's extractor children: checked out by one thread at a time, spawned on demand."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle: list[_Child] = []
        self.children: set[_Child] = set()

    def _checkout(self, engine: str) -> _Child:
        child = None
        with self.lock:
            while self.idle:
                candidate = self.idle.pop()
                if candidate.alive():
                    child = candidate
                    break
                self.children.discard(candidate)
                candidate.kill()  # died while idle (killed from outside): reap it; nobody's page fails
        if child is None:
            try:
                child = _Child()
            except OSError as err:
                raise SandboxError("extract_error", f"extractor process failed to start: {err!r}"[:300]) from None
            with self.lock:
                self.children.add(child)
        if engine not in child.loaded:
            try:
                status, body = child.request(b"L", engine, b"", STARTUP_TIMEOUT_S)
            except EOFError:
                status, body = b"D", b""
            except BaseException:
                self._discard(child)
                raise
            if status != b"O":
                code = self._discard(child)
                why = (body.decode("utf-8", "replace") if status == b"E" else
                       f"no answer in {STARTUP_TIMEOUT_S:.0f} s" if status is None else _exit_text(code))
                raise SandboxError("extract_error", f"extractor process failed to start: {why}"[:300])
            child.loaded.add(engine)
        return child

    def _discard(self, child: _Child) -> int | None:
        code = child.kill()
        with self.lock:
            self.children.discard(child)
        return code

    def extract(self, html: str, engine: str, timeout_ms: float) -> str:
        child = self._checkout(engine)
        try:
            status, body = child.request(b"X", engine, html.encode("utf-8", "replace"), timeout_ms / 1000)
        except EOFError:
            code = self._discard(child)
            raise SandboxError("extract_error", f"extractor process died: {_exit_text(code)}") from None
        except BaseException:  # interrupted mid-request (KeyboardInterrupt...): the pipes are out of step
            self._discard(child)
            raise
        if status is None:
            self._discard(child)
            raise SandboxError("extract_timeout", f">{timeout_ms:g} ms (killed)")
        with self.lock:
            self.idle.append(child)
        if status == b"E":
            raise SandboxError("extract_error", body.decode("utf-8", "replace"))
        return body.decode("utf-8", "surrogatepass")

    def close(self) -> None:
        with self.lock:
            children, self.children, self.idle = list(self.children), set(), []
        for child in children:
            child.kill()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "unknown status"
    return f"signal {-code}" if code < 0 else f"exit code {code}"


class _Spawner:
    """A daemon thread that forks every child, so that PR_SET_PDEATHSIG follows the process's lifetime
    rather than that of whichever (possibly short-lived) thread needed the first child."""

    def __init__(self):
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="curate-sandbox-spawner", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, done, box = self.requests.get()
            try:
                box.append((True, fn()))
            except BaseException as err:  # handed to the caller
                box.append((False, err))
            done.set()

    def call(self, fn):
        done, box = threading.Event(), []
        self.requests.put((fn, done, box))
        if not done.wait(STARTUP_TIMEOUT_S):
            raise OSError("sandbox spawner thread did not answer")
        ok, value = box[0]
        if not ok:
            raise value
        return value


_POOL: _Pool | None = None
_SPAWNER: _Spawner | None = None
_STATE_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    pool = _POOL
    if pool is None:
        with _STATE_LOCK:
            if _POOL is None:
                _POOL = _Pool()
            pool = _POOL
    return pool


def _spawner() -> _Spawner:
    global _SPAWNER
    with _STATE_LOCK:
        if _SPAWNER is None:
            _SPAWNER = _Spawner()
        return _SPAWNER


def _after_fork_in_child() -> None:
    global _POOL, _SPAWNER, _STATE_LOCK
    pool, _POOL, _SPAWNER, _STATE_LOCK = _POOL, None, None, threading.Lock()
    if pool is not None:
        for child in list(pool.children):
            child.forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(shutdown)


# -------------------------------------------------------------------------------------------- child
def _read_exact(fd: int, n: int) -> bytearray | None:
    """`n` bytes read straight into one buffer (no chunk copies); None at end of file."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if not k:
            return None
        got += k
    return buf


def _read_request(fd: int) -> tuple[bytes, int, bytearray] | None:
    """One whole request from the parent; None at end of file."""
    header = _read_exact(fd, _REQ.size)
    if header is None:
        return None
    op, engine, n = _REQ.unpack(header)
    body = _read_exact(fd, n)
    return None if body is None else (op, engine, body)


def _write_all(fd: int, header: bytes, body: bytes) -> None:
    parts = [memoryview(header), memoryview(body)]
    while parts:
        parts = _advance(parts, os.writev(fd, parts))


def _serve() -> None:
    """Child main loop: read a request, answer it, until the parent closes the pipe (or dies)."""
    req_r, resp_w, parent = (int(a) for a in sys.argv[1:4])
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the worker; it ends us
    while True:
        request = _read_request(req_r)
        if request is None:
            os._exit(0)
        op, engine, body = request
        try:
            if op == b"L":
                run_engine("<p>warm up</p>", ENGINES[engine])  # imports the engine, touches its tables
                out = b""
            else:
                out = run_engine(body.decode("utf-8"), ENGINES[engine]).encode("utf-8", "surrogatepass")
            status = b"O"
        except Exception as err:
            status, out = b"E", repr(err)[:300].encode("utf-8", "replace")
        del body, request
        _write_all(resp_w, _RESP.pack(status, len(out)), out)
