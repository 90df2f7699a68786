"""Benchmark our vectorised MinHash (dedup/minhash.py) against datasketch on real extracted pages, and
optionally evaluate NearDedup (dedup/near.py) against the mixed-dev labels.

    .venv/bin/python benchmarks/minhash.py                        # ../shared/data/corpus/mixed-dev.warc.gz
    .venv/bin/python benchmarks/minhash.py --warc X.warc.gz --num-perm 128
    .venv/bin/python benchmarks/minhash.py --texts docs.jsonl     # one {"text": ...} per line
    .venv/bin/python benchmarks/minhash.py --eval-dedup           # also run NearDedup, score vs labels

Texts: every HTML response of the WARC, extracted as the extract stage does (decode_html,
extract_main_text, C4 line filter). Both sides get the same shingle sets of every document: ours as
the uint64 hashes of `shingles`, datasketch as the UTF-8 bytes of the same n-grams fed to a
`MinHash(num_perm).update` loop (its default scheme, sha1 + affine32), with the same num_perm.
Timings (best of --repeat, datasketch once) cover signatures from shingles; `*_from_text` adds
shingling (our `shingles` vs building the n-gram strings in Python).

Accuracy: mean absolute difference between our and datasketch's Jaccard estimates, and each one's
mean absolute error against the exact Jaccard, on the labelled near_dup pairs (if labels are given)
and on seeded random pairs.

--eval-dedup runs NearDedup (defaults, FnApiRunner in-process) on the pages and reports, from the
labels: exact_dup and near_dup pairs resolved (page or its original dropped, so at most one is left)
and the labelled page itself dropped, recall on near_dups with recorded Jaccard >= 0.7, and the share
of other human pages (not a labelled original) dropped.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path[0] = str(Path(__file__).resolve().parents[1])  # repo root, not benchmarks/ (its packing.py would shadow the package)

from benchmarks.record import record  # noqa: E402

from dedup.exact import normalize_for_hash  # noqa: E402
from dedup.minhash import MinHasher, jaccard, shingles, uses_characters  # noqa: E402
from dedup.near import NearDedupConfig  # noqa: E402

DEFAULTS = NearDedupConfig().model_dump()

DEFAULT_WARC = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus" / "mixed-dev.warc.gz"
SPEEDUP_TARGET = 5.0


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def extract_pages(warc: Path, labels: Path | None) -> list[dict]:
    """{"id", "text", and the label fields if any} for every extractable HTML page of `warc`."""
    from extract.html import ExtractionError, decode_html, extract_main_text
    from extract.records import doc_id, route
    from extract.warc import ReadError, iter_records
    from filters.clean import remove_boilerplate_lines

    by_record = {}
    if labels and labels.exists():
        by_record = {row["record_id"]: row for row in map(json.loads, labels.open())}
    pages = []
    with warc.open("rb") as fh:
        for rec in iter_records(fh):
            if isinstance(rec, ReadError) or route(rec)[0] != "html":
                continue
            try:
                text = extract_main_text(decode_html(rec.payload, rec.http_charset).text)
            except ExtractionError:
                continue
            label = by_record.get(rec.record_id, {})
            recorded = re.search(r"Jaccard with the original main text ([0-9.]+)", label.get("notes") or "")
            pages.append({"id": doc_id(rec, str(warc)), "url": rec.url,
                          "text": remove_boilerplate_lines(text.strip())[0],
                          "category": label.get("category"), "dup_of": label.get("dup_of"),
                          "recorded_jaccard": float(recorded.group(1)) if recorded else None})
    return pages


def ngram_strings(text: str, n: int) -> list[bytes]:
    """The same n-grams as `shingles`, as UTF-8 strings (datasketch's input)."""
    norm = normalize_for_hash(text)
    if not norm:
        return []
    tokens, sep = (list(norm.replace(" ", "")), "") if uses_characters(norm) else (norm.split(" "), " ")
    if len(tokens) < n:
        return [sep.join(tokens).encode()]
    return list({sep.join(tokens[i:i + n]).encode() for i in range(len(tokens) - n + 1)})


def best_of(repeat: int, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def datasketch_signatures(strings: list[list[bytes]], num_perm: int) -> list:
    from datasketch import MinHash

    out = []
    for doc in strings:
        m = MinHash(num_perm=num_perm)
        for s in doc:
            m.update(s)
        out.append(m)
    return out


def _write_json(path: str):
    return lambda rows: Path(path).write_text(json.dumps(rows))


def evaluate_dedup(pages: list[dict]) -> dict:
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from dedup.near import NearDedup

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "dropped.json")
        with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
            res = p | beam.Create([{"id": d["id"], "text": d["text"]} for d in pages]) | NearDedup(NearDedupConfig())
            (res.duplicates | beam.MapTuple(lambda doc, survivor, size: (doc["id"], survivor))
             | beam.combiners.ToList() | beam.Map(_write_json(out)))
        dropped = dict(json.loads(Path(out).read_text()))
    by_url = {d["url"]: d for d in pages}

    def score(selected: list[dict]) -> dict:
        resolved = sum(d["id"] in dropped or by_url[d["dup_of"]]["id"] in dropped for d in selected)
        own = sum(d["id"] in dropped for d in selected)
        return {"pages": len(selected), "pair_resolved": resolved, "recall": round(resolved / max(len(selected), 1), 4),
                "labelled_page_dropped": own}

    dups = {c: [d for d in pages if d["category"] == c and d["dup_of"] in by_url] for c in ("exact_dup", "near_dup")}
    originals = {d["dup_of"] for d in pages if d["dup_of"]}
    others = [d for d in pages if d["category"] == "human" and d["url"] not in originals]
    return {"exact_dup": score(dups["exact_dup"]),
            "near_dup_recorded_j_ge_0.7": score([d for d in dups["near_dup"] if d["recorded_jaccard"] >= 0.7]),
            "near_dup_all": score(dups["near_dup"]),
            "other_human_pages": len(others),
            "other_human_dropped": sum(d["id"] in dropped for d in others),
            "dropped_total": len(dropped)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--labels", type=Path, help="labels.jsonl (default: next to --warc)")
    ap.add_argument("--texts", type=Path, help="JSONL with a 'text' per line instead of --warc")
    ap.add_argument("--num-perm", type=int, default=DEFAULTS["num_perm"])
    ap.add_argument("--ngram", type=int, default=DEFAULTS["ngram"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--random-pairs", type=int, default=2000)
    ap.add_argument("--eval-dedup", action="store_true")
    args = ap.parse_args()

    if args.texts:
        pages = [{"id": str(i), "url": str(i), "category": None, "dup_of": None, **json.loads(line)}
                 for i, line in enumerate(args.texts.open())]
        source = str(args.texts)
    else:
        labels = args.labels or args.warc.with_name(args.warc.name.replace(".warc.gz", ".labels.jsonl"))
        t = time.perf_counter()
        pages = extract_pages(args.warc, labels)
        log(f"extracted {len(pages)} pages in {time.perf_counter() - t:.1f} s")
        source = str(args.warc)
    texts = [d["text"] for d in pages]

    t_shingle, sets = best_of(args.repeat, lambda: [shingles(x, args.ngram) for x in texts])
    t_strings, strings = best_of(1, lambda: [ngram_strings(x, args.ngram) for x in texts])
    assert [s.size for s in sets] == [len(s) for s in strings], "both sides must see the same shingle sets"
    hasher = MinHasher(args.num_perm)
    t_batch, ours = best_of(args.repeat, lambda: hasher.signatures(sets))
    t_single, _ = best_of(args.repeat, lambda: [hasher.signature(s) for s in sets])
    log("datasketch update loop ...")
    t_ds, theirs = best_of(1, lambda: datasketch_signatures(strings, args.num_perm))

    pair_sets = {}
    by_url = {d["url"]: i for i, d in enumerate(pages)}
    labelled = [(i, by_url[d["dup_of"]]) for i, d in enumerate(pages)
                if d["category"] == "near_dup" and d["dup_of"] in by_url]
    if labelled:
        pair_sets["near_dup_pairs"] = labelled
    rng = np.random.default_rng(0)
    nonempty = [i for i, s in enumerate(sets) if s.size]
    pair_sets["random_pairs"] = [tuple(rng.choice(nonempty, size=2, replace=False)) for _ in range(args.random_pairs)]
    accuracy = {}
    for name, pairs in pair_sets.items():
        exact = np.array([jaccard(sets[a], sets[b]) for a, b in pairs])
        est_ours = np.array([np.mean(ours[a] == ours[b]) for a, b in pairs])
        est_ds = np.array([theirs[a].jaccard(theirs[b]) for a, b in pairs])
        accuracy[name] = {"pairs": len(pairs), "mean_exact_jaccard": round(float(exact.mean()), 4),
                          "mean_abs_diff_ours_vs_datasketch": round(float(np.abs(est_ours - est_ds).mean()), 4),
                          "mean_abs_err_ours": round(float(np.abs(est_ours - exact).mean()), 4),
                          "mean_abs_err_datasketch": round(float(np.abs(est_ds - exact).mean()), 4)}

    n = len(texts)
    report = {
        "source": source, "documents": n, "shingles": int(sum(s.size for s in sets)), "num_perm": args.num_perm,
        "ngram": args.ngram, "python": platform.python_version(),
        "ours_signatures_per_s": round(n / t_batch, 1),
        "ours_signatures_per_s_one_at_a_time": round(n / t_single, 1),
        "datasketch_signatures_per_s": round(n / t_ds, 1),
        "speedup": round(t_ds / t_batch, 1),
        "speedup_one_at_a_time": round(t_ds / t_single, 1),
        "ours_signatures_per_s_from_text": round(n / (t_shingle + t_batch), 1),
        "datasketch_signatures_per_s_from_text": round(n / (t_strings + t_ds), 1),
        "speedup_from_text": round((t_strings + t_ds) / (t_shingle + t_batch), 1),
        "speedup_target": SPEEDUP_TARGET,
        "accuracy": accuracy,
    }
    if args.eval_dedup:
        if not labelled:
            raise SystemExit("--eval-dedup needs labels (mixed-dev style labels.jsonl next to the WARC)")
        report["near_dedup"] = {"config": {k: v for k, v in DEFAULTS.items() if k != "survivor"},
                                **evaluate_dedup(pages)}
    print(json.dumps(report, indent=2))
    record(__file__, {"documents": report["documents"], "vs datasketch MinHash.update, batched": f"{report['speedup']}x",
                      "one at a time": f"{report['speedup_one_at_a_time']}x", "from text": f"{report['speedup_from_text']}x"},
           report)


if __name__ == "__main__":
    main()
