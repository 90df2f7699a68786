"""Per-category fate of labelled pages after a `curate run` (mixed-dev style labels.jsonl).

    python benchmarks/text_branch_eval.py --labels ../shared/data/corpus/mixed-dev.labels.jsonl --run OUT \\
        [--baseline OUT0]

Prints JSON: for each label category, how many pages were kept in docs/text and how many were dropped
under each stage/reason; `human_by_source`: human pages and kept per label source (the scrapinghub pages
are the ones filters/models/boilerplate_lines.json is fitted on); `rule_costs`: per quality rule, the
judged pages of each category that fail it and those it alone drops (every rule's cost in good pages
and what it catches that no other rule does); with --baseline, `vs_baseline`: per
category the pages kept here but not in the baseline run and the reverse, with their fates in both; with
--losses CATEGORY (human, say), `losses`: every page of that category the run did not keep, with its
label source and template, its fate, the drop's detail (for a quality drop, every rule it fails), the
words of the text it was dropped with and that text's first 300 characters (the whole text is in the
run's dropped/ folder). Pages are joined on WARC-Record-ID (our doc id is its xxh3-128 hash).

The text branch alone (what docs/benchmarks.md's text-branch figures use), e.g. with the boilerplate model on and off:

    printf 'stages: [read, extract, language, quality, synthetic, exact_dedup, near_dedup, crosslingual, write]\\n' > /tmp/text.yaml
    curate run --input ../shared/data/corpus/mixed-dev.warc.gz --output /tmp/off --config /tmp/text.yaml
    printf 'quality: {boilerplate_model: true}\\n' >> /tmp/text.yaml
    curate run --input ../shared/data/corpus/mixed-dev.warc.gz --output /tmp/on --config /tmp/text.yaml
    python benchmarks/text_branch_eval.py --labels ../shared/data/corpus/mixed-dev.labels.jsonl \\
        --run /tmp/on --baseline /tmp/off
"""

import argparse
import collections
import glob
import json
import os
import re
import sys

import pyarrow.parquet as pq
import xxhash

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # repo root

from benchmarks.record import record  # noqa: E402


def load(pattern, columns):
    rows = []
    for path in sorted(glob.glob(pattern)):
        rows += pq.read_table(path, columns=columns).to_pylist()
    return rows


def dedup_report(labels, kept, dropped):
    """The dedup figures: labelled duplicates removed (by any stage), near-dup recall by recorded
    Jaccard, originals kept, and other human pages removed as duplicates."""
    def did(lab):
        return xxhash.xxh3_128_hexdigest(lab["record_id"].encode())

    by_url = {lab["url"]: lab for lab in labels}
    dup_reasons = ("exact_dedup:exact_duplicate", "near_dedup:near_duplicate")
    out = {}
    for cat in ("exact_dup", "near_dup"):
        pages = [lab for lab in labels if lab["category"] == cat]
        removed = [lab for lab in pages if did(lab) not in kept]
        out[cat] = {"pages": len(pages), "removed": len(removed),
                    "removed_as_duplicate": sum(dropped.get(did(lab)) in dup_reasons for lab in pages)}
    high = [lab for lab in labels if lab["category"] == "near_dup"
            and float(re.search(r"Jaccard[^0-9]*([0-9.]+)", lab["notes"] or "J 0").group(1)) >= 0.7]
    out["near_dup"]["recorded_jaccard_ge_0.7"] = {"pages": len(high), "removed": sum(did(lab) not in kept for lab in high)}
    originals = {lab["dup_of"] for lab in labels if lab["category"] in ("exact_dup", "near_dup") and lab["dup_of"]}
    clusters_lost = 0
    for url in originals:
        members = [by_url[url]] + [lab for lab in labels if lab["dup_of"] == url]
        if all(did(m) not in kept for m in members) and any(dropped.get(did(m)) in dup_reasons for m in members):
            clusters_lost += 1  # every member gone and a duplicate drop among them
    out["clusters_losing_all_members_to_dedup"] = clusters_lost
    # a duplicate may survive legitimately when its original was dropped by an earlier filter
    pairs = [(lab, by_url[lab["dup_of"]]) for lab in labels
             if lab["category"] in ("exact_dup", "near_dup") and lab["dup_of"] in by_url]
    out["labelled_pairs"] = {"pairs": len(pairs),
                             "both_kept": sum(did(a) in kept and did(b) in kept for a, b in pairs),
                             "duplicate_kept_original_dropped_before_dedup": sum(
                                 did(a) in kept and did(b) not in kept for a, b in pairs)}
    others = [lab for lab in labels if lab["category"] == "human" and lab["url"] not in originals]
    out["other_human_pages_removed_as_duplicates"] = {
        "pages": len(others), "removed": sum(dropped.get(did(lab)) in dup_reasons for lab in others)}
    return out


def fates(run):
    """(ids kept in docs/text, {id: "stage:reason"} of the dropped)."""
    kept = {r["id"] for r in load(os.path.join(run, "docs/text/*.parquet"), ["id"])}
    dropped = {r["id"]: f"{r['stage']}:{r['reason']}"
               for r in load(os.path.join(run, "dropped/*/*.parquet"), ["id", "stage", "reason"])}
    return kept, dropped


JUDGED_BY_QUALITY = ("quality", "synthetic", "exact_dedup", "near_dedup")  # drop folders holding quality's scores


def rule_costs(run, labels):
    """Per quality rule, over the pages the quality stage judged: how many pages of each category fail it
    (`fail`: at all, `sole`: it is the only rule they fail, so it alone decides their fate), recomputed
    from the measured values every judged page keeps (`scores`) with the run's own quality config
    (stats/config.json). The language is the page's detected one where kept, else its label's (drop rows
    carry no language; it only matters to the rules with a language guard)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from filters.quality import QualityConfig, QualityFilter

    config = json.load(open(os.path.join(run, "stats", "config.json")))["quality"]
    rules = QualityFilter(QualityConfig.from_dict(config))
    judged = {r["id"]: (dict(r["scores"] or ()), r["lang"])
              for r in load(os.path.join(run, "docs/text/*.parquet"), ["id", "scores", "lang"])}
    for stage in JUDGED_BY_QUALITY:
        for r in load(os.path.join(run, f"dropped/{stage}/*.parquet"), ["id", "scores"]):
            judged.setdefault(r["id"], (dict(r["scores"] or ()), None))
    table = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    pages = collections.Counter()
    for lab in labels:
        did = xxhash.xxh3_128_hexdigest(lab["record_id"].encode())
        if did not in judged:
            continue
        values, lang = judged[did]
        if any(key not in values for key in rules._value_keys):
            continue  # not judged with every rule (e.g. a family switched off)
        pages[lab["category"]] += 1
        failed = rules.check(values, lang or lab.get("lang") or "")
        for reason in failed:
            table[reason][lab["category"]]["fail"] += 1
            table[reason][lab["category"]]["sole"] += len(failed) == 1
    return {"judged_pages": dict(pages),
            "rules": {reason: {cat: dict(c) for cat, c in sorted(cats.items())} for reason, cats in sorted(table.items())}}


def losses(run, labels, category, kept):
    """The pages of `category` the run did not keep, in label order: what a reader goes through to see why."""
    rows = {r["id"]: r for r in load(os.path.join(run, "dropped/*/*.parquet"), ["id", "stage", "reason", "detail", "text"])}
    out = []
    for lab in labels:
        did = xxhash.xxh3_128_hexdigest(lab["record_id"].encode())
        if lab["category"] != category or did in kept:
            continue
        row = rows.get(did) or {}
        text = row.get("text") or ""
        out.append({"url": lab["url"], "source": lab["source"], "template": lab.get("template"),
                    "fate": f"{row['stage']}:{row['reason']}" if row else "missing",
                    "detail": row.get("detail") or "", "words": len(text.split()), "text_head": text[:300]})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--baseline", help="another run of the same input: pages whose fate differs, per category")
    ap.add_argument("--losses", metavar="CATEGORY", help="list every page of this label category not kept (human, say)")
    args = ap.parse_args()
    labels = [json.loads(line) for line in open(args.labels)]
    kept, dropped = fates(args.run)

    def fate_of(lab, kept, dropped):
        did = xxhash.xxh3_128_hexdigest(lab["record_id"].encode())
        return "kept" if did in kept else dropped.get(did, "missing")

    fate = collections.defaultdict(collections.Counter)
    by_source = collections.defaultdict(collections.Counter)
    for lab in labels:
        f = fate_of(lab, kept, dropped)
        fate[lab["category"]][f] += 1
        if lab["category"] == "human":
            by_source[lab["source"]]["pages"] += 1
            by_source[lab["source"]]["kept"] += f == "kept"
    report = {"dedup": dedup_report(labels, kept, dropped)}
    for cat, counter in sorted(fate.items()):
        total = sum(counter.values())
        report[cat] = {"pages": total, "kept": counter["kept"], "kept_frac": round(counter["kept"] / total, 4),
                       "fates": dict(counter.most_common())}
    report["human_by_source"] = {src: dict(c) for src, c in sorted(by_source.items())}
    if os.path.exists(os.path.join(args.run, "stats", "config.json")):
        report["rule_costs"] = rule_costs(args.run, labels)
    if args.baseline:
        base_kept, base_dropped = fates(args.baseline)
        diff = collections.defaultdict(lambda: {"gained": [], "lost": []})
        for lab in labels:
            now, before = fate_of(lab, kept, dropped), fate_of(lab, base_kept, base_dropped)
            if (now == "kept") != (before == "kept"):
                diff[lab["category"]]["gained" if now == "kept" else "lost"].append(
                    {"url": lab["url"], "source": lab["source"], "baseline": before, "here": now})
        report["vs_baseline"] = {cat: {"gained": len(d["gained"]), "lost": len(d["lost"]),
                                       "pages_gained": d["gained"], "pages_lost": d["lost"]}
                                 for cat, d in sorted(diff.items())}
    if args.losses:
        report["losses"] = losses(args.run, labels, args.losses, kept)
    print(json.dumps(report, indent=1, ensure_ascii=False))
    record(__file__, {f"{cat} kept": f"{report[cat]['kept']} / {report[cat]['pages']} ({report[cat]['kept_frac']:.1%})"
                      for cat in sorted(fate)}, report)


if __name__ == "__main__":
    main()
