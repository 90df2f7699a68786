"""Text-branch throughput against a bare fastwarc + resiliparse loop over the same WARC, same run.

    python benchmarks/extract_throughput.py [--warc PATH | --html-dir DIR] [--repeat K] [--workers N] [--no-single]

Prints one JSON object:
  bare:   docs/s of a single-process loop (fastwarc ArchiveIterator -> HTTP 200 HTML -> resiliparse
          charset detection + main-content extraction), the floor any pipeline pays;
  bare_parallel_<N>p: the same loop in N processes at once over shares of the copies (per_core_vs_bare:
          how much of the single-process rate each core keeps when all N are busy);
  read_extract_<W>w: our read+extract stages (the same work plus reason-coded accounting, Parquet
          stage outputs and Beam) with W local workers, W = 1 and N: docs_per_s end to end
          (wall time including pipeline start-up), steady_docs_per_s, startup_s, and
          ratio_per_core / steady_ratio_per_core = (docs/s / W) / bare docs/s. Target >= 0.8;
          for W = N also ratio_vs_bare_parallel / steady_ratio_vs_bare_parallel = docs/s / bare_parallel docs/s;
  full_text_branch_<N>w: docs/s through every text stage (language ID, quality rules,
          synthetic-text scorers, exact and near dedup, write).
The input is the WARC listed K times (distinct inputs to Beam, same bytes). Each pipeline is also run
on K/4 copies: the difference between the two runs gives the steady-state rate (what a worker sustains
on a production-sized shard) and the fixed start-up cost (pipeline construction, worker processes),
reported separately from the end-to-end figure. Bare-loop timings are the best of three passes spread
over the run (before, between and after the pipelines) and pipeline timings the best of --tries runs:
the minimum is the usual estimator of cost without interference, applied to both sides alike.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # repo root, not benchmarks/ (its packing.py would shadow the package)

from benchmarks.record import record  # noqa: E402

DEFAULT_WARC = ROOT.parent / "shared" / "data" / "corpus" / "mixed-dev.warc.gz"


def bare_loop(path: str, repeat: int) -> tuple[int, float]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    docs, started = 0, time.perf_counter()
    for _ in range(repeat):
        with open(path, "rb") as fh:
            for rec in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True):
                if rec.http_headers.status_code != 200 or "html" not in (rec.http_content_type or ""):
                    continue
                body = rec.reader.read()
                html = bytes_to_str(body, rec.http_charset or detect_encoding(body))
                extract_plain_text(html, main_content=True)
                docs += 1
    return docs, time.perf_counter() - started


def _bare_share(args: tuple[str, int]) -> int:
    return bare_loop(*args)[0]


def bare_parallel(path: str, repeat: int, processes: int) -> tuple[int, float]:
    """The bare loop in `processes` processes at once, each over its share of the copies: what the
    same cores give a plain script when all of them work, the per-core floor of a multi-worker run."""
    import multiprocessing

    shares = [repeat // processes + (i < repeat % processes) for i in range(processes)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        pool.map(_bare_share, [(path, 1)] * processes)  # warm: forked, modules imported, file cached
        started = time.perf_counter()
        docs = sum(pool.map(_bare_share, [(path, n) for n in shares], chunksize=1))
        return docs, time.perf_counter() - started


def pipeline(path: str, repeat: int, workers: int, stages: list[str]) -> dict:
    from pipelines.config import load_config
    from pipelines.run import run

    out = tempfile.mkdtemp(prefix="curate-bench-")
    links = []
    for i in range(repeat):  # K distinct file names for the same bytes
        link = os.path.join(out, f"in-{i:03d}.warc.gz")
        os.symlink(os.path.abspath(path), link)
        links.append(link)
    cfg = load_config(None, input=links, output=os.path.join(out, "run"), workers=workers, stages=stages,
                      write_dropped=False)
    started = time.perf_counter()
    summary = run(cfg, echo=False)
    wall = time.perf_counter() - started
    shutil.rmtree(out, ignore_errors=True)
    by = {s["stage"]: s for s in summary["stages"]}
    return {"docs_extracted": by["extract"]["out"] + by["extract"]["dropped"].get("no_text", 0),
            "docs_final": summary["stages"][-1]["out"], "wall_s": round(wall, 2),
            "stage_done_s": {s["stage"]: s["done_s"] for s in summary["stages"]}}  # when its group finished


def best_pipeline(path: str, repeat: int, workers: int, tries: int) -> dict:
    return min((pipeline(path, repeat, workers, ["read", "extract"]) for _ in range(tries)), key=lambda r: r["wall_s"])


def branch_rates(path: str, repeat: int, workers: int, tries: int) -> dict:
    """End-to-end and steady-state docs/s of read+extract on `repeat` copies (and on a quarter of them)."""
    small = best_pipeline(path, max(1, repeat // 4), workers, tries)
    full = best_pipeline(path, repeat, workers, tries)
    rate = full["docs_extracted"] / full["wall_s"]
    steady = (full["docs_extracted"] - small["docs_extracted"]) / (full["wall_s"] - small["wall_s"])
    return {**full, "docs_per_s": round(rate, 1), "docs_per_s_per_core": round(rate / workers, 1),
            "steady_docs_per_s": round(steady, 1), "startup_s": round(full["wall_s"] - full["docs_extracted"] / steady, 2)}


def warc_of_html_files(folder: Path, path: str) -> str:
    """`path`: a WARC of HTTP 200 responses (one gzip member each, as Common Crawl's) holding the HTML files
    of `folder` (*.html, *.html.gz): the branch on real-size pages. scrapinghub's 181 article pages average
    174 kB, and every one of them is extracted in the sandbox's child process; most of mixed-dev's generated
    pages are small enough to stay in process."""
    import gzip

    from tests.warc_factory import gz, response_record

    with open(path, "wb") as out:
        for file in sorted(folder.glob("*.html*")):
            body = file.read_bytes()
            if file.suffix == ".gz":
                body = gzip.decompress(body)
            out.write(gz(response_record(f"https://example.org/{file.name}", body, content_type="text/html")))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--warc", default=str(DEFAULT_WARC if DEFAULT_WARC.exists() else ROOT / "sample" / "mixed-dev-slice.warc.gz"))
    ap.add_argument("--repeat", type=int, default=16, help="copies of the WARC (at least 2: the steady-state rate "
                                                         "compares it with a quarter of them)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tries", type=int, default=2, help="best of this many pipeline runs per size")
    ap.add_argument("--no-single", action="store_true", help="measure N workers only, not also 1 (long inputs)")
    ap.add_argument("--skip-full", action="store_true", help="skip the whole-text-branch run")
    ap.add_argument("--html-dir", type=Path, help="instead of --warc: a WARC made of this folder's HTML files "
                    "(e.g. ../shared/data/html/scrapinghub_aeb/html: real-size pages)")
    args = ap.parse_args()
    if args.repeat < 2:
        ap.error("--repeat must be at least 2")
    if args.html_dir:
        args.warc = warc_of_html_files(args.html_dir, os.path.join(tempfile.mkdtemp(), "html-files.warc.gz"))
    import logging

    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    bare_runs, parallel_runs, results = [bare_loop(args.warc, args.repeat)], [], {}
    for workers in sorted({args.workers} if args.no_single else {1, args.workers}):
        results[workers] = branch_rates(args.warc, args.repeat, workers, args.tries)
        bare_runs.append(bare_loop(args.warc, args.repeat))
        if args.workers > 1:
            parallel_runs.append(bare_parallel(args.warc, args.repeat, args.workers))
    bare_docs, bare_s = min(bare_runs, key=lambda r: r[1])
    bare_rate = bare_docs / bare_s
    result = {"input": args.warc, "repeat": args.repeat, "cpu_count": os.cpu_count(),
              "bare": {"docs": bare_docs, "wall_s": round(bare_s, 2), "docs_per_s": round(bare_rate, 1),
                       "all_wall_s": [round(s, 2) for _, s in bare_runs]},
              "target_ratio_per_core": 0.8}
    if parallel_runs:
        docs, seconds = min(parallel_runs, key=lambda r: r[1])
        result[f"bare_parallel_{args.workers}p"] = {
            "docs": docs, "wall_s": round(seconds, 2), "docs_per_s": round(docs / seconds, 1),
            "per_core_vs_bare": round(docs / seconds / args.workers / bare_rate, 3),
            "all_wall_s": [round(s, 2) for _, s in parallel_runs]}
    for workers, branch in results.items():  # ratios against the best bare pass of the whole run
        branch["ratio_per_core"] = round(branch["docs_per_s"] / workers / bare_rate, 3)
        branch["steady_ratio_per_core"] = round(branch["steady_docs_per_s"] / workers / bare_rate, 3)
        if workers > 1 and parallel_runs:  # against the bare loop on as many cores, all busy
            parallel_rate = result[f"bare_parallel_{workers}p"]["docs_per_s"]
            branch["ratio_vs_bare_parallel"] = round(branch["docs_per_s"] / parallel_rate, 3)
            branch["steady_ratio_vs_bare_parallel"] = round(branch["steady_docs_per_s"] / parallel_rate, 3)
        result[f"read_extract_{workers}w"] = branch
    if not args.skip_full:
        full = pipeline(args.warc, args.repeat, args.workers,
                        ["read", "extract", "language", "quality", "synthetic", "exact_dedup", "near_dedup", "crosslingual", "write"])
        result[f"full_text_branch_{args.workers}w"] = {**full, "docs_per_s": round(full["docs_extracted"] / full["wall_s"], 1)}
    print(json.dumps(result, indent=1))
    headline = {"bare loop, pages/s": result["bare"]["docs_per_s"]}
    headline.update({f"read+extract, {w} worker(s), per core vs the bare loop": f"{b['ratio_per_core']} end to end, "
                     f"{b['steady_ratio_per_core']} steady" for w, b in results.items()})
    if f"full_text_branch_{args.workers}w" in result:
        headline[f"text branch, {args.workers} workers, pages/s"] = result[f"full_text_branch_{args.workers}w"]["docs_per_s"]
    record(__file__, headline, result)


if __name__ == "__main__":
    main()
