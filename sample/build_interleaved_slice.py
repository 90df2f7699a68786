"""Rebuilds sample/interleaved-dev-slice.warc.gz from ../shared/data/interleaved/interleaved-dev.warc.gz
(dev machines only): the captures of a few real pages with real figures and photos, and of every image
they reference that the source WARC stores, byte for byte and in the original order; their labels go
to interleaved-dev-slice.labels.jsonl. The pages: W3C i18n articles with figures (one of them in three
languages, two sharing their images) and a Distill essay with photos."""

import json
import sys
from pathlib import Path

from fastwarc.warc import ArchiveIterator, WarcRecordType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from extract.warc import slice_captures  # noqa: E402

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/interleaved/interleaved-dev.warc.gz")
DST = Path(__file__).parent / "interleaved-dev-slice.warc.gz"
PAGES = ["https://www.w3.org/International/questions/qa-ruby.en.html",
         "https://www.w3.org/International/questions/qa-resizing-backgrounds.en.html",
         "https://www.w3.org/International/questions/qa-bidi-unicode-controls.en.html",
         "https://www.w3.org/International/questions/qa-backwards-deletion.en.html",
         "https://www.w3.org/International/questions/qa-what-is-encoding.en.html",
         "https://www.w3.org/International/questions/qa-what-is-encoding.de.html",
         "https://www.w3.org/International/questions/qa-what-is-encoding.fr.html",
         "https://www.w3.org/International/questions/qa-byte-order-mark.en.html",
         "https://www.w3.org/International/questions/qa-byte-order-mark.de.html",
         "https://distill.pub/2017/research-debt/"]

labels = [json.loads(line) for line in open(SRC.with_name("interleaved-dev.labels.jsonl"))]
chosen = [lab for lab in labels if lab["url"] in PAGES]
if len(chosen) != len(PAGES):
    sys.exit(f"pages not in the labels: {sorted(set(PAGES) - {lab['url'] for lab in chosen})}")
images = {url for lab in chosen for url in lab["in_warc_image_urls"]}
keep = {lab["warc_record_id"] for lab in chosen}
with open(SRC, "rb") as fh:
    for rec in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=False):
        if rec.headers.get("WARC-Target-URI") in images:
            keep.add(rec.headers.get("WARC-Record-ID"))
n_records = slice_captures(str(SRC), str(DST), keep)
with open(DST.with_suffix("").with_suffix(".labels.jsonl"), "w") as out:
    for lab in chosen:
        out.write(json.dumps(lab) + "\n")
print(f"{DST}: {n_records} records, {len(chosen)} pages, {len(keep) - len(chosen)} images, {DST.stat().st_size} bytes")
