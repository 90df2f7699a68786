"""A Common Crawl snapshot on paper: what every GroupByKey of a run shuffles, measured on copies of a real
WARC at two sizes, projected to a snapshot (~3 billion pages, ~100 TB of WARC) on Dataflow and on a
Spark cluster.

    python benchmarks/crawl_projection.py measure [--warc PATH] [--pages 1700 10000] [--out FILE]
    python benchmarks/crawl_projection.py project FILE [--snapshot-pages 3e9] [--snapshot-bytes 100e12]

`measure` runs `curate run` (every stage, the default config) in this process on FnApiRunner with one
worker, where every GroupByKey passes through the runner's grouping buffer, and counts per GroupByKey
the elements, their encoded bytes, the keys, and the largest key (its bytes and values); per stage the
records in and out; the bytes written per output folder; the run's wall clock (one busy core: the
core-seconds the pages cost). The counting wraps Beam's grouping buffer in this measuring process
only; the pipeline itself runs as released. The copies are made as benchmarks/end_to_end.py makes
them (distinct record ids, the same texts): every copy after the first is a duplicate, so a
content-keyed GroupByKey (text hash, image URL) holds one value per copy in each key, and the stages
after dedup see one copy's survivors. What a key's size depends on at crawl scale is how many pages
share its content, which copies cannot measure; the script reports the bytes each value adds, and how
many sharing pages make a key of 2 GiB.

`project` fits each measured quantity linearly in pages between the two sizes (a GroupByKey's bytes,
the output bytes, core-seconds) and prints the projection as JSON and as a Markdown table: shuffle
bytes per stage, the content-keyed GroupByKeys by the number of sharing pages that makes a key 2 GiB,
worker-hours and cost at the list prices below; and every GroupByKey on the per-page path (at least
one byte a page at the smaller size; the rest carry counters, markers and file lists), its bytes and
elements a page at both sizes beside what it is for (`WHY`).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.end_to_end import DEFAULT_WARC, make_input  # noqa: E402
from benchmarks.record import portable, record  # noqa: E402

# List prices, us-central1, on demand, as the providers published them in 2025 (check before budgeting):
# Dataflow batch workers per vCPU-hour and GB-hour of memory, Dataflow Shuffle per GB processed;
# Compute Engine n2 per vCPU-hour and GB-hour, plus Dataproc's fee per vCPU-hour, for the Spark cluster.
PRICES = {
    "dataflow_vcpu_hour": 0.056, "dataflow_gb_hour": 0.003557, "dataflow_shuffle_gb": 0.011,
    "n2_vcpu_hour": 0.031611, "n2_gb_hour": 0.004237, "dataproc_vcpu_hour": 0.010,
}
WORKER = {"vcpus": 8, "memory_gb": 32}  # n2-standard-8, configs/dataflow.yaml's machine type
UTILIZATION = 0.7  # busy share of a worker's vCPUs over a batch job (stragglers, start-up, shuffle waits)
KEY_LIMIT_BYTES = 2 * 2**30  # one key's values that a Spark or Flink batch task holds in memory, at most


PER_PAGE_MIN_BYTES = 1.0  # a GroupByKey shuffling less than this a page carries counters, markers, file lists

# What each GroupByKey on the per-page path is for, by label prefix (the longest that matches): the rule
# that needs every page before it can decide one, or the join that brings the parts of a page together
# again. A GroupByKey here is a shuffle at crawl scale; one that has no entry is not justified yet.
WHY = {
    "quality/TemplateLines/DistinctPages": "template lines: a host's pages with the same lines count once (copies are not a template)",
    "quality/TemplateLines/CountLinePages": "template lines: pages a (host, line) occurs on, over every page of the host (C4, RefinedWeb)",
    "quality/TemplateLines/JoinHost": "template lines: a host's page count meets its lines' counts (the share threshold)",
    "quality/TemplateLines/JoinLines": "template lines: each page's lines meet their host's template lines",
    "quality/TemplateLines/JoinDocs": "template lines: each document meets the lines to remove from it",
    "exact_dedup/Dedup/Survivors/GroupKeys": "exact dedup: survivor keys (not documents) grouped by text hash; a page copied a million times is a small key",
    "exact_dedup/Dedup/Survivors/JoinDocs": "exact dedup: each document meets its own keep/drop decision",
    "near_dedup/Dedup/GroupBuckets": "near dedup: documents sharing a MinHash LSH band (Broder 1997)",
    "near_dedup/Dedup/DistinctCandidates": "near dedup: each candidate pair once",
    "near_dedup/Dedup/Verify": "near dedup: each star edge's two shingle sets meet for the exact Jaccard check",
    "near_dedup/Dedup/Components": "near dedup: connected components of the verified pairs (large-star / small-star rounds, Kiveris et al. 2014)",
    "near_dedup/Dedup/GroupDocs": "near dedup: each document meets its component's root",
    "near_dedup/Dedup/Survivors": "near dedup: survivor keys grouped by component, then each document meets its decision",
    "crosslingual/Recurrence/GroupAnchorPairs": "cross-lingual recurrence: documents sharing an anchor pair meet (what a translation copies: numbers, names, code)",
    "crosslingual/Recurrence/CountShared": "cross-lingual recurrence: the anchor pairs two documents of different languages share, counted by a combine",
    "crosslingual/Recurrence/GroupById": "cross-lingual recurrence: each document meets the languages it was matched in",
    "ImagePairs/GroupUrl": "image pairs: an image's references from every page meet (alt-text counts, one decode per image)",
    "ImagePairs/DistinctUrls": "image pairs: each referenced image URL once",
    "ImagePairs/ImageBytes/OneCopy": "image pairs: one capture of each image URL (a crawl captures some twice)",
    "ImagePairs/ImageBytes/JoinCaptures": "image pairs: the crawl's image bytes meet the references that name their URL",
    "ImagePairs/GroupSha": "image pairs: exact image dedup by content hash",
    "ImagePairs/PhashDedup": "image pairs: near-duplicate images by perceptual-hash bands, components and survivors",
    "interleaved/Build/FrequentUrls": "interleaved: image URLs on many pages (logos, ads) found over every page (OBELICS)",
    "interleaved/Build/JoinFrequent": "interleaved: each document meets the frequent URLs it holds",
    "interleaved_images/Attach": "interleaved: the crawl's image bytes meet the documents whose nodes name them",
    "interleaved_exact_dedup": "interleaved exact dedup: as exact dedup, on the documents' text and images",
    "interleaved_near_dedup": "interleaved near dedup: as near dedup, on the documents' text",
    "interleaved_dedup": "interleaved dedup: documents that share their images",
    "write/Write/GroupShard": "output: rows into the configured shards, so files hold the same rows whatever the workers",
    "WriteImages/GroupShard": "output: image rows into the configured shards",
    "WritePairs/GroupShard": "output: pair rows into the configured shards",
    "WritePdf/GroupShard": "output: PDF rows into the configured shards",
    "interleaved_write/Write/GroupShard": "output: interleaved rows into the configured shards",
    "interleaved_images/WriteImages/GroupShard": "output: interleaved image rows into the configured shards",
    "Audit/ByFile": "loss audit: every input record's fate meets its file's record count (in = out + dropped)",
    "Audit/Provenance": "loss audit: no output row's provenance repeats",
    "Audit/KeptIds": "loss audit: no kept id repeats",
    "BuildShards/TextClusters": "mix: each surviving text document's dedup cluster (its members set its epochs)",
    "BuildShards/InterleavedClusters": "mix: each surviving interleaved document's dedup cluster",
    "BuildShards/TextSamples": "mix: each text document meets its cluster",
    "BuildShards/InterleavedSamples": "mix: each interleaved document meets its cluster",
    "BuildShards/ResolveTwins": "mix: a page's text and multimodal twins meet; the multimodal one replaces the text one",
    "BuildShards/AllocatePhases": "packing: the length histogram (a combine) that splits the token budget between the phases",
    "BuildShards/Pack pretrain": "packing: chunks meet their best-fit bin, bins are grouped into shards",
    "BuildShards/Pack long": "packing (long phase): chunks meet their best-fit bin, bins are grouped into shards",
}


def why(label: str) -> str:
    """WHY's entry for a GroupByKey label (its longest matching prefix), or ""."""
    prefixes = [k for k in WHY if label.startswith(k)]
    return WHY[max(prefixes, key=len)] if prefixes else ""


def family(label: str) -> str:
    """A GroupByKey's label with the round of an unrolled loop (LargeStar3, SmallStar3) collapsed to N."""
    for step in ("LargeStar", "SmallStar"):
        head, found, tail = label.partition(f"/{step}")
        if found:
            digits = len(tail) - len(tail.lstrip("0123456789"))
            label = f"{head}/{step}N{tail[digits:]}"
    return label


def per_page_groups(measured: list[dict]) -> list[dict]:
    """The GroupByKeys (rounds collapsed) on the per-page path, bytes first: each one's bytes and elements
    a page at both sizes, how many there are, and what it is for."""
    a, b = sorted(measured, key=lambda m: m["pages"])[:2]
    sums = collections.defaultdict(lambda: {"n": 0, "bytes": [0, 0], "elements": [0, 0]})
    for i, run in enumerate((a, b)):
        for label, g in run["gbk"].items():
            entry = sums[family(label)]
            entry["n"] += i == 0
            entry["bytes"][i] += g["bytes"]
            entry["elements"][i] += g["elements"]
    rows = [{"gbk": name, "count": e["n"], "why": why(name),
             "bytes_per_page": [round(e["bytes"][0] / a["pages"], 1), round(e["bytes"][1] / b["pages"], 1)],
             "elements_per_page": [round(e["elements"][0] / a["pages"], 3), round(e["elements"][1] / b["pages"], 3)]}
            for name, e in sums.items() if e["bytes"][0] / a["pages"] >= PER_PAGE_MIN_BYTES]
    return sorted(rows, key=lambda r: (-r["bytes_per_page"][0], r["gbk"]))


def measure(warc: Path, pages: int, work: Path) -> dict:
    """One in-process `curate run` of about `pages` pages, with its GroupByKeys counted."""
    from apache_beam.coders.coder_impl import create_InputStream
    from apache_beam.runners.portability.fn_api_runner import execution

    from pipelines.config import load_config
    from pipelines.run import run

    groups = collections.defaultdict(lambda: {"elements": 0, "bytes": 0, "keys": collections.Counter(),
                                              "values": collections.Counter()})
    get_buffer, append = execution.BundleContextManager.get_buffer, execution.GroupingBuffer.append

    def labelled_get_buffer(self, buffer_id, transform_id):
        buffer = get_buffer(self, buffer_id, transform_id)
        kind, name = execution.split_buffer_id(buffer_id)
        if kind == "group" and not hasattr(buffer, "label"):
            buffer.label = self.execution_context.pipeline_components.transforms[name].unique_name
        return buffer

    def counting_append(self, elements_data: bytes):
        stats = groups[getattr(self, "label", "?")]
        stream, coder, key_coder = create_InputStream(elements_data), self._pre_grouped_coder.get_impl(), self._key_coder.get_impl()
        while stream.size() > 0:
            before = stream.size()
            key = key_coder.encode(coder.decode_from_stream(stream, True).value[0])
            stats["elements"] += 1
            stats["bytes"] += before - stream.size()
            stats["keys"][key] += before - stream.size()
            stats["values"][key] += 1
        append(self, elements_data)

    data = make_input(warc, pages, work / f"copies-{pages}")
    out = work / f"out-{pages}"
    shutil.rmtree(out, ignore_errors=True)  # a finished earlier run would be reused, not measured
    execution.BundleContextManager.get_buffer, execution.GroupingBuffer.append = labelled_get_buffer, counting_append
    try:
        wall = time.perf_counter()
        summary = run(load_config(str(ROOT / "configs" / "local.yaml"), input=data["files"], output=str(out), workers=1),
                      echo=False, progress=False)
        wall = time.perf_counter() - wall
    finally:
        execution.BundleContextManager.get_buffer, execution.GroupingBuffer.append = get_buffer, append
    written = collections.Counter()
    for f in out.rglob("*"):
        if f.is_file() and f.parts[len(out.parts)] not in ("logs", "stats"):
            rel = f.relative_to(out).parts
            written["/".join(rel[:2] if rel[0] in ("docs", "dropped") else rel[:1])] += f.stat().st_size
    gbk = {}
    for label, s in sorted(groups.items()):
        top_key, top_bytes = s["keys"].most_common(1)[0] if s["keys"] else (b"", 0)
        gbk[label] = {"elements": s["elements"], "bytes": s["bytes"], "keys": len(s["keys"]),
                      "largest_key_bytes": top_bytes, "largest_key_values": s["values"][top_key]}
    return {"pages": data["pages"], "warc_bytes": data["bytes"], "files": len(data["files"]),
            "core_s": round(wall, 1),
            "stages": {s["stage"]: {"in": s["in"], "out": s["out"], "dropped": sum(s["dropped"].values())}
                       for s in summary["stages"]},
            "written_bytes": dict(sorted(written.items())), "gbk": gbk}


def stage_of(label: str) -> str:
    """The stage a GroupByKey belongs to: its label's first part (e.g. near_dedup/Dedup/... -> near_dedup)."""
    return label.split("/")[0]


def linear(small: float, large: float, n_small: float, n_large: float, n: float) -> float:
    """small at n_small and large at n_large, extended along their line to n (never below zero)."""
    slope = (large - small) / (n_large - n_small)
    return max(0.0, large + slope * (n - n_large))


def project(measured: list[dict], pages: float, warc_bytes: float) -> dict:
    """The snapshot's figures from two measured runs (the smaller first)."""
    a, b = sorted(measured, key=lambda m: m["pages"])[:2]
    at = lambda x, y: linear(x, y, a["pages"], b["pages"], pages)  # noqa: E731
    by_stage, keys = collections.defaultdict(float), []
    for label in sorted(set(a["gbk"]) | set(b["gbk"])):
        ga, gb = a["gbk"].get(label), b["gbk"].get(label)
        if not ga or not gb:
            continue
        by_stage[stage_of(label)] += at(ga["bytes"], gb["bytes"])
        if not label.endswith("GroupShard") and gb["largest_key_values"] > 1:  # shards: keys fixed by config
            per_value = gb["largest_key_bytes"] / gb["largest_key_values"]
            keys.append({"gbk": label, "largest_key_bytes": gb["largest_key_bytes"],
                         "largest_key_values": gb["largest_key_values"], "bytes_per_value": round(per_value),
                         "values_for_key_limit": round(KEY_LIMIT_BYTES / per_value)})
    shuffle = sum(by_stage.values())
    core_s = at(a["core_s"], b["core_s"])
    vcpu_hours = core_s / 3600 / UTILIZATION
    worker_hours = vcpu_hours / WORKER["vcpus"]
    p = PRICES
    dataflow = {"vcpu": vcpu_hours * p["dataflow_vcpu_hour"],
                "memory": worker_hours * WORKER["memory_gb"] * p["dataflow_gb_hour"],
                "shuffle": shuffle / 1e9 * p["dataflow_shuffle_gb"]}
    spark = {"vms": vcpu_hours * p["n2_vcpu_hour"] + worker_hours * WORKER["memory_gb"] * p["n2_gb_hour"],
             "dataproc": vcpu_hours * p["dataproc_vcpu_hour"]}
    return {
        "measured_at_pages": [a["pages"], b["pages"]],
        "snapshot": {"pages": pages, "warc_bytes": warc_bytes,
                     "warc_bytes_by_pages": at(a["warc_bytes"], b["warc_bytes"])},
        "shuffle_bytes_by_stage": dict(sorted(by_stage.items(), key=lambda kv: -kv[1])),
        "shuffle_bytes": shuffle,
        # mixed-dev's pages are smaller than a snapshot's average (WARC bytes a page): what grows with a
        # page's bytes (texts, image bytes, core-seconds of extraction) may grow by up to this factor more
        "bytes_per_page_ratio": warc_bytes / at(a["warc_bytes"], b["warc_bytes"]),
        "written_bytes": {k: at(a["written_bytes"].get(k, 0), b["written_bytes"].get(k, 0))
                          for k in sorted(set(a["written_bytes"]) | set(b["written_bytes"]))},
        "core_ms_per_page": [round(a["core_s"] / a["pages"] * 1000, 2), round(b["core_s"] / b["pages"] * 1000, 2)],
        "vcpu_hours": vcpu_hours, "worker_hours": worker_hours, "worker": WORKER, "utilization": UTILIZATION,
        "cost_usd": {"dataflow": {**dataflow, "total": sum(dataflow.values())},
                     "spark_on_n2_dataproc": {**spark, "total": sum(spark.values())}},
        "content_keys": sorted(keys, key=lambda k: k["values_for_key_limit"]),
        "per_page_groups": per_page_groups(measured),
        "prices": PRICES,
    }


def markdown(proj: dict) -> str:
    gb = lambda x: f"{x / 1e9:,.0f} GB" if x < 1e12 else f"{x / 1e12:,.1f} TB"  # noqa: E731
    r = proj["bytes_per_page_ratio"]
    rows = [f"| stage | shuffled, by pages | by WARC bytes (x{r:.1f}) |", "|---|---|---|"]
    rows += [f"| {stage} | {gb(n)} | {gb(n * r)} |" for stage, n in proj["shuffle_bytes_by_stage"].items() if n >= 1e9]
    rows += [f"| all | {gb(proj['shuffle_bytes'])} | {gb(proj['shuffle_bytes'] * r)} |", "",
             "| content-keyed GroupByKey | largest key measured | bytes a value | sharing pages for a 2 GiB key |",
             "|---|---|---|---|"]
    rows += [f"| {k['gbk']} | {k['largest_key_bytes']:,} B, {k['largest_key_values']:,} values | {k['bytes_per_value']:,} | "
             f"{k['values_for_key_limit']:,} |" for k in proj["content_keys"][:8]]
    cost = proj["cost_usd"]
    rows += ["", f"{proj['core_ms_per_page'][1]} core-ms a page; {proj['vcpu_hours']:,.0f} vCPU-hours, "
             f"{proj['worker_hours']:,.0f} {proj['worker']['vcpus']}-vCPU worker-hours at {proj['utilization']:.0%} busy; "
             f"Dataflow ${cost['dataflow']['total']:,.0f} (shuffle ${cost['dataflow']['shuffle']:,.0f}), "
             f"Spark on n2 + Dataproc ${cost['spark_on_n2_dataproc']['total']:,.0f}."]
    n_small, n_large = (f"{n:,}" for n in proj["measured_at_pages"])
    rows += ["", f"| GroupByKey (how many) | bytes a page at {n_small} / {n_large} pages | elements a page | what it is for |",
             "|---|---|---|---|"]
    rows += [f"| {g['gbk']}{' (%d)' % g['count'] if g['count'] > 1 else ''} | "
             f"{g['bytes_per_page'][0]:,.0f} / {g['bytes_per_page'][1]:,.0f} | "
             f"{g['elements_per_page'][0]:.2f} / {g['elements_per_page'][1]:.2f} | {g['why'] or 'NOT JUSTIFIED'} |"
             for g in proj["per_page_groups"]]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    m.add_argument("--pages", type=int, nargs=2, default=[1700, 10000])
    m.add_argument("--work", type=Path, default=None, help="folder for the copies and outputs (kept)")
    m.add_argument("--out", type=Path, default=None, help="write the measurement JSON here too")
    pr = sub.add_parser("project")
    pr.add_argument("measured", type=Path)
    pr.add_argument("--snapshot-pages", type=float, default=3e9)
    pr.add_argument("--snapshot-bytes", type=float, default=100e12)
    args = ap.parse_args()
    if args.cmd == "measure":
        with tempfile.TemporaryDirectory() as tmp:
            work = args.work or Path(tmp)
            result = portable({"warc": str(args.warc), "runs": [measure(args.warc, n, work) for n in args.pages]})
        text = json.dumps(result, indent=1)
        if args.out:
            args.out.write_text(text)
        print(text)
    else:
        measured = json.loads(args.measured.read_text())["runs"]
        proj = project(measured, args.snapshot_pages, args.snapshot_bytes)
        print(json.dumps(proj, indent=1))
        print(markdown(proj), file=sys.stderr)
        r, tb = proj["bytes_per_page_ratio"], 1e12
        record(__file__, {
            "measured at pages": " / ".join(f"{n:,}" for n in proj["measured_at_pages"]),
            "shuffled, by pages / by WARC bytes": f"{proj['shuffle_bytes'] / tb:,.0f} / {proj['shuffle_bytes'] * r / tb:,.0f} TB",
            "largest shuffles": ", ".join(f"{k} {v / tb:,.0f} TB" for k, v in list(proj["shuffle_bytes_by_stage"].items())[:3]),
            "core-ms a page": proj["core_ms_per_page"][1],
            "Dataflow / Spark (n2 + Dataproc), by pages": f"${proj['cost_usd']['dataflow']['total']:,.0f} / "
                                                          f"${proj['cost_usd']['spark_on_n2_dataproc']['total']:,.0f}"}, proj)


if __name__ == "__main__":
    main()
