"""benchmarks/end_to_end_distinct.py's WARC files of distinct pages: each page of a benchmark's layout (two real
WCXB pages, tests/data/extraction_wcxb) becomes one response record that the pipeline's reader and fastwarc
read back with its URL and its bytes unchanged, and that `curate extract` takes as the page it is."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks import end_to_end_distinct as distinct
from benchmarks.end_to_end import count_pages
from extract.warc import iter_records

FIXTURES = Path(__file__).parent / "data" / "extraction_wcxb"


def test_each_page_is_one_response_record_with_its_url_and_bytes(tmp_path):
    root = tmp_path / "wcxb"
    (root / "dev" / "html").mkdir(parents=True)
    (root / "dev" / "ground-truth").mkdir()
    metadata = {"files": {}}
    for page in sorted(FIXTURES.glob("*.html.gz")):
        key = page.name.split(".")[0]
        shutil.copy(page, root / "dev" / "html" / page.name)
        truth = json.loads((FIXTURES / f"{key}.json").read_text())
        (root / "dev" / "ground-truth" / f"{key}.json").write_text(json.dumps({"url": truth["url"]}))
        metadata["files"][key] = {"domain": "example.org"}
    (root / "metadata.json").write_text(json.dumps(metadata))
    pages = list(distinct.wcxb(root))
    assert len(pages) == 2 and all(url.startswith("https://") for url, _ in pages)

    out = tmp_path / "in"
    distinct.write(out, {"wcxb": iter(pages)})
    [warc] = sorted(out.glob("*.warc.gz"))
    assert count_pages(warc) == 2
    with open(warc, "rb") as fh:
        records = [r for r in iter_records(fh) if getattr(r, "payload", None) is not None]
    assert [(r.url, r.payload) for r in records] == pages
    assert len({r.record_id for r in records}) == 2

    texts = tmp_path / "texts.jsonl"
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "extract", "--input", str(warc), "--output",
                           str(texts)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in texts.read_text().splitlines()]
    assert [row["url"] for row in rows] == [url for url, _ in pages] and all(row.get("text") for row in rows)
    assert gzip.decompress(warc.read_bytes()).count(b"WARC-Type: response") == 2
