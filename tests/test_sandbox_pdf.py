"""PDFs are parsed in the sandbox's PDF children: a deadline (SIGKILL), an address-space limit that
does not reach the HTML children, and a child that dies costs its document only. The parser in the
children is tests/sandbox_targets.py's (real PDFium for PDFs, misbehaviour on command), except in
the last tests, which run extract.pdf's."""

import functools
import os
import pickle
import signal
import threading
import time
import zlib
from pathlib import Path

import pytest

import extract.pdf
from extract import sandbox
from tests.sandbox_targets import address_space_limit
from tests.test_extract_bound import children_of, nested_divs, wait_gone
from tests.test_pdf import pdf as write_pdf

ROOT = Path(__file__).resolve().parents[1]
REAL_PDFS = sorted((ROOT / "tests" / "data" / "pdf").glob("*.pdf"))


def build_pdf(pages: list[str], image_side: int = 0, zero_image: bool = False, padding_mb: int = 0) -> bytes:
    """A valid PDF (xref and all) of one page per text, in Helvetica; with `image_side`, page 1 also
    shows an RGB image of that side, a gradient or (`zero_image`) zeros, which Flate squeezes ~1000:1:
    a small file that PDFium decodes to side^2 x 3 bytes. With `padding_mb`, page 1's content stream
    starts with that many MB of spaces, Flate-compressed likewise, which PDFium decodes whole."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", None,
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    def stream(head: bytes, data: bytes) -> bytes:
        return b"<< " + head + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"

    def flate(chunks) -> bytes:
        pack = zlib.compressobj(9)
        return b"".join(pack.compress(chunk) for chunk in chunks) + pack.flush()

    image = 0
    if image_side:
        row = bytes(image_side * 3) if zero_image else bytes(x % 251 for x in range(image_side * 3))
        image = add(stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB "
                           b"/BitsPerComponent 8 /Filter /FlateDecode" % (image_side, image_side),
                           flate(row for _ in range(image_side))))
    kids = []
    for number, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")
        content = b"BT /F1 18 Tf 72 720 Td (" + escaped + b") Tj ET"
        resources = b"/Font << /F1 3 0 R >>"
        if image and number == 0:
            content += b" q 300 0 0 300 72 300 cm /Im1 Do Q"
            resources += b" /XObject << /Im1 %d 0 R >>" % image
        if padding_mb and number == 0:
            spaces = b" " * (1 << 20)
            contents = add(stream(b"/Filter /FlateDecode", flate([spaces] * padding_mb + [content])))
        else:
            contents = add(stream(b"", content))
        kids.append(add(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                        b"/Resources << %s >> >>" % (contents, resources)))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    return write_pdf(objects)


NORMAL = build_pdf(["First page of the report.", "Second page (with parentheses).", "Third and last page."],
                   image_side=200)


@functools.cache
def image_bomb() -> bytes:  # ~50 kB; built when first needed, not when tests are collected
    return build_pdf(["A page whose image decodes to 48 MB."], image_side=4000, zero_image=True)


@functools.cache
def content_bomb() -> bytes:  # ~200 kB
    return build_pdf(["A page whose content stream decodes to 200 MB."], padding_mb=200)


def pdf(data: bytes, timeout_ms: float = 10_000, memory_mb: int = 1024, max_pages: int = 500,
        min_image_side: int = 150) -> dict:
    return sandbox.parse_pdf(data, timeout_ms, memory_mb, max_pages, min_image_side)


def failure(data: bytes, **kwargs) -> tuple[str, str]:
    with pytest.raises(sandbox.SandboxError) as err:
        pdf(data, **kwargs)
    return err.value.reason, err.value.detail


def assert_parses_normally() -> None:
    result = pdf(NORMAL)
    assert result["pages"] == 3
    texts = [n["text"] for n in result["nodes"] if n["type"] == "text"]
    assert texts == ["First page of the report.", "Second page (with parentheses).", "Third and last page."]
    (image,) = [n for n in result["nodes"] if n["type"] == "image"]
    assert image["page"] == 1 and len(image["bytes"]) == 200 * 200 * 3


def pdf_child() -> int:
    (pid,) = sandbox.child_pids("pdf")
    return pid


@pytest.fixture(autouse=True, scope="module")
def targets_parser():
    """tests/sandbox_targets.py's parser in every PDF child of this module; no child outlives it."""
    sandbox.shutdown()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CURATE_PDF_PARSER", "tests.sandbox_targets:parse")
        yield
        sandbox.shutdown()


def test_a_pdf_and_its_arguments_go_through_and_its_result_comes_back():
    assert_parses_normally()
    payload = b"echo" + os.urandom(3 << 20)  # over the pipes' 1 MiB both ways
    result = pdf(payload, memory_mb=700, max_pages=7, min_image_side=99)
    assert result["pages"] == 7 and result["nodes"][0]["side"] == 99 and result["nodes"][0]["bytes"] == payload
    assert result["address_space"] == str(700 << 20)  # the limit holds while the document is parsed...
    assert result["pid"] == pdf_child() and result["pid"] not in sandbox.child_pids("html")
    assert address_space_limit(result["pid"]) == address_space_limit()  # ...and is lifted after it
    assert pdf(b"echo", memory_mb=900)["address_space"] == str(900 << 20)  # each document its own limit


def test_a_hanging_parser_is_killed_at_the_deadline_and_the_next_pdf_parses():
    pdf(b"echo")  # the child up and its parser loaded: start-up is not charged to a document
    hung = pdf_child()
    started = time.monotonic()
    assert failure(b"hang", timeout_ms=300) == ("pdf_timeout", ">300 ms (killed)")
    assert 0.3 <= time.monotonic() - started < 1.5
    assert sandbox.child_pids("pdf") == [] and wait_gone(hung, 1)  # killed and reaped
    assert_parses_normally()
    assert pdf_child() != hung  # a fresh child


def test_a_segfault_costs_its_document_only():
    pdf(b"echo")
    crashed = pdf_child()
    assert failure(b"segfault") == ("pdf_parser_crashed", "parser process died: signal 11")
    assert_parses_normally()
    assert pdf_child() != crashed


def test_a_child_killed_mid_document_costs_that_document_only():
    pdf(b"echo")
    victim, outcome = pdf_child(), {}

    def parse():
        try:
            pdf(b"hang", timeout_ms=60_000)
        except sandbox.SandboxError as err:
            outcome["err"] = err

    worker = threading.Thread(target=parse)
    started = time.monotonic()
    worker.start()
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)  # what the kernel's OOM killer does too
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 2
    assert (outcome["err"].reason, outcome["err"].detail) == ("pdf_parser_crashed", "parser process died: signal 9")
    assert_parses_normally()
    assert pdf_child() != victim


def test_a_parser_over_its_memory_limit_costs_its_document_only():
    pdf(b"echo")
    greedy = pdf_child()
    # a MemoryError in the child (512 MB asked under a 256 MB limit): answered as such
    assert failure(b"allocate", memory_mb=256, max_pages=512) == ("pdf_too_much_memory", ">256 MB")
    assert wait_gone(greedy, 1) and sandbox.child_pids("pdf") == []  # replaced, not reused
    assert pdf(b"allocate", memory_mb=1024, max_pages=512)["pages"] == 512  # the same under a larger one
    # PDFium decoding an image 48 MB large in a 64 MB address space: it aborts (FX_OutOfMemoryTerminate)
    assert failure(image_bomb(), memory_mb=64) == ("pdf_too_much_memory", ">64 MB (parser process aborted)")
    assert_parses_normally()  # the next document, in a fresh child
    (image,) = [n for n in pdf(image_bomb(), memory_mb=1024)["nodes"] if n["type"] == "image"]
    assert len(image["bytes"]) == 4000 * 4000 * 3


def test_a_parser_that_raises_or_answers_oddly_costs_its_document_only():
    pdf(b"echo")
    child = pdf_child()
    assert failure(b"raise") == ("pdf_parser_crashed", "parser raised ValueError('not a parser')")
    reason, detail = failure(b"foreign")  # a pickle that names a callable is never loaded
    assert reason == "pdf_parser_crashed" and detail.startswith("unexpected answer") and "ValueError" in detail
    assert pdf_child() == child  # it answered: the child stays
    assert_parses_normally()


def test_a_sandbox_error_unpacks_and_pickles():
    """Callers unpack (reason, detail) from `args`; Beam may pickle an exception with its element."""
    with pytest.raises(sandbox.SandboxError) as caught:
        pdf(b"raise")
    err = caught.value
    assert err.args == (err.reason, err.detail) and str(err) == f"{err.reason}: {err.detail}"
    again = pickle.loads(pickle.dumps(err))
    assert (again.reason, again.detail, str(again)) == (err.reason, err.detail, str(err))


def test_html_extraction_works_alongside_without_a_memory_limit():
    assert_parses_normally()
    assert sandbox.extract(nested_divs(400), "resiliparse", 5000) == "deep text"
    (html_child,) = sandbox.child_pids("html")
    assert html_child != pdf_child()
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(err=failure(b"hang", timeout_ms=1500, memory_mb=300)))
    worker.start()
    time.sleep(0.5)  # the PDF child is mid-document, under its limit
    assert address_space_limit(pdf_child()) == str(300 << 20)
    assert address_space_limit(html_child) == address_space_limit() == "unlimited"
    assert sandbox.extract(nested_divs(500), "trafilatura", 10_000) == sandbox.run_engine(nested_divs(500),
                                                                                          "trafilatura")
    worker.join(10)
    assert outcome["err"][0] == "pdf_timeout"
    assert_parses_normally()
    assert sandbox.child_pids("html") == [html_child]  # the PDF child's deaths never touched it
    assert sorted(sandbox.child_pids()) == sorted([html_child, pdf_child()])


def test_no_processes_leak():
    me = os.getpid()
    for command in (b"segfault", b"abort", b"hang", b"allocate"):
        with pytest.raises(sandbox.SandboxError):
            pdf(command, timeout_ms=500, memory_mb=128, max_pages=256)
    assert_parses_normally()
    live = children_of(me)
    assert not [pid for pid, state in live.items() if state == "Z"]  # every dead child was reaped
    sandbox.shutdown()
    assert sandbox.child_pids() == [] and not set(children_of(me)) & set(live)


# ------------------------------------------------------------------------------- extract.pdf itself
@pytest.fixture
def production_parser(monkeypatch):
    """The children run extract.pdf.parse_pdf, as in production."""
    monkeypatch.delenv("CURATE_PDF_PARSER")
    sandbox.shutdown()
    yield
    sandbox.shutdown()


@pytest.mark.parametrize("name", [p.name for p in REAL_PDFS] + ["generated"])
def test_the_child_gives_what_extract_pdf_gives_in_process(production_parser, name):
    data = NORMAL if name == "generated" else (ROOT / "tests" / "data" / "pdf" / name).read_bytes()
    assert pdf(data, timeout_ms=30_000, memory_mb=2048) == extract.pdf.parse_pdf(data, 500, 150)


def test_extract_pdf_over_a_tiny_limit_and_the_next_pdf_in_a_fresh_child(production_parser):
    expected = extract.pdf.parse_pdf(NORMAL, 500, 150)
    assert pdf(NORMAL, memory_mb=64) == expected  # a normal PDF fits in 64 MB, interpreter and all
    first = pdf_child()
    # PDFium decodes the 200 MB content stream into one buffer: its allocation fails, and PDFium aborts
    assert failure(content_bomb(), memory_mb=64) == ("pdf_too_much_memory", ">64 MB (parser process aborted)")
    assert pdf(NORMAL, memory_mb=1024) == expected
    assert pdf_child() != first
