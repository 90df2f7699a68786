"""Rebuilds sample/mixed-dev-slice.warc.gz from ../shared/data/corpus/mixed-dev.warc.gz (dev machines only).

Keeps the warcinfo record and, for a chosen set of captures, their request/response/metadata gzip
members byte for byte, in the original order: the first 450 captures plus every duplicate, revisit,
non-HTML, HTTP-error, bad-charset and empty capture and the originals that duplicates point to.
"""

import json
import sys
from pathlib import Path

from fastwarc.warc import ArchiveIterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from extract.warc import _MemberSplitter  # noqa: E402

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/corpus/mixed-dev.warc.gz")
DST = Path(__file__).parent / "mixed-dev-slice.warc.gz"
EDGE = {"exact_dup", "near_dup", "revisit", "non_html", "http_error", "bad_charset", "empty"}

labels = [json.loads(line) for line in open(SRC.with_name("mixed-dev.labels.jsonl"))]
by_url = {lab["url"]: lab for lab in labels}
keep = {lab["record_id"] for lab in labels[:450]}
for lab in labels:
    if lab["category"] in EDGE:
        keep.add(lab["record_id"])
        if lab["dup_of"] in by_url:
            keep.add(by_url[lab["dup_of"]]["record_id"])

raw = SRC.read_bytes()
members = []
with open(SRC, "rb") as fh:
    for offset, data, _ in _MemberSplitter(fh, 1 << 30):
        rec = next(iter(ArchiveIterator(__import__("io").BytesIO(data), parse_http=False)))
        members.append((offset, str(rec.record_type), rec.headers.get("WARC-Record-ID")))
ends = [m[0] for m in members[1:]] + [len(raw)]
chosen = []
for i, (offset, rtype, rid) in enumerate(members):
    if rtype == "warcinfo" or (rtype in ("response", "revisit") and rid in keep):
        chosen.append(i)
        if i > 0 and members[i - 1][1] == "request":
            chosen.append(i - 1)
        if i + 1 < len(members) and members[i + 1][1] == "metadata":
            chosen.append(i + 1)
with open(DST, "wb") as out:
    for i in sorted(set(chosen)):
        out.write(raw[members[i][0]:ends[i]])
kept = [lab for lab in labels if lab["record_id"] in keep]
with open(DST.with_suffix("").with_suffix(".labels.jsonl"), "w") as out:
    for lab in kept:
        out.write(json.dumps(lab) + "\n")
print(f"{DST}: {len(set(chosen))} records, {len(kept)} labelled captures, {DST.stat().st_size} bytes")
