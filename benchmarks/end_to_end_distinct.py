"""End to end on distinct real pages: `curate run` (every stage, default config) with 1 and 2 local workers
against datatrove's FineWeb recipe and a bare fastwarc + resiliparse loop, as end_to_end.py, over pages none
of which occurs twice: every page of three human-annotated extraction benchmarks and the labelled dev corpus.

    python benchmarks/end_to_end_distinct.py --wcxb DIR --snippets DIR [--scrapinghub DIR] [--warc PATH]
        [--work DIR] [--workers 1 2] [--tries 1] [--datatrove-python PYTHON]

end_to_end.py measures copies of one WARC, which are exact duplicates: from the exact-dedup stage on, a run
carries one copy's documents, and the dedup, cross-lingual, packing and interleaved stages have little to
do. Here each page is a different page, so every stage works on every page, as on a crawl.
--wcxb: a checkout of github.com/Murrough-Foley/web-content-extraction-benchmark (CC-BY-4.0; 2,008 pages);
--snippets: the `tests` folder of github.com/adbar/trafilatura (Apache-2.0; `evaldata.json`, 990 pages);
--scrapinghub: ../shared/data/html/scrapinghub_aeb (181 pages); --warc: mixed-dev (1,692 pages), copied as
it is. The extraction benchmarks' pages become WARC response records here (the page's bytes as saved, under
its recorded URL, a fixed capture date, HTTP 200, `Content-Type: text/html` without a charset: the charset
is detected, as for a server that sends none), one gzip member each, PAGES_PER_FILE to a file, into
--work (kept between runs). Their pages have no image responses beside them: the image branches find their
images missing, as for a crawl without them. Prints one JSON object, end_to_end.py's keys less `fixed_s`,
with `sources` (the files and their pages); the budget is over these pages.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.end_to_end import (DEFAULT_WARC, compare_size, count_pages, datatrove_version,  # noqa: E402
                                   headline_of, timed_budget)
from benchmarks.extraction_eval import DEFAULT_DATA as DEFAULT_SCRAPINGHUB  # noqa: E402
from benchmarks.extraction_eval import snippet_file  # noqa: E402
from benchmarks.record import record  # noqa: E402

PAGES_PER_FILE = 1000
CAPTURED = "2026-01-01T00:00:00Z"


def wcxb(root: Path):
    """(url, page bytes) of every WCXB page, dev and test (a page without a recorded URL under its domain in
    metadata.json and its file id)."""
    files = json.loads((root / "metadata.json").read_text())["files"]
    domains = {key: entry.get("domain") for key, entry in files.items()}
    for split in ("dev", "test"):
        for truth in sorted((root / split / "ground-truth").glob("*.json")):
            page = root / split / "html" / f"{truth.stem}.html.gz"
            if page.is_file():
                url = json.loads(truth.read_text()).get("url")
                yield url or f"https://{domains.get(truth.stem)}/wcxb-{truth.stem}", gzip.decompress(page.read_bytes())


def snippets(root: Path):
    """(url, page bytes) of every page of trafilatura's evaluation set."""
    data = json.loads((root / "evaldata.json").read_text())
    for url in sorted(data):
        path = snippet_file(root, data[url]["file"])
        if path is not None:
            yield url, path.read_bytes()


def scrapinghub(root: Path):
    """(url, page bytes) of every page of scrapinghub's article-extraction benchmark."""
    truth = json.loads((root / "ground-truth.json").read_text())
    for key in sorted(truth):
        page = root / "html" / f"{key}.html.gz"
        if page.is_file():
            yield truth[key]["url"], gzip.decompress(page.read_bytes())


def response_record(source: str, url: str, body: bytes) -> bytes:
    """One gzip member: a WARC response record of an HTTP 200 text/html answer with `body`."""
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    record_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{source} {url}")
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{record_id}>\r\n"
            f"WARC-Date: {CAPTURED}\r\nWARC-Target-URI: {url}\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n")
    return gzip.compress(head.encode("utf-8") + http + b"\r\n\r\n", compresslevel=6, mtime=0)


def write(out: Path, sources: dict) -> None:
    """Each source's pages as response records into `out`, PAGES_PER_FILE to a file named after the source."""
    out.mkdir(parents=True)
    for name, pages in sources.items():
        batch, index = [], 0
        for url, body in pages:
            batch.append(response_record(name, url, body))
            if len(batch) == PAGES_PER_FILE:
                (out / f"{name}-{index:03d}.warc.gz").write_bytes(b"".join(batch))
                batch, index = [], index + 1
        if batch:
            (out / f"{name}-{index:03d}.warc.gz").write_bytes(b"".join(batch))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wcxb", type=Path, required=True)
    ap.add_argument("--snippets", type=Path, required=True)
    ap.add_argument("--scrapinghub", type=Path, default=DEFAULT_SCRAPINGHUB)
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "curate-end-to-end-distinct")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tries", type=int, default=1, help="runs per setting; the fastest is reported")
    ap.add_argument("--datatrove-python", default=sys.executable,
                    help="a Python with datatrove's FineWeb recipe installed (as end_to_end.py's --datatrove-python)")
    args = ap.parse_args()
    folder = args.work / "in"
    if not folder.is_dir():
        partial = args.work / "in.partial"
        shutil.rmtree(partial, ignore_errors=True)
        write(partial, {"wcxb": wcxb(args.wcxb), "snippets": snippets(args.snippets),
                        "scrapinghub": scrapinghub(args.scrapinghub)})
        shutil.copyfile(args.warc, partial / args.warc.name)
        partial.rename(folder)
    files = sorted(str(f) for f in folder.glob("*.warc.gz"))
    pages = {Path(f).name: count_pages(Path(f)) for f in files}
    inp = {"files": files, "pages": sum(pages.values()), "bytes": sum(Path(f).stat().st_size for f in files)}
    result = {"sources": pages, "cores": os.cpu_count(), "inputs": {}, "curate": {}, "bare": {},
              "datatrove": {"version": datatrove_version(args.datatrove_python)}}
    compare_size(result, inp["pages"], inp, folder, args.workers, args.tries, args.datatrove_python)
    result["budget"] = timed_budget(files, inp["pages"])
    print(json.dumps(result, indent=2))
    record(__file__, headline_of(result), result)


if __name__ == "__main__":
    main()
