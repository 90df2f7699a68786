"""A PDF parser for the sandbox's PDF children in tests (extract/sandbox.py's CURATE_PDF_PARSER hook:
CURATE_PDF_PARSER=tests.sandbox_targets:parse). It has extract.pdf.parse_pdf's signature; a PDF is
parsed for real (PDFium), anything else names what a parser may do to its process: b"hang",
b"segfault", b"abort", b"allocate" (`max_pages` MB), b"raise", b"foreign" (a result that pickles by
reference), or b"echo..." (the request back)."""

import os
import signal
import time

import pypdfium2  # imported when the child loads its parser, as extract.pdf does, not under the limit


def parse(data: bytes, max_pages: int, min_image_side: int) -> dict:
    if data.startswith(b"%PDF"):
        return pdfium(data, max_pages, min_image_side)
    if data == b"hang":
        time.sleep(3600)  # signals aside, as unstoppable as a native loop: only the deadline's SIGKILL ends it
    elif data == b"segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif data == b"abort":
        os.abort()  # what PDFium does when an allocation fails
    elif data == b"allocate":
        block = bytearray(max_pages << 20)
        return {"reason": None, "detail": "", "pages": len(block) >> 20, "nodes": []}
    elif data == b"raise":
        raise ValueError("not a parser")
    elif data == b"foreign":
        return {"reason": None, "detail": "", "pages": 1, "nodes": [ValueError("by reference")]}
    elif data.startswith(b"echo"):
        return {"reason": None, "detail": "", "pages": max_pages,
                "nodes": [{"type": "image", "page": 1, "index": 0, "side": min_image_side, "bytes": data}],
                "pid": os.getpid(), "address_space": address_space_limit()}
    raise AssertionError(f"unknown command {data[:20]!r}")


def address_space_limit(pid: int | str = "self") -> str:
    """The soft RLIMIT_AS of a process as /proc/PID/limits shows it ("unlimited" or bytes)."""
    with open(f"/proc/{pid}/limits") as f:
        return next(line.split()[3] for line in f if line.startswith("Max address space"))


def pdfium(data: bytes, max_pages: int, min_image_side: int) -> dict:
    """A small real parser: PDFium's text of every page, and every image XObject's decoded data (which
    PDFium allocates in full, however large the image declares itself)."""
    doc = pypdfium2.PdfDocument(data)
    nodes = []
    for number in range(min(len(doc), max_pages)):
        page = doc[number]
        nodes.append({"type": "text", "page": number + 1, "text": page.get_textpage().get_text_bounded()})
        for index, image in enumerate(page.get_objects(filter=[pypdfium2.raw.FPDF_PAGEOBJ_IMAGE])):
            if min(image.get_px_size()) >= min_image_side:
                nodes.append({"type": "image", "page": number + 1, "index": index,
                              "bytes": bytes(image.get_data(decode_simple=True))})
    return {"reason": None, "detail": "", "pages": len(doc), "nodes": nodes}
