"""Image branch benchmark and evaluation: decode + hash throughput against bare Pillow, and keep/drop
decisions against labelled pages.

    .venv/bin/python benchmarks/images.py                       # throughput: decode + hash vs bare Pillow
    .venv/bin/python benchmarks/images.py --images DIR --warc X.warc.gz --rounds 5
    .venv/bin/python benchmarks/images.py --eval ../shared/data/corpus/mixed-dev.warc.gz

Throughput: the same images (every file of --images, default the scikit-image photos in
../shared/data/image_text/skimage_clip, plus every image response of --warc, default mixed-dev) go
through our `decode_image` (byte cap, format allow-list, bomb check, EXIF orientation, RGB conversion,
sha256, pHash) and through a bare `Image.open(...).convert("RGB")` + `imagehash.phash` loop, in the same
process and run, best of --rounds; size rules are opened up (min side 1) so that both sides decode
every image. Prints JSON with images/s of each and their ratio.

--eval runs ImagePairs (FnApiRunner in-process, fetching off: no network) on the WARC and compares the
keep/drop decision per <img> tag with the labels (`mixed-dev.images.jsonl` next to it, or --labels):
once with min_side 50 (what the labels' `expected` assumes) and once with the default 150 (expected
then also drops kept images under 150 px). Tags are matched by page URL and position on the page.
Also reported: how many resized/recompressed copies (image_near_dup) and byte-identical copies
(image_exact_dup) are dropped as duplicates of the labelled original's image (the surviving pair shows
the original's bytes, whichever page's use of them survived; for byte-identical copies the earlier
capture's use survives, which may be the copy's page), whether the original image ends in exactly one
pair, and the agreement of
our first reason with the labels' reasons (ours mapped onto their names).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # repo root, not benchmarks/ (its packing.py would shadow the package)

from benchmarks.record import record  # noqa: E402

import apache_beam as beam  # noqa: E402
import imagehash  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from PIL import Image  # noqa: E402

from pipelines.image_pairs import ImagePairs, ImagePairsConfig  # noqa: E402
from extract.images import canonical_url, read_pages_and_images  # noqa: E402
from filters.image import DecodeRules, decode_image  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# our reason -> the labels' vocabulary
LABEL_REASON = {"declared_too_small": "too_small", "filename_alt": "uninformative_alt",
                "generic_alt": "uninformative_alt", "alt_too_short": "uninformative_alt"}




# ------------------------------------------------------------------------------------ throughput
def throughput(image_dir: str, warc: str, rounds: int) -> dict:
    groups = {"photos": [p.read_bytes() for p in sorted(Path(image_dir).iterdir())
                         if p.suffix.lower() in (".png", ".jpg", ".jpeg")]}
    if warc:
        groups["warc_images"] = [r["payload"] for r in read_pages_and_images(warc)[1]]
    groups["all"] = [b for blobs in groups.values() for b in blobs]
    cfg = ImagePairsConfig(min_side=1, max_aspect=1e9).decode_rules()
    return {name: _race(blobs, cfg, rounds) for name, blobs in groups.items()}


def _race(blobs: list[bytes], cfg: DecodeRules, rounds: int) -> dict:
    def ours():
        return sum(not isinstance(decode_image(b, cfg), str) for b in blobs)

    def bare():
        for b in blobs:
            imagehash.phash(Image.open(io.BytesIO(b)).convert("RGB"))
        return len(blobs)

    result = {"images": len(blobs), "megapixels": round(sum(_pixels(b) for b in blobs) / 1e6, 2), "rounds": rounds}
    for name, fn in (("ours", ours), ("bare_pillow_imagehash", bare)):
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            done = fn()
            best = min(best, time.perf_counter() - started)
        result[name] = {"decoded": done, "seconds": round(best, 4), "images_per_s": round(len(blobs) / best, 1)}
    result["speedup"] = round(result["ours"]["images_per_s"] / result["bare_pillow_imagehash"]["images_per_s"], 2)
    return result


def _pixels(blob: bytes) -> int:
    w, h = Image.open(io.BytesIO(blob)).size
    return w * h


# ------------------------------------------------------------------------------------------ eval
def run_pairs(pages: list[dict], images: list[dict],
              config: ImagePairsConfig) -> tuple[list[dict], list[tuple], dict, float]:
    """ImagePairs on FnApiRunner in-process: (pair rows, drop tuples, counters, wall seconds)."""
    folder = Path(tempfile.mkdtemp(prefix="images-eval-"))

    def dump(name):
        def write(rows):
            (folder / name).write_bytes(pickle.dumps(rows))
        return write

    started = time.time()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        res = (p | "Pages" >> beam.Create(pages), p | "Images" >> beam.Create(images)) | ImagePairs(config)
        res.pairs | "PairList" >> beam.combiners.ToList() | "PairDump" >> beam.Map(dump("pairs"))
        res.dropped | "Drops" >> beam.Flatten() | "DropList" >> beam.combiners.ToList() | "DropDump" >> beam.Map(dump("dropped"))
        res.counters | "CountList" >> beam.combiners.ToList() | "CountDump" >> beam.Map(dump("counters"))
    wall = time.time() - started
    load = lambda name: pickle.loads((folder / name).read_bytes())  # noqa: E731
    return load("pairs"), load("dropped"), dict(load("counters")), wall


def evaluate(warc: str, labels_path: str) -> dict:
    labels = [json.loads(line) for line in open(labels_path, encoding="utf-8")]
    pages, images = read_pages_and_images(warc)
    sha_of = {r["url"]: hashlib.sha256(r["payload"]).hexdigest() for r in images}
    out = {"warc": warc, "labels": labels_path, "img_tags": len(labels), "pages": len(pages),
           "image_records": len(images)}
    for min_side in (50, 150):
        pairs, dropped, counters, wall = run_pairs(pages, images, ImagePairsConfig(min_side=min_side))
        out[f"min_side_{min_side}"] = score(labels, pairs, dropped, counters, min_side, wall, sha_of)
    return out


def score(labels, pairs, dropped, counters, min_side: int, wall: float, sha_of: dict) -> dict:
    decisions = {(p["page_url"], p["position"]): ("keep", p) for p in pairs}
    for row, reason, detail in dropped:
        decisions[(row["page_url"], row["position"])] = (reason, row, detail)
    pair_sha = {p["id"]: p["image_sha256"] for p in pairs}
    position = collections.Counter()
    agree = reason_agree = labelled_drops = 0
    confusion = collections.Counter()
    copies = collections.Counter()
    disagreements = []
    for lab in labels:
        key = (lab["page_url"], position[lab["page_url"]])
        position[lab["page_url"]] += 1
        expected = lab["expected"]
        if expected == "keep" and min(lab["width"], lab["height"]) < min_side:
            expected = "drop"
        ours = decisions.get(key, ("no_ref",))
        got = "keep" if ours[0] == "keep" else "drop"
        agree += got == expected
        confusion[f"{expected}->{got}"] += 1
        if got != expected and len(disagreements) < 20:
            disagreements.append({"page_url": lab["page_url"], "img_url": lab["img_url"], "alt": lab["alt"],
                                  "expected": expected, "label_reason": lab["reason"], "ours": ours[0]})
        if got == "drop" and expected == "drop":
            labelled_drops += 1
            reason_agree += LABEL_REASON.get(ours[0], ours[0]) in lab.get("reasons", [lab["reason"]])
        category = lab.get("image_category")
        if category in ("image_near_dup", "image_exact_dup"):
            reason = ours[0]
            survivor = pair_sha.get(ours[2]) if len(ours) == 3 else None
            copies[f"{category}/labelled"] += 1
            original = sha_of[canonical_url(lab["dup_of"])]
            if reason in ("image_near_dup", "image_exact_dup") and survivor == original:
                copies[f"{category}/caught_as_dup_of_original"] += 1
            else:
                copies[f"{category}/other:{reason}"] += 1
            copies[f"{category}/original_image_in_exactly_one_pair"] += sum(p["image_sha256"] == original for p in pairs) == 1
    return {"agreement": round(agree / len(labels), 4), "agree": agree, "confusion": dict(confusion),
            "reason_agreement_on_agreed_drops": round(reason_agree / max(labelled_drops, 1), 4),
            "copies": dict(copies), "pairs": len(pairs), "wall_s": round(wall, 2),
            "counters": counters, "disagreements": disagreements}


def headline(result: dict) -> dict:
    """The figures docs/benchmarks.md shows: agreement with the labels, or speed against the bare loop."""
    if "min_side_50" in result:  # --eval: one scoring per minimum side
        return {f"min side {side}: keep/drop agreement with the labels, pairs":
                f"{result[f'min_side_{side}']['agreement']}, {result[f'min_side_{side}']['pairs']}" for side in (50, 150)}
    return {f"{name}: decode + sha256 + pHash vs bare Pillow + imagehash": f"{r['speedup']}x" for name, r in result.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", default=str(SHARED / "image_text" / "skimage_clip"))
    ap.add_argument("--warc", default=str(SHARED / "corpus" / "mixed-dev.warc.gz"),
                    help="also benchmark the image records of this WARC ('' for none)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eval", metavar="WARC", help="evaluate keep/drop against the labels instead")
    ap.add_argument("--labels", help="default: mixed-dev.images.jsonl next to the --eval WARC")
    args = ap.parse_args(argv)
    if args.eval:
        labels = args.labels or str(Path(args.eval).with_name(Path(args.eval).name.split(".")[0] + ".images.jsonl"))
        result = evaluate(args.eval, labels)
    else:
        result = throughput(args.images, args.warc, args.rounds)
    print(json.dumps(result, indent=1, ensure_ascii=False))
    record(__file__, headline(result), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
