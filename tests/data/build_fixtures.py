"""Rebuilds tests/data/warc/mini.warc.gz from the bundled sample (sample/mixed-dev-slice.warc.gz).

Keeps, byte for byte and in order, the gzip members of a fixed, category-balanced set of captures
(request + response + metadata), chosen by label from sample/mixed-dev-slice.labels.jsonl.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from extract.warc import slice_captures  # noqa: E402

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

DST.parent.mkdir(parents=True, exist_ok=True)
n_records = slice_captures(str(SRC), str(DST), keep)
with open(DST.with_suffix("").with_suffix(".labels.jsonl"), "w") as out:
    for lab in labels:
        if lab["record_id"] in keep:
            out.write(json.dumps({k: lab[k] for k in ("record_id", "url", "category", "lang", "dup_of", "source")}) + "\n")
print(f"{DST}: {n_records} records, {len(keep)} captures, {DST.stat().st_size} bytes")
