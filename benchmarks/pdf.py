"""Benchmark the PDF parsing of the interleaved branch against a bare pypdfium2 loop, in one process.

Over the same PDFs (the PDF responses of a WARC, default ../shared/data/interleaved/pdf-dev.warc.gz,
present on dev machines only), repeated --repeat times:

- `bare`: pypdfium2 alone: open, per page the text page's full text and every image object (Form
  XObjects included) with its encoded data, close: the physical reference for "text + image objects";
- `in_process`: extract.pdf.parse_pdf (the same, plus line/block grouping, XY-cut reading order,
  captions, size rules);
- `sandboxed`: extract.sandbox.parse_pdf, what the pipeline's stage runs: the same in a child process
  with a deadline and a memory limit, the PDF and the result pickled over pipes.

Prints one JSON object: pages/s of each (one core: the parent waits while the child parses), the
ratio sandboxed / bare (goal >= 0.8), and the sandbox's overhead per document (sandboxed - in_process).
Unreadable PDFs (encrypted, broken) count as documents with 0 pages in every variant.

    .venv/bin/python benchmarks/pdf.py [--warc PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.record import record  # noqa: E402

DEFAULT_WARC = Path(__file__).resolve().parents[2] / "shared" / "data" / "interleaved" / "pdf-dev.warc.gz"
TIMEOUT_MS, MEMORY_MB, MAX_PAGES, MIN_SIDE = 60_000, 2048, 500, 150


def pdf_payloads(path: Path) -> list[bytes]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    out = []
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True):
            if "pdf" in (rec.http_headers.get("Content-Type") or "").lower():
                out.append(rec.reader.read())
    return out


def bare(data: bytes) -> int:
    """Pages read by the bare loop (0 if PDFium cannot open the file)."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError:
        return 0
    pages = len(pdf)
    for i in range(pages):
        page = pdf[i]
        text = page.get_textpage()
        text.get_text_range()
        for obj in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=15):
            obj.get_data(decode_simple=False)
        text.close()
        page.close()
    pdf.close()
    return pages


def timed(fn, docs: list[bytes]) -> tuple[float, int]:
    gc.collect()
    gc.disable()
    try:
        start, pages = time.perf_counter(), 0
        for data in docs:
            pages += fn(data)
        return time.perf_counter() - start, pages
    finally:
        gc.enable()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--repeat", type=int, default=3, help="passes over the PDFs (default 3)")
    args = ap.parse_args(argv)
    if not args.warc.exists():
        raise SystemExit(f"WARC not found: {args.warc} (pass --warc PATH)")
    from extract import pdf as pdf_parser
    from extract import sandbox

    docs = pdf_payloads(args.warc) * args.repeat

    def in_process(data):
        return pdf_parser.parse_pdf(data, MAX_PAGES, MIN_SIDE)["pages"]

    def sandboxed(data):
        try:
            return sandbox.parse_pdf(data, TIMEOUT_MS, MEMORY_MB, MAX_PAGES, MIN_SIDE)["pages"]
        except sandbox.SandboxError:
            return 0

    sandboxed(docs[0])  # the child's start-up and PDFium import are not a document's cost
    results = {}
    for name, fn in (("bare", bare), ("in_process", in_process), ("sandboxed", sandboxed)):
        seconds, pages = timed(fn, docs)
        results[name] = {"seconds": round(seconds, 3), "pages": pages, "pages_per_s": round(pages / seconds, 1)}
    bare_rate = results["bare"]["pages_per_s"]
    out = {
        "benchmark": "PDF parsing (extract/pdf.py, extract/sandbox.py) vs a bare pypdfium2 loop",
        "warc": str(args.warc), "documents": len(docs), "repeat": args.repeat,
        "results": results,
        "sandboxed_vs_bare": round(results["sandboxed"]["pages_per_s"] / bare_rate, 3),
        "in_process_vs_bare": round(results["in_process"]["pages_per_s"] / bare_rate, 3),
        "sandbox_overhead_ms_per_document": round(
            1000 * (results["sandboxed"]["seconds"] - results["in_process"]["seconds"]) / len(docs), 2),
        "goal": "sandboxed_vs_bare >= 0.8",
        "env": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "machine": platform.machine()},
    }
    print(json.dumps(out, indent=2))
    record(__file__, {"documents": out["documents"], "sandboxed vs bare pypdfium2": f"{out['sandboxed_vs_bare']}x",
                      "in process vs bare": f"{out['in_process_vs_bare']}x",
                      "sandbox, ms a document": out["sandbox_overhead_ms_per_document"]}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
