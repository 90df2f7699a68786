"""Per-category fate of labelled pages after a `curate run` (mixed-dev style labels.jsonl).

    python benchmarks/text_branch_eval.py --labels ../shared/data/corpus/mixed-dev.labels.jsonl --run OUT

Prints JSON: for each label category, how many pages were kept in docs/text and how many were dropped
under each stage/reason. Pages are joined on WARC-Record-ID (our doc id is its xxh3-128 hash).
"""

import argparse
import collections
import glob
import json
import os

import pyarrow.parquet as pq
import xxhash


def load(pattern, columns):
    rows = []
    for path in sorted(glob.glob(pattern)):
        rows += pq.read_table(path, columns=columns).to_pylist()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", required=True)
    ap.add_argument("--run", required=True)
    args = ap.parse_args()
    labels = [json.loads(line) for line in open(args.labels)]
    kept = {r["id"] for r in load(os.path.join(args.run, "docs/text/*.parquet"), ["id"])}
    dropped = {r["id"]: f"{r['stage']}:{r['reason']}"
               for r in load(os.path.join(args.run, "dropped/*/*.parquet"), ["id", "stage", "reason"])}
    fate = collections.defaultdict(collections.Counter)
    for lab in labels:
        did = xxhash.xxh3_128_hexdigest(lab["record_id"].encode())
        fate[lab["category"]]["kept" if did in kept else dropped.get(did, "missing")] += 1
    report = {}
    for cat, counter in sorted(fate.items()):
        total = sum(counter.values())
        report[cat] = {"pages": total, "kept": counter["kept"], "kept_frac": round(counter["kept"] / total, 4),
                       "fates": dict(counter.most_common())}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
