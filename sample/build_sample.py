"""Rebuilds sample/mixed-dev-slice.warc.gz from ../shared/data/corpus/mixed-dev.warc.gz (dev machines only).

Keeps the warcinfo record and, for a chosen set of captures, their request/response/metadata gzip
members byte for byte, in the original order: the first 450 captures plus every duplicate, revisit,
non-HTML, HTTP-error, bad-charset, empty and multimodal capture, every stored photo and its copies,
and the originals that duplicates point to.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from extract.warc import slice_captures  # noqa: E402

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/corpus/mixed-dev.warc.gz")
DST = Path(__file__).parent / "mixed-dev-slice.warc.gz"
EDGE = {"exact_dup", "near_dup", "revisit", "non_html", "http_error", "bad_charset", "empty", "multimodal",
        "image", "image_near_dup", "image_exact_dup"}

labels = [json.loads(line) for line in open(SRC.with_name("mixed-dev.labels.jsonl"))]
by_url = {lab["url"]: lab for lab in labels}
keep = {lab["record_id"] for lab in labels[:450]}
for lab in labels:
    if lab["category"] in EDGE:
        keep.add(lab["record_id"])
        if lab["dup_of"] in by_url:
            keep.add(by_url[lab["dup_of"]]["record_id"])

n_records = slice_captures(str(SRC), str(DST), keep)
kept = [lab for lab in labels if lab["record_id"] in keep]
with open(DST.with_suffix("").with_suffix(".labels.jsonl"), "w") as out:
    for lab in kept:
        out.write(json.dumps(lab) + "\n")
print(f"{DST}: {n_records} records, {len(kept)} labelled captures, {DST.stat().st_size} bytes")
