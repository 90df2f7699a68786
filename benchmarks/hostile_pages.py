"""Hostile pages through every per-page step that reads a page's DOM, and through a whole run.

    python benchmarks/hostile_pages.py [--scales 1 10] [--limit-ms 5000] [--no-run]

Builds the pages of tests/hostile_pages.py (a 5,000- and a 50,000-image gallery, 100,000 bare images,
20,000 figures nested in each other's captions, a 20,000-row table) at each scale, and prints one JSON
object:
  steps: per scale and page, for each step the worker runs on it (`extract`: the text branch's
         main-content extraction, the baseline every page already pays; `quality`: the line steps and
         the rules on its text, in process, bounded by the text's size; `linearise`: the interleaved
         branch's DOM walk; `image_refs`: the pairs branch's), its seconds as the worker waits for it
         (the sandbox's child for pages above the in-process bound, killed at the limit) and its outcome:
         how many nodes or images came back, or the reason-coded failure; `over_limit_s`: how far past
         the limit the worker waited (the margin: the kill, and reading back an answer that came in
         time);
  runs:  per scale, `curate run` (every stage, one worker) over one WARC of those pages: exit code, wall
         seconds, each page's fate per stage (kept, or the drop reason), and the loss audit's verdict.
Pages above `extract.max_html_bytes` (10 MiB) or `read.max_record_bytes` (64 MiB) are dropped by size
before any DOM is built: the steps are not timed for them (their outcome says so).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.record import record  # noqa: E402

from extract.html import ExtractionError, extract_main_text  # noqa: E402
from extract.images import extract_images_bounded  # noqa: E402
from extract.interleaved import linearise_bounded  # noqa: E402
from extract.sandbox import SandboxError  # noqa: E402
from tests import hostile_pages  # noqa: E402
from tests.warc_factory import gz, response_record  # noqa: E402

MAX_HTML_BYTES = 10 << 20
URL = "https://hostile.example/{}"


def quality(text: str) -> str:
    """The quality stage on a text, in process (its bound is the text's size): every line step, then the
    rules; the first failed rule, or "kept"."""
    from filters.clean import clean_for_rules
    from filters.quality import QualityConfig, QualityFilter

    config = QualityConfig()
    cleaned, _ = clean_for_rules(text, config.c4_line_filter, config.link_list_lines, config.boilerplate_model,
                                 config.rendering_max_copies, config.label_lines)
    failed, _ = QualityFilter(config)(cleaned, "en")
    return failed[0] if failed else "kept"


def time_steps(html: str, limit_ms: int) -> dict:
    if len(html.encode()) > MAX_HTML_BYTES:
        return {"bytes": len(html.encode()), "outcome": "page_too_large: not parsed"}
    texts = []
    steps = {"extract": lambda: len(texts.append(extract_main_text(html, "resiliparse", limit_ms)) or texts[0]),
             "quality": lambda: f"{len(texts[0])} chars: {quality(texts[0])}" if texts else "no text",
             "linearise": lambda: len(linearise_bounded(html, URL.format("p"), limit_ms).nodes),
             "image_refs": lambda: len(extract_images_bounded(html, URL.format("p"), 200, limit_ms))}
    out = {"bytes": len(html.encode())}
    for name, step in steps.items():
        started = time.perf_counter()
        try:
            outcome = step()
        except (SandboxError, ExtractionError) as err:
            outcome = f"{err.reason}: {err.detail}"
        seconds = time.perf_counter() - started
        out[name] = {"seconds": round(seconds, 3), "outcome": outcome,
                     "over_limit_s": round(max(0.0, seconds - limit_ms / 1000), 3)}
    return out


def fates(out: Path) -> dict:
    """{page: {stage: {reason: drops}}} from the run's drop rows: a page's own drops, and in image_pairs its
    images' (their rows name the page in the detail); a record the reader dropped whole is keyed by
    its detail. Pages a stage kept have no entry for it."""
    import pyarrow.parquet as pq

    result: dict = {}
    for folder in sorted((out / "dropped").iterdir()):
        for f in sorted(folder.glob("*.parquet")):
            for row in pq.read_table(f, columns=["url", "reason", "detail"]).to_pylist():
                if folder.name == "image_pairs":
                    page = row["detail"].rsplit(" on ", 1)[-1].rsplit(" at ", 1)[0]
                else:
                    page = row["url"] or f"unread record ({row['detail']})"
                reasons = result.setdefault(page.rsplit("/", 1)[-1], {}).setdefault(folder.name, {})
                reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
    return result


def run(pages: dict[str, str], workdir: Path) -> dict:
    warc = workdir / "hostile.warc.gz"
    with open(warc, "wb") as f:
        for name, html in pages.items():
            f.write(gz(response_record(URL.format(name), html.encode())))
    out = workdir / "out"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--input", str(warc), "--output", str(out),
                           "--workers", "1", "--quiet"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    audit = next((ln for ln in proc.stdout.splitlines() if ln.startswith("loss audit")), "")
    return {"exit_code": proc.returncode, "seconds": round(seconds, 1), "warc_bytes": warc.stat().st_size,
            "loss_audit": audit, "fates": fates(out) if proc.returncode == 0 else proc.stderr[-3000:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--limit-ms", type=int, default=5000)
    ap.add_argument("--no-run", action="store_true", help="time the steps only")
    args = ap.parse_args()
    report = {"limit_ms": args.limit_ms, "steps": {}, "runs": {}}
    for scale in args.scales:
        pages = hostile_pages.pages(scale)
        report["steps"][scale] = {name: time_steps(html, args.limit_ms) for name, html in pages.items()}
        print(json.dumps({"scale": scale, "steps": report["steps"][scale]}), file=sys.stderr, flush=True)
        if not args.no_run:
            with tempfile.TemporaryDirectory() as tmp:
                report["runs"][scale] = run(pages, Path(tmp))
    print(json.dumps(report, indent=1))
    headline = {}
    for scale, steps in report["steps"].items():
        slowest = max(((page, name, s["seconds"]) for page, by_step in steps.items() for name, s in by_step.items()
                       if isinstance(s, dict)), key=lambda t: t[2], default=None)
        if slowest:
            headline[f"x{scale}: slowest step"] = f"{slowest[1]} on {slowest[0]}, {slowest[2]} s (limit {args.limit_ms / 1000:g} s)"
    for scale, r in report["runs"].items():
        headline[f"x{scale}: curate run"] = f"exit {r['exit_code']}, {r['seconds']} s; {r['loss_audit'] or 'no loss audit line'}"
    record(__file__, headline, report)


if __name__ == "__main__":
    main()
