"""A hard per-document deadline for native code: HTML extraction, the DOM walks of the pairs and
interleaved branches (page steps) and PDF parsing in child processes killed at it.

Why: nothing inside the worker can stop resiliparse's native code (or lexbor's parser, or PDFium) once
it is running, and their cost is not linear: a 1.1 MB page of 100k nested <div> held a worker for ~711 s
under a 5 s limit. An async exception (CPython's PyThreadState_SetAsyncExc, what resiliparse's own
TimeGuard raises) waits for the next bytecode, and where the native code calls back into Python (a
resiliparse node wrapper is cached in a WeakValueDictionary) it surfaces inside the library, which
panics: a PanicException that fails the whole Beam bundle. This module
keeps persistent child processes, one per concurrently working thread and kind of child (a pool,
usually of one per kind), started lazily on the first document that needs one, and talks to each over
two pipes. A document gets `timeout_ms` from the moment it is sent; past that the child is SIGKILLed
and reaped, and the document fails; the next one gets a fresh child (its start-up, about 0.1 s, is not
charged to any document's deadline). Two kinds of child:

- HTML (`extract`): main-content text by resiliparse or trafilatura (`run_engine`). Past the deadline:
  `SandboxError("extract_timeout", ">N ms (killed)")`; a child that dies on a page (segfault, OOM
  kill, someone's kill -9): `SandboxError("extract_error", "extractor process died: signal N")`.
  The same children run the page steps (`run_page_step`, PAGE_STEPS: the pairs' image references,
  the interleaved linearisation, and both from one parse): `page_timeout` and `page_error`, the detail
  naming the step.
- PDF (`parse_pdf`): extract.pdf.parse_pdf, imported in the child only (its dict comes back pickled).
  PDFium decodes images and fonts of any declared size, so a PDF child also runs under an
  address-space limit (RLIMIT_AS, set around each document, so HTML children never have one): a
  parser that runs out of it costs the document `SandboxError("pdf_too_much_memory", ">M MB")`, and
  the child is replaced; past the deadline: `SandboxError("pdf_timeout", ">N ms (killed)")`; a child
  that dies otherwise: `SandboxError("pdf_parser_crashed", "parser process died: signal N")`. See
  `parse_pdf` for how running out of memory is told from a crash.

The children never outlive the worker: each one asks the kernel for SIGKILL when its parent dies
(prctl PR_SET_PDEATHSIG; it then checks it was not orphaned before that), exits on end-of-file of its
request pipe, and is killed by an atexit hook. Linux delivers PDEATHSIG when the *thread* that forked
the child ends, and Beam harnesses retire idle threads, so children are forked by one long-lived
daemon thread of this module. After os.fork() the pool is forgotten in the forked process (its pipes
are the parent's). Nothing here is created before the first sandboxed document, so DoFns stay
picklable.

Which pages take the HTML path is extract_main_text's decision (extract/html.py, with
`in_process_is_safe` here; run_page_step decides the same way): small pages whose worst case is bounded
far below the limit by their size stay in process, with nothing to interrupt them; the rest come here.
`run_engine` is the one extractor call both paths make. Every PDF takes the child path.

Cost (single process, mixed-dev.warc.gz, fresh str per page as decode_html hands them over): a page
through the child costs ~15-19% more than in process: ~60 us of pipe round trip and wake-ups, and
transcoding, ~1.7 ms/MB (the parent encodes the str to UTF-8, the child decodes it; resiliparse then
encodes it again, as it does in process), against ~10 ms/MB of extraction. A page whose payload is
valid UTF-8 (extract.html.Decoded.utf8) travels as its payload bytes, which saves the parent's
encoding, ~1 ms/MB (0.18 ms on an average 174 kB scrapinghub page).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import math
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time

from filters.line_end import ends_with_terminal  # only `re`: a child stays a light single-threaded process

ENGINES = ("resiliparse", "trafilatura")
# The page steps besides main-content extraction that walk a page's DOM (op b"S"): "module:function",
# each taking (html, *args) and returning plain data (tuples, lists, str, int, float, None), which is all
# that comes back from a child. They run as extraction does (run_page_step): in process for pages
# in_process_is_safe admits, else in an HTML child killed at the deadline.
PAGE_STEPS = {"image_refs": "extract.images:image_ref_rows", "linearise": "extract.interleaved:linearise_rows",
              "image_views": "extract.interleaved:image_view_rows",
              "text_and_image_views": "extract.interleaved:text_and_image_view_rows"}

# A page stays in process only if it has at most SAFE_MAX_TAGS '<' and SAFE_MAX_CHARS characters and
# the limit is at least SAFE_MIN_TIMEOUT_MS. Every element of the DOM comes from a '<' in the source,
# an implied element (html, body, tbody...) or a reconstructed formatting element (at most one per
# active formatting element per '<'), so the tag count bounds the depth and the DOM is O(tags^2);
# text and attribute length are bounded by the character count. The slowest page of the adversarial
# battery at these bounds (tests/test_extract_bound.py::adversarial_pages: nested div/span/table/
# list/pre/section, misnested <b> that the parser reconstructs, long text and whitespace under deep
# nesting, CJK, long attributes, scripts, entities...) takes SAFE_WORST_MS with resiliparse 2.0
# (CJK text under 252 nested <div>, or 126 misnested <b> then 125 <p>; trafilatura: 30 ms; the page
# steps less), best of 5 on a 2-core dev VM at load ~2. So a page in process overruns its limit by at
# most that, and SAFE_MIN_TIMEOUT_MS keeps it under ~1/8 of any limit the in-process path is used for.
# The worst case grows as tags x text: at 2x both bounds it is 140 ms, at 4x 620 ms. Going from 32k to
# 16k characters halved the CJK case and moved 0.2% of the dev corpus's pages to the child.
SAFE_MAX_TAGS = 256
SAFE_MAX_CHARS = 16 * 1024
SAFE_WORST_MS = 60
SAFE_MIN_TIMEOUT_MS = 500

STARTUP_TIMEOUT_S = 60.0  # start-up and engine (or PDF parser) import of a child, not charged to a document
# op (b"L" load the engine, or a PDF child's parser; b"X" extract; b"S" a page step; b"P" parse a PDF),
# engine or page step index (0 for a PDF child), body length
_REQ = struct.Struct("<cBQ")
# status (b"O" text, or a pickled result, follows; b"E" error repr (a page step's: its traceback)
# follows; b"R" a library panicked on the page, its repr follows; b"M" the PDF parser ran out of memory,
# empty body), body length
_RESP = struct.Struct("<cQ")
_STEP_ARGS = struct.Struct("<Q")  # length of the pickled arguments of a page step; they and the page follow
_PDF_ARGS = struct.Struct("<QQQ")  # memory_mb, max_pages, min_image_side; the PDF's bytes follow
# The PDF child's parser, "module:function". CURATE_PDF_PARSER replaces it: a test hook (crashing,
# hanging, allocating parsers in tests/sandbox_targets.py), read only in the child, when it loads it.
_PDF_PARSER = "extract.pdf:parse_pdf"
# Per kind of child: the reason a child that fails costs the document, and what messages call it.
_KINDS = {"html": ("extract_error", "extractor"), "pdf": ("pdf_parser_crashed", "parser")}
_PIPE_SIZE = 1 << 20  # fewer wake-ups per page; best effort (Linux caps unprivileged pipes at 1 MiB)


class SandboxError(Exception):
    """Reason-coded failure of a sandboxed extraction or PDF parse (extract_main_text turns it into
    ExtractionError). `args` is (reason, detail): it pickles, and unpacks as such."""

    def __init__(self, reason: str, detail: str):
        super().__init__(reason, detail)
        self.reason, self.detail = reason, detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class PageStepError(RuntimeError):
    """A page step raised in the child: a bug, not a property of the page, so it fails the run (with
    the child's traceback) instead of costing one document."""


def is_panic(err: BaseException) -> bool:
    """A Rust library's panic (PyO3's PanicException, a BaseException): the library failed on this
    input, which costs the input, not the run."""
    return type(err).__name__ == "PanicException"


def in_process_is_safe(html: str, timeout_ms: float) -> bool:
    """True if `html` provably cannot run long in native code (see SAFE_*): two O(1) tests and one
    str.count over at most 16k characters (a few microseconds)."""
    return len(html) <= SAFE_MAX_CHARS and timeout_ms >= SAFE_MIN_TIMEOUT_MS and html.count("<") <= SAFE_MAX_TAGS


# Twitter's embed code quotes a post as <blockquote class="twitter-tweet">; resiliparse's main-content
# mode drops such a quote, and a block that holds only it, as a social-media widget. An article's
# embedded posts are quotations it makes (the scrapinghub annotators keep them: 9 of its 181 pages quote
# posts), so the class is renamed before extraction; share buttons and follow widgets use other classes
# and still go.
_TWEET_CLASS, _EMBEDDED_POST_CLASS = 'class="twitter-tweet', 'class="embedded-post'
# resiliparse's text options: paragraphs kept, no alt texts, link targets, form fields, noscript or
# comment sections. post_meta=False: a post's meta block (byline, "Published ..." and "Updated ..."
# dates, tags, author bio) is not main content; resiliparse keeps it by default. On the scrapinghub
# benchmark it is 1 annotated line of the ~160 it removes, F1 0.930 -> 0.937, and 15% faster.
RESILIPARSE_TEXT_OPTIONS = dict(preserve_formatting=True, alt_texts=False, links=False, form_fields=False,
                                noscript=False, comments=False, post_meta=False)


# The page's whole text replaces its main content when the main content is shorter than
# WHOLE_PAGE_MAX_MAIN_CHARS, holds fewer than WHOLE_PAGE_MAX_MAIN_PROSE characters in prose lines (lines
# that end a sentence: filters/line_end.py) and is shorter than WHOLE_PAGE_MAX_SHARE of
# the whole text: resiliparse's main-content heuristics then missed the page's body (a blog platform's
# article container, a forum thread, a product grid) and returned a header or nothing, while a short
# article they found (a paywalled teaser, a wire story of three paragraphs) is prose and stays. The
# template lines of the whole text are the boilerplate model's to remove (filters/boilerplate.py), as
# on any page. What such a page gives is its text without its landmarks of navigation, banner, footer and
# aside (HTML's nav, header, footer and aside elements, ARIA's navigation, banner and contentinfo roles:
# WHATWG HTML 4.3, WAI-ARIA 1.2 5.3.4), which hold its menus; the whole text only where nothing else is
# left. Chosen on scrapinghub's pages and the development split of the WCXB benchmark (docs/design.md,
# "Main-content extraction").
WHOLE_PAGE_MAX_MAIN_CHARS = 1000
WHOLE_PAGE_MAX_MAIN_PROSE = 400
WHOLE_PAGE_MAX_SHARE = 0.1
PAGE_LANDMARKS = ["nav", "header", "footer", "aside", "[role=navigation]", "[role=banner]", "[role=contentinfo]"]


# Page chrome after the article. Resiliparse's main-content mode sometimes keeps, in the second half of what it
# returns, lines of the page's chrome around the article: a site footer's lines ("Stay up-to-date on our
# work.", a copyright, its links), a form's (a newsletter sign-up, a comment form's notices), an author box.
# Such a line's text stands in a footer, form or aside element, or in an element whose class or id names a
# footer or an author (CHROME_SELECTOR). A line of the text's second half (CHROME_TAIL) of at least
# CHROME_MIN_CHARS characters whose text, whitespace collapsed, occurs in such an element's text goes. An element whose text is longer than CHROME_MAX_SHARE of the main content is
# not chrome but a wrapper around the article (class="page-with-footer", "has-author"): it is passed over, and
# the matching elements inside it are not. The first CHROME_MAX_ELEMENTS matching elements are read (99% of
# the development pages have fewer), and the last CHROME_MAX_LINES lines compared, each against at most
# CHROME_MAX_SHARE x CHROME_MAX_ELEMENTS of the content's length: linear in the page.
# The selector and the thresholds were chosen on the development pages of three benchmarks (scrapinghub,
# WCXB's development split, half 0 of trafilatura's snippet benchmark), a part kept only where it lost
# nothing on any of them; its cost and figures: docs/design.md, "Main-content extraction".
CHROME_SELECTOR = 'footer, form, aside, [class*="footer" i], [id*="footer" i], [class*="author" i], [id*="author" i]'
CHROME_TAIL = 0.5
CHROME_MIN_CHARS = 4
CHROME_MAX_SHARE = 0.5
CHROME_MAX_ELEMENTS = 256
CHROME_MAX_LINES = 200


# The lines before the headline. Resiliparse's main content often begins above the article's headline with
# what the page sets there: a breadcrumb, a section's name, a date, a "Menu" or cookie line, a paywall's
# counter. Where one of the first HEADLINE_MAX_LINE non-blank lines of the text is the text of one of the
# page's first HEADLINE_MAX_ELEMENTS h1 elements (whitespace collapsed), and the lines before it are at most
# HEADLINE_MAX_LEAD_SHARE of the text, they go, as an article starts at its headline. A text without such a
# line keeps all its lines, and so does one whose h1 stands further down (a service page's hero section
# above its h1 is often what the page is about). Chosen on the development pages of the three benchmarks of
# the chrome lines, where it lost nothing on any of them; h2 headings as well, and keeping the lead's lines
# that end a sentence, did worse; figures: docs/design.md, "Main-content extraction".
HEADLINE_SELECTOR = "h1"
HEADLINE_MAX_LINE = 20
HEADLINE_MAX_LEAD_SHARE = 0.35
HEADLINE_MAX_ELEMENTS = 8
HEADLINE_MIN_CHARS = 3


def article_lines(text: str, tree) -> str:
    """`text` (extracted from `tree`) without the page-chrome lines of its second half (CHROME_*) and
    then without the lines before its headline (HEADLINE_*): one selector walk of the page for both."""
    if not text:
        return text
    chrome, headlines = [], []
    for element in tree.document.query_selector_all(f"{CHROME_SELECTOR}, {HEADLINE_SELECTOR}").values():
        if element.tag == HEADLINE_SELECTOR:
            if len(headlines) < HEADLINE_MAX_ELEMENTS:
                headlines.append(" ".join(element.text.split()))
        elif len(chrome) < CHROME_MAX_ELEMENTS:
            chrome.append(element)
        elif len(headlines) == HEADLINE_MAX_ELEMENTS:
            break
    return without_lead_lines(without_chrome_lines(text, chrome), headlines)


def without_chrome_lines(text: str, chrome: list) -> str:
    """`text` without the lines of its second half found in the texts of the `chrome` elements (CHROME_*)."""
    limit = CHROME_MAX_SHARE * len(text)
    found = "\n".join(collapsed for element in chrome if len(collapsed := " ".join(element.text.split())) <= limit)
    if not found:
        return text
    start = text.find("\n", math.ceil(CHROME_TAIL * len(text)) - 1) + 1  # the first line starting in the 2nd half
    if start == 0:
        return text
    lines = text[start:].split("\n")
    kept = lines[:-CHROME_MAX_LINES] + [line for line in lines[-CHROME_MAX_LINES:] if not (
        len(collapsed := " ".join(line.split())) >= CHROME_MIN_CHARS and collapsed in found)]
    return text[:start - 1] + "".join("\n" + line for line in kept) if len(kept) < len(lines) else text


def without_lead_lines(text: str, headlines: list[str]) -> str:
    """`text` from its headline on: from the first of its first HEADLINE_MAX_LINE non-blank lines that is one
    of `headlines` (whitespace collapsed), where what goes is at most HEADLINE_MAX_LEAD_SHARE of it; else all
    of it."""
    heads = {head for head in headlines if len(head) >= HEADLINE_MIN_CHARS}
    if not heads:
        return text
    start = seen = 0
    while seen < HEADLINE_MAX_LINE and start <= HEADLINE_MAX_LEAD_SHARE * len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = " ".join(text[start:end].split())
        if line in heads:
            return text[start:]
        seen += bool(line)
        start = end + 1
    return text


def prose_chars(text: str) -> int:
    """The characters of `text` in lines that end a sentence (filters/line_end.py, the quality rules'
    line-end rule)."""
    return sum(len(line) for raw in text.split("\n") if (line := raw.strip()) and ends_with_terminal(line))


def resiliparse_text(html: str) -> tuple[str, bool]:
    """(the main content, or the whole page's text where the main content missed the body
    (WHOLE_PAGE_*; without PAGE_LANDMARKS unless they hold all of it), without the chrome lines of its
    second half (CHROME_*), all from one parse; whether it is the whole page's). A str holding lone
    surrogates raises UnicodeEncodeError."""
    from resiliparse.parse.html import HTMLTree

    if _TWEET_CLASS in html:
        html = html.replace(_TWEET_CLASS, _EMBEDDED_POST_CLASS)
    return resiliparse_tree_text(HTMLTree.parse(html))


def resiliparse_tree_text(tree) -> tuple[str, bool]:
    """resiliparse_text of a page already parsed (the tree is only read), whose HTML holds no
    `_TWEET_CLASS`."""
    from resiliparse.extract.html2text import extract_plain_text

    main = extract_plain_text(tree, main_content=True, **RESILIPARSE_TEXT_OPTIONS)
    if len(main) >= WHOLE_PAGE_MAX_MAIN_CHARS or prose_chars(main) >= WHOLE_PAGE_MAX_MAIN_PROSE:
        return article_lines(main, tree), False
    whole = extract_plain_text(tree, main_content=False, **RESILIPARSE_TEXT_OPTIONS)
    if len(main) >= WHOLE_PAGE_MAX_SHARE * len(whole):
        return article_lines(main, tree), False
    body = extract_plain_text(tree, main_content=False, skip_elements=PAGE_LANDMARKS, **RESILIPARSE_TEXT_OPTIONS)
    return article_lines(body if body.strip() else whole, tree), True


def run_engine(html: str, engine: str) -> str:
    """The extractor call itself, identical in process and in the child (resiliparse_text, or
    trafilatura)."""
    if engine == "resiliparse":
        return resiliparse_text(html)[0]
    import trafilatura

    return trafilatura.extract(html, include_comments=False, include_tables=True, deduplicate=False, fast=True) or ""


def extract(html: str, engine: str, timeout_ms: float, utf8: bytes | None = None, one_cpu: bool = True) -> str:
    """Main-content text of `html` from a child process, within `timeout_ms` or SandboxError.
    The page travels as UTF-8 with lone surrogates replaced (what extract_main_text retries with
    in process when resiliparse refuses them), so both paths give the same text: `utf8` when the
    caller has html's UTF-8 bytes already (a strict UTF-8 decoding has no lone surrogates), else
    an encoding of `html`. `one_cpu`: the request runs in on_one_cpu(), the caller's thread and the
    child on one CPU for its duration."""
    return _pool().extract(html, engine, timeout_ms, utf8, one_cpu)


def run_page_step(step: str, html: str, args: tuple, timeout_ms: float):
    """PAGE_STEPS[step](html, *args) within `timeout_ms`: in process where in_process_is_safe admits the
    page (its worst case is bounded by its size, so nothing needs interrupting; no async exception is
    ever raised into the library), else in an HTML child, on one CPU with the calling thread. Both
    paths give the same plain data. SandboxError:
    - "page_timeout", "<step>: >N ms (killed)": the deadline passed (the child is killed);
    - "page_error", "<step>: ...": the library panicked on the page, or the child died (a signal).
    An exception the step raises is a bug: PageStepError, with the child's traceback."""
    if in_process_is_safe(html, timeout_ms):
        try:
            return _step_function(step)(_encodable(html), *args)
        except BaseException as err:
            if is_panic(err):
                raise SandboxError("page_error", f"{step}: {err!r}"[:300]) from None
            raise
    return _pool().page_step(step, html, args, timeout_ms)


def parse_pdf(data: bytes, timeout_ms: float, memory_mb: int, max_pages: int, min_image_side: int) -> dict:
    """extract.pdf.parse_pdf(data, max_pages, min_image_side) run in a PDF child within `timeout_ms` and
    an address space of `memory_mb` MB (the child's whole: the interpreter with extract.pdf loaded takes
    ~40 MB of it): its result dict, or SandboxError with
    - "pdf_timeout", ">N ms (killed)": the deadline passed (the child is killed);
    - "pdf_too_much_memory", ">M MB": the parser ran out of the address space, which shows in one of
      two ways: a MemoryError (Python, pypdfium2's buffers, PIL), answered as such by the child, or a
      SIGABRT, which is how PDFium (FX_OutOfMemoryTerminate) and C++ (std::bad_alloc ->
      std::terminate) end on a failed allocation (then the detail says "(parser process aborted)").
      glibc's heap-corruption checks abort too; such a rare crash is counted here;
    - "pdf_parser_crashed", "parser process died: signal N": any other death, SIGSEGV or SIGKILL
      (the kernel's OOM killer included: then the machine, not the limit, ran out), or "parser
      raised ..." when parse_pdf raised instead of returning a reason.
    The child is replaced after anything but a result or a raised exception."""
    return _pool().parse_pdf(data, timeout_ms, memory_mb, max_pages, min_image_side)


def child_pids(kind: str | None = None) -> list[int]:
    """Pids of this process's children, of one kind ("html", "pdf") or all (for tests and fault
    injection)."""
    pool = _POOL
    if pool is None or pool.pid != os.getpid():
        return []
    return [c.proc.pid for c in list(pool.children) if kind in (None, c.kind)]


def shutdown() -> None:
    """Kill and reap every extractor child of this process (atexit does it too)."""
    pool = _POOL
    if pool is not None and pool.pid == os.getpid():
        pool.close()


_STEP_FUNCTIONS: dict = {}


def _step_function(step: str):
    """The function of a page step (imported on first use, in the parent or the child)."""
    fn = _STEP_FUNCTIONS.get(step)
    if fn is None:
        module, _, name = PAGE_STEPS[step].partition(":")
        fn = _STEP_FUNCTIONS[step] = getattr(importlib.import_module(module), name)
    return fn


def _encodable(html: str) -> str:
    """`html` with lone surrogates as '?' (resiliparse refuses them), as a page sent to a child travels."""
    try:
        html.encode("utf-8")
        return html
    except UnicodeEncodeError:
        return html.encode("utf-8", "replace").decode("utf-8")


# ------------------------------------------------------------------------------------------- parent
def _set_pipe_size(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except (ImportError, AttributeError, OSError):
        pass


class _Child:
    """One child process of a kind ("html", "pdf") and its two pipes; used by one thread at a time."""

    def __init__(self, kind: str):
        self.kind = kind
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        for fd in (req_r, resp_w):
            _set_pipe_size(fd)
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-c", "from extract.sandbox import _serve; _serve()", str(req_r), str(resp_w),
               str(os.getpid()), kind]
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
        self.cpu: int | None = None  # the one CPU the child is pinned to, the caller's (see on_one_cpu)

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

    def request(self, op: bytes, engine: int, body: bytes, seconds: float) -> tuple[bytes | None, bytes]:
        """Send one request and wait for its answer until `seconds` from now: (status, body), status
        None if the deadline passed first; EOFError if the child died. Only a full answer leaves the
        pipes in step (the caller discards the child otherwise)."""
        deadline = time.monotonic() + seconds
        self._follow_caller()
        if not self._write(_REQ.pack(op, engine, len(body)), body, deadline):
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

    def _follow_caller(self) -> None:
        """Inside on_one_cpu(): pin the child to the caller's CPU (once per CPU)."""
        cpu = getattr(_ONE_CPU, "cpu", None)
        if cpu is None or cpu == self.cpu:
            return
        try:
            os.sched_setaffinity(self.proc.pid, {cpu})
            self.cpu = cpu
        except OSError:  # the child is gone (the request will say so)
            self.cpu = None

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


_ONE_CPU = threading.local()


@contextlib.contextmanager
def on_one_cpu():
    """Run the calling thread, and the child processes it hands work to, on the one CPU the thread is
    on. The caller waits while its child works, so the two never need two CPUs at once, and a wake-up
    that crosses CPUs is dear in a VM: in this project's, a round trip to the child took 177-269 us
    across CPUs and 68-99 us on one. Only this thread's affinity changes, and it is restored on the way
    out, so keep the block to the request: a thread started inside it (a library's thread pool) would
    inherit the one CPU for good. Without sched_getcpu (not Linux/glibc) nothing changes."""
    cpu = _current_cpu()
    if cpu is None or getattr(_ONE_CPU, "cpu", None) is not None:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        yield
        return
    _ONE_CPU.cpu = cpu
    try:
        yield
    finally:
        _ONE_CPU.cpu = None
        os.sched_setaffinity(0, before)


def _current_cpu() -> int | None:
    """The CPU this thread runs on (glibc's sched_getcpu), None where it cannot be had."""
    global _SCHED_GETCPU
    if _SCHED_GETCPU is None:
        try:
            import ctypes

            _SCHED_GETCPU = ctypes.CDLL(None).sched_getcpu
        except (OSError, AttributeError):
            _SCHED_GETCPU = False
    if not _SCHED_GETCPU or not hasattr(os, "sched_setaffinity"):
        return None
    cpu = _SCHED_GETCPU()
    return cpu if cpu >= 0 else None


_SCHED_GETCPU = None


def _advance(parts: list[memoryview], sent: int) -> list[memoryview]:
    """What is left of `parts` after a write of `sent` bytes."""
    while parts and sent >= len(parts[0]):
        sent -= len(parts.pop(0))
    if parts:
        parts[0] = parts[0][sent:]
    return parts


class _Pool:
    """This process's children: checked out by one thread at a time, spawned on demand, per kind."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle: dict[str, list[_Child]] = {kind: [] for kind in _KINDS}
        self.children: set[_Child] = set()

    def _checkout(self, kind: str, engine: str) -> _Child:
        """An idle or new child of `kind` with `engine` loaded ("pdf": a PDF child's parser)."""
        reason, noun = _KINDS[kind]
        child = None
        with self.lock:
            idle = self.idle[kind]
            while idle:
                candidate = idle.pop()
                if candidate.alive():
                    child = candidate
                    break
                self.children.discard(candidate)
                candidate.kill()  # died while idle (killed from outside): reap it; nobody's page fails
        if child is None:
            try:
                child = _Child(kind)
            except OSError as err:
                raise SandboxError(reason, f"{noun} process failed to start: {err!r}"[:300]) from None
            with self.lock:
                self.children.add(child)
        if engine not in child.loaded:
            try:
                status, body = child.request(b"L", ENGINES.index(engine) if kind == "html" else 0, b"",
                                             STARTUP_TIMEOUT_S)
            except EOFError:
                status, body = b"D", b""
            except BaseException:
                self._discard(child)
                raise
            if status != b"O":
                code = self._discard(child)
                why = (body.decode("utf-8", "replace") if status == b"E" else
                       f"no answer in {STARTUP_TIMEOUT_S:.0f} s" if status is None else _exit_text(code))
                raise SandboxError(reason, f"{noun} process failed to start: {why}"[:300])
            child.loaded.add(engine)
        return child

    def _discard(self, child: _Child) -> int | None:
        code = child.kill()
        with self.lock:
            self.children.discard(child)
        return code

    def _release(self, child: _Child) -> None:
        with self.lock:
            self.idle[child.kind].append(child)

    def _ask(self, child: _Child, op: bytes, index: int, body: bytes, timeout_ms: float, one_cpu: bool,
             reasons: tuple[str, str], prefix: str = "") -> tuple[bytes, bytes]:
        """One request to an HTML child within `timeout_ms`: (status, answer), the child back in the pool;
        or the child discarded and SandboxError: reasons[0] when it died, reasons[1] past the deadline
        (each detail after `prefix`)."""
        try:
            with on_one_cpu() if one_cpu else contextlib.nullcontext():
                status, answer = child.request(op, index, body, timeout_ms / 1000)
        except EOFError:
            code = self._discard(child)
            raise SandboxError(reasons[0], f"{prefix}extractor process died: {_exit_text(code)}") from None
        except BaseException:  # interrupted mid-request (KeyboardInterrupt...): the pipes are out of step
            self._discard(child)
            raise
        if status is None:
            self._discard(child)
            raise SandboxError(reasons[1], f"{prefix}>{timeout_ms:g} ms (killed)")
        self._release(child)
        return status, answer

    def extract(self, html: str, engine: str, timeout_ms: float, utf8: bytes | None = None,
                one_cpu: bool = True) -> str:
        child = self._checkout("html", engine)
        page = utf8 if utf8 is not None else html.encode("utf-8", "replace")
        status, body = self._ask(child, b"X", ENGINES.index(engine), page, timeout_ms, one_cpu,
                                 ("extract_error", "extract_timeout"))
        if status == b"E":
            raise SandboxError("extract_error", body.decode("utf-8", "replace"))
        return body.decode("utf-8", "surrogatepass")

    def page_step(self, step: str, html: str, args: tuple, timeout_ms: float) -> object:
        try:
            child = self._checkout("html", "resiliparse")
        except SandboxError as err:
            raise SandboxError("page_error", f"{step}: {err.detail}") from None
        packed = pickle.dumps(args, protocol=5)
        body = b"".join((_STEP_ARGS.pack(len(packed)), packed, html.encode("utf-8", "replace")))
        status, answer = self._ask(child, b"S", list(PAGE_STEPS).index(step), body, timeout_ms, True,
                                   ("page_error", "page_timeout"), f"{step}: ")
        if status == b"R":
            raise SandboxError("page_error", f"{step}: {answer.decode('utf-8', 'replace')}"[:300])
        if status == b"E":
            raise PageStepError(f"page step {step} raised in the extractor process:\n"
                                f"{answer.decode('utf-8', 'replace')}")
        return _PlainUnpickler(io.BytesIO(answer)).load()

    def parse_pdf(self, data: bytes, timeout_ms: float, memory_mb: int, max_pages: int,
                  min_image_side: int) -> dict:
        child = self._checkout("pdf", "pdf")
        try:
            status, body = child.request(b"P", 0, _PDF_ARGS.pack(memory_mb, max_pages, min_image_side) + data,
                                         timeout_ms / 1000)
        except EOFError:
            code = self._discard(child)
            if code == -signal.SIGABRT:
                raise SandboxError("pdf_too_much_memory", f">{memory_mb} MB (parser process aborted)") from None
            raise SandboxError("pdf_parser_crashed", f"parser process died: {_exit_text(code)}") from None
        except BaseException:  # interrupted mid-request (KeyboardInterrupt...): the pipes are out of step
            self._discard(child)
            raise
        if status is None:
            self._discard(child)
            raise SandboxError("pdf_timeout", f">{timeout_ms:g} ms (killed)")
        if status == b"M":  # what a failed allocation left behind (PDFium's state, a huge heap) goes with it
            self._discard(child)
            raise SandboxError("pdf_too_much_memory", f">{memory_mb} MB")
        self._release(child)
        if status == b"E":
            raise SandboxError("pdf_parser_crashed", "parser raised " + body.decode("utf-8", "replace"))
        try:
            return _PlainUnpickler(io.BytesIO(body)).load()
        except pickle.UnpicklingError as err:
            raise SandboxError("pdf_parser_crashed", f"unexpected answer: {err}"[:300]) from None

    def close(self) -> None:
        with self.lock:
            children, self.children, self.idle = list(self.children), set(), {kind: [] for kind in _KINDS}
        for child in children:
            child.kill()


class _PlainUnpickler(pickle.Unpickler):
    """Loads containers, strings, bytes and numbers only: the child parses untrusted PDFs, and a
    parser taken over by one must not get code run in the worker by a pickle naming a callable."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} in a PDF result")


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


def _answer_html(op: bytes, engine: int, body: bytearray) -> tuple[bytes, bytes]:
    if op == b"S":
        return _answer_step(list(PAGE_STEPS)[engine], body)
    try:
        if op == b"L":
            run_engine("<p>warm up</p>", ENGINES[engine])  # imports the engine, touches its tables
            if ENGINES[engine] == "resiliparse":  # the page steps' modules too: no page pays their import
                for step in PAGE_STEPS:
                    _step_function(step)
            return b"O", b""
        return b"O", run_engine(body.decode("utf-8"), ENGINES[engine]).encode("utf-8", "surrogatepass")
    except Exception as err:
        return b"E", repr(err)[:300].encode("utf-8", "replace")


def _answer_step(step: str, body: bytearray) -> tuple[bytes, bytes]:
    (n,) = _STEP_ARGS.unpack_from(body)
    args = pickle.loads(body[_STEP_ARGS.size:_STEP_ARGS.size + n])  # from the parent: trusted
    html = body[_STEP_ARGS.size + n:].decode("utf-8")
    try:
        return b"O", pickle.dumps(_step_function(step)(html, *args), protocol=5)
    except Exception as err:
        import traceback

        return b"E", "".join(traceback.format_exception(err))[-4000:].encode("utf-8", "replace")
    except BaseException as err:
        if is_panic(err):
            return b"R", repr(err)[:300].encode("utf-8", "replace")
        raise


class _PdfServer:
    """A PDF child's answers: the parser is imported by the load request (before any deadline), and
    each document is parsed under its own address-space limit, lifted again before the answer is
    built and the next request is read."""

    def __init__(self):
        import resource

        self.parse = None
        # a parser that crashes (or aborts out of memory) must not dump a core of up to memory_mb
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def answer(self, op: bytes, body: bytearray) -> tuple[bytes, bytes]:
        import resource

        if op == b"L":
            try:
                module, _, name = os.environ.get("CURATE_PDF_PARSER", _PDF_PARSER).partition(":")
                self.parse = getattr(importlib.import_module(module), name)
                return b"O", b""
            except Exception as err:
                return b"E", repr(err)[:300].encode("utf-8", "replace")
        memory_mb, max_pages, min_image_side = _PDF_ARGS.unpack_from(body)
        with memoryview(body) as view:
            data = bytes(view[_PDF_ARGS.size:])
        body.clear()  # freed: a second copy of the PDF would count against the limit
        unlimited = resource.getrlimit(resource.RLIMIT_AS)
        hard = unlimited[1]
        limit = memory_mb << 20 if hard == resource.RLIM_INFINITY else min(memory_mb << 20, hard)
        try:
            try:
                resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
                # pickled under the limit too: the answer is part of what the document costs
                return b"O", pickle.dumps(self.parse(data, max_pages, min_image_side), protocol=5)
            finally:
                resource.setrlimit(resource.RLIMIT_AS, unlimited)
        except MemoryError:
            return b"M", b""
        except Exception as err:
            return b"E", repr(err)[:300].encode("utf-8", "replace")


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
    pdf = _PdfServer() if sys.argv[4] == "pdf" else None
    while True:
        request = _read_request(req_r)
        if request is None:
            os._exit(0)
        op, engine, body = request
        del request
        status, out = _answer_html(op, engine, body) if pdf is None else pdf.answer(op, body)
        del body
        _write_all(resp_w, _RESP.pack(status, len(out)), out)
