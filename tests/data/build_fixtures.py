"""Rebuilds tests/data/warc/mini.warc.gz from the bundled sample (sample/mixed-dev-slice.warc.gz).

Keeps, byte for byte and in order, the gzip members of a fixed, category-balanced set of captures
(request + response + metadata), chosen by label from sample/mixed-dev-slice.labels.jsonl.
"""

import io
import json
import sys
from pathlib import Path

from fastwarc.warc import ArchiveIterator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from extract.warc import _MemberSplitter  # noqa: E402

SRC = ROOT / "sample" / "mixed-dev-slice.warc.gz"
DST = Path(__file__).parent / "warc" / "mini.warc.gz"
QUOTA = {"human": 10, "llm": 4, "poor_mt": 2, "low_quality": 6, "exact_dup": 3, "near_dup": 2,
         "non_html": 2, "http_error": 1, "revisit": 1, "empty": 1, "bad_charset": 1, "image_icon": 1,
         "multimodal": 1}
LANGS = {"zh": 2, "de": 1}  # extra human pages in these languages

labels = [json.loads(line) for line in open(SRC.with_suffix("").with_suffix(".labels.jsonl"))]
by_url = {lab["url"]: lab for lab in labels}
keep, taken = set(), {}
for lab in labels:
    cat = lab["category"]
    want = QUOTA.get(cat, 0)
    if cat == "human" and lab["lang"] in LANGS and taken.get(lab["lang"], 0) < LANGS[lab["lang"]]:
        taken[lab["lang"]] = taken.get(lab["lang"], 0) + 1
    elif taken.get(cat, 0) >= want or (cat == "human" and lab["lang"] != "en"):
        continue
    else:
        taken[cat] = taken.get(cat, 0) + 1
    keep.add(lab["record_id"])
    if lab["dup_of"] in by_url:
        keep.add(by_url[lab["dup_of"]]["record_id"])

raw = SRC.read_bytes()
members = []
with open(SRC, "rb") as fh:
    for offset, data, _ in _MemberSplitter(fh, 1 << 30):
        rec = next(iter(ArchiveIterator(io.BytesIO(data), parse_http=False)))
        members.append((offset, str(rec.record_type), rec.headers.get("WARC-Record-ID")))
ends = [m[0] for m in members[1:]] + [len(raw)]
chosen = set()
for i, (_, rtype, rid) in enumerate(members):
    if rtype == "warcinfo" or (rtype in ("response", "revisit") and rid in keep):
        chosen.add(i)
        if i > 0 and members[i - 1][1] == "request":
            chosen.add(i - 1)
        if i + 1 < len(members) and members[i + 1][1] == "metadata":
            chosen.add(i + 1)
DST.parent.mkdir(parents=True, exist_ok=True)
with open(DST, "wb") as out:
    for i in sorted(chosen):
        out.write(raw[members[i][0]:ends[i]])
with open(DST.with_suffix("").with_suffix(".labels.jsonl"), "w") as out:
    for lab in labels:
        if lab["record_id"] in keep:
            out.write(json.dumps({k: lab[k] for k in ("record_id", "url", "category", "lang", "dup_of", "source")}) + "\n")
print(f"{DST}: {len(chosen)} records, {len(keep)} captures, {DST.stat().st_size} bytes")
