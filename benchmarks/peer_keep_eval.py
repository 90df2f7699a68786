"""Which labelled pages a `curate run` keeps, against datatrove's FineWeb recipe on the same WARC, same run.

    python benchmarks/peer_keep_eval.py --run OUT --datatrove-python VENV/bin/python \\
        [--warc ../shared/data/corpus/mixed-dev.warc.gz] [--labels ../shared/data/corpus/mixed-dev.labels.jsonl]

OUT is a finished `curate run` over --warc (any config: the text branch of docs/benchmarks.md's text_branch_eval
example, say). datatrove runs the recipe of benchmarks/end_to_end.py (URL filter, extraction, fastText
language ID keeping English, Gopher repetition and quality, C4 without the terminal-punctuation line rule,
FineWeb quality; no dedup) twice: with resiliparse's main-content extraction and with trafilatura
(favour_precision), FineWeb's published extractor. Prints one JSON object: per system and label category
(English pages only where `/en`), pages kept of pages labelled; `human/en_without_pubmed` leaves out the
PubMed QA answers, most of them under Gopher's 50-word minimum. Pages are joined on WARC-Record-ID (our doc
id is its xxh3-128 hash; datatrove's is the id itself). datatrove keeps only English (its LanguageFilter's
default), so compare the `/en` rows.
"""

import argparse
import glob
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import xxhash

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # repo root, not benchmarks/ (its packing.py would shadow the package)
DATA = ROOT.parent / "shared" / "data" / "corpus"

from benchmarks.end_to_end import datatrove_run  # noqa: E402
from benchmarks.record import record  # noqa: E402
from benchmarks.text_branch_eval import load  # noqa: E402

ROWS = (("human", "en"), ("human", None), ("llm", "en"), ("poor_mt", "en"), ("low_quality", None))


def curate_kept(run: str, labels: list[dict]) -> set[str]:
    ids = {r["id"] for r in load(os.path.join(run, "docs", "text", "*.parquet"), ["id"])}
    return {lab["record_id"] for lab in labels if xxhash.xxh3_128_hexdigest(lab["record_id"].encode()) in ids}


def datatrove_kept(python: str, warc: Path, engine: str) -> set[str]:
    folder, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    os.symlink(warc.resolve(), os.path.join(folder, warc.name))
    datatrove_run(python, folder, out, 1, engine)
    return {json.loads(line)["id"] for path in glob.glob(os.path.join(out, "*.jsonl.gz"))
            for line in gzip.open(path, "rt")}


def table(kept: set[str], labels: list[dict]) -> dict:
    out = {}
    for category, lang in ROWS:
        pages = [lab for lab in labels if lab["category"] == category and lang in (None, lab["lang"])]
        out[category + (f"/{lang}" if lang else "")] = [sum(lab["record_id"] in kept for lab in pages), len(pages)]
    pages = [lab for lab in labels if lab["category"] == "human" and lab["lang"] == "en" and "pubmed" not in lab["source"]]
    out["human/en_without_pubmed"] = [sum(lab["record_id"] in kept for lab in pages), len(pages)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished `curate run` output folder over --warc")
    ap.add_argument("--warc", type=Path, default=DATA / "mixed-dev.warc.gz")
    ap.add_argument("--labels", type=Path, default=DATA / "mixed-dev.labels.jsonl")
    ap.add_argument("--datatrove-python", required=True,
                    help="a Python with datatrove[io,processing], resiliparse, spacy and lxml_html_clean")
    args = ap.parse_args()
    labels = [json.loads(line) for line in args.labels.open()]
    result = {"curate": table(curate_kept(args.run, labels), labels)}
    for engine in ("resiliparse", "trafilatura"):
        result[f"datatrove_fineweb_{engine}"] = table(datatrove_kept(args.datatrove_python, args.warc, engine), labels)
    print(json.dumps(result, indent=1))
    record(__file__, {category: ", ".join(f"{who} {r[category][0]}" for who, r in result.items()) + f" of {n}"
                      for category, (_, n) in result["curate"].items()}, result)


if __name__ == "__main__":
    main()
