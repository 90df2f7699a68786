"""What the interleaved branch keeps of real documents: web pages whose WARC holds a large figure or
photo, and PDFs, against the dev set's labels.

    python benchmarks/interleaved_keep_eval.py [--warc W --labels L --pdf-warc P --pdf-labels Q] [--run OUT]

Runs the interleaved stages (`curate run --stages interleaved,...,interleaved_write`, one worker) over
the web and PDF WARCs into a temporary folder (or reads the finished run OUT), then prints one JSON
object:
  web: pages with at least one `<img>` the labels call a photo or figure, stored in the WARC and at
       least 150 px on both sides (the branch's min_side): how many yield a document in
       OUT/docs/interleaved that carries one of those images (`kept`), the share, and for each page
       that does not, the stage and reason it was dropped at;
  pdf: per PDF, its fate (kept, or stage and reason); for those with a labelled abstract, the share of
       its words found in order in the document's first text nodes (`abstract_in_first_nodes`).
  nodes: the text nodes the branch removed, per reason (the interleaved_text stage's counters).
Defaults are the shared dev set (../shared/data/interleaved); the labels are read, never fitted.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.record import record  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "interleaved"
STAGES = ["interleaved", "interleaved_text", "interleaved_exact_dedup", "interleaved_near_dedup", "interleaved_images",
          "interleaved_dedup", "interleaved_vlm", "interleaved_write"]
MIN_SIDE = 150
WORD = re.compile(r"\w+")


def rows(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()] if folder.is_dir() else []


def in_order_share(needle: str, haystack: str) -> float:
    """Share of the needle's words found in the haystack in order (a greedy subsequence match)."""
    words, text = WORD.findall(needle.lower()), WORD.findall(haystack.lower())
    found, at = 0, 0
    for w in words:
        try:
            at = text.index(w, at) + 1
            found += 1
        except ValueError:
            continue
    return found / len(words) if words else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warc", default=str(DEV / "interleaved-dev.warc.gz"))
    ap.add_argument("--labels", default=str(DEV / "interleaved-dev.labels.jsonl"))
    ap.add_argument("--pdf-warc", default=str(DEV / "pdf-dev.warc.gz"))
    ap.add_argument("--pdf-labels", default=str(DEV / "pdf-dev.labels.jsonl"))
    ap.add_argument("--run", help="a finished run's output folder (else the stages run here)")
    ap.add_argument("--config", help="run config (default: configs/local.yaml semantics)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.run) if args.run else Path(tmp) / "out"
        if not args.run:
            cmd = [sys.executable, "-m", "pipelines.cli", "run", "--input", args.warc, args.pdf_warc, "--output", str(out),
                   "--workers", "1", "--quiet", "--stages", ",".join(STAGES)]
            if args.config:
                cmd += ["--config", args.config]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(proc.stderr[-3000:])
        result = evaluate(out, args.labels, args.pdf_labels)
    print(json.dumps(result, indent=1))
    pdfs = result["pdf"].values()
    record(__file__, {
        "web pages with a photo or figure >= 150 px kept": f"{result['web']['kept']} / {result['web']['pages_with_large_images']}",
        "PDFs kept": f"{sum(p['fate'] == 'kept' for p in pdfs)} / {len(pdfs)}",
        "abstract in the first nodes": " / ".join(str(p["abstract_in_first_nodes"]) for p in pdfs if "abstract_in_first_nodes" in p)},
        result)


def evaluate(out: Path, labels_path: str, pdf_labels_path: str) -> dict:
    docs = {d["url"]: d for d in rows(out / "docs" / "interleaved")}
    fates = {}
    for stage in STAGES:
        for r in rows(out / "dropped" / stage):
            fates.setdefault(r["url"], f"{stage}/{r['reason']}")
    web, lost = [], {}
    for lab in map(json.loads, open(labels_path)):
        large = {im["url"] for im in lab["images"] if im.get("in_warc") and im.get("kind") in ("photo", "figure")
                 and min(im.get("width") or 0, im.get("height") or 0) >= MIN_SIDE}
        if not large:
            continue
        doc = docs.get(lab["url"])
        carried = doc is not None and any(n["image_url"] in large for n in doc["nodes"] if n["type"] == "image")
        web.append(carried)
        if not carried:
            lost[lab["url"]] = fates.get(lab["url"], "kept without its large images" if doc else "no document")
    pdfs = {}
    for lab in map(json.loads, open(pdf_labels_path)):
        doc = docs.get(lab["url"])
        entry = {"fate": "kept" if doc else fates.get(lab["url"], "no document")}
        if doc and lab.get("abstract_first_300"):
            first = "\n".join(n["text"] for n in doc["nodes"][:12] if n["type"] == "text")
            entry["abstract_in_first_nodes"] = round(in_order_share(lab["abstract_first_300"], first), 3)
        pdfs[lab["url"].rsplit("/", 1)[-1]] = entry
    stats = json.loads((out / "interleaved_text" / "stats.json").read_text()) if (
        out / "interleaved_text" / "stats.json").exists() else {}
    nodes = {k: v for k, v in stats.get("extra", {}).items() if k.startswith("nodes/")}
    return {"web": {"pages_with_large_images": len(web), "kept": sum(web),
                    "share": round(sum(web) / len(web), 3) if web else None, "lost": lost},
            "pdf": pdfs, "nodes": nodes}


if __name__ == "__main__":
    main()
