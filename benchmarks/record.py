"""The benchmarks' latest figures, and docs/benchmarks.md written from them.

A benchmark script ends with `record(__file__, headline, result)`: its JSON result and a few headline
figures go to benchmarks/results/<script>.json with the commit, the date and the machine of the run, and
docs/benchmarks.md is rewritten from every script's latest record: a row per script with what it
measures against what (the first paragraph of its docstring), the headline, and where and when it ran.
Only the latest run of each script is kept; git has the rest.

    python benchmarks/record.py    # rewrites docs/benchmarks.md from the records
"""

from __future__ import annotations

import ast
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
NOT_SCRIPTS = {"record.py", "__init__.py"}


def _commit() -> str:
    """The checkout's commit, with "+changes" when the code differs from it (the records and this page
    aside: recording a run changes them; and the docs, which no run reads)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results", ":(exclude)docs"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def machine() -> str:
    """Cores, architecture and Python, and the GPU where nvidia-smi names one."""
    described = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return described
    return ", ".join([described] + [g.strip() for g in gpus if g.strip()])


def portable(value):
    """`value` with every absolute path under the checkout's parent folder made relative to the checkout
    (`/…/shared/data/x` -> `../shared/data/x`), so a record reads the same on every machine."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str) and value.startswith(str(ROOT.parent) + os.sep):
        return os.path.relpath(value, ROOT)
    return value


def record(script: str, headline: dict, result: dict, argv: list[str] | None = None) -> Path:
    """Keep this run of `script` as its latest: `headline` (a few figures, label -> value) and the
    whole `result`, with the command's arguments, the commit, the date and the machine. Rewrites
    docs/benchmarks.md. Returns the record's path."""
    name = Path(script).stem
    entry = portable({"script": f"{name}.py", "args": list(sys.argv[1:] if argv is None else argv),
                      "headline": headline, "commit": _commit(), "date": datetime.date.today().isoformat(),
                      "machine": machine(), "result": result})
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(entry, indent=1, ensure_ascii=False) + "\n")
    DOC.write_text(render())
    return path


def scripts() -> list[Path]:
    return sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name not in NOT_SCRIPTS)


def summary(path: Path) -> str:
    """The first paragraph of a script's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _value(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def render() -> str:
    rows = ["# Benchmarks", "",
            "Written by `benchmarks/record.py` from each script's latest record (`benchmarks/results/<script>.json`,",
            "with its whole result); a script's run rewrites its row. Every script prints its result as JSON and",
            "measures its baseline in the same run. What the figures mean and what was concluded from them is in",
            "`docs/design.md` and `docs/crawl.md`.", "",
            "| script | measures | latest figures | run |", "|---|---|---|---|"]
    for path in scripts():
        rec_path = RESULTS / f"{path.stem}.json"
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else None
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        if rec is None:
            rows.append(f"| `{path.name}` | {cell(summary(path))} | not run since records began | |")
            continue
        args = " ".join(rec["args"])
        figures = "; ".join(f"{k}: {_value(v)}" for k, v in rec["headline"].items())
        rows.append(f"| `{path.name}{(' ' + args) if args else ''}` | {cell(summary(path))} | {cell(figures)} | "
                    f"{rec['commit']}, {rec['date']}, {rec['machine']} |")
    return "\n".join(rows + _budget()) + "\n"


def _budget() -> list[str]:
    """The per-page budget from the timed runs of end_to_end.py's (copies of one WARC) and
    end_to_end_distinct.py's (distinct pages) latest records: ms per page read, per stage, a column each."""
    runs = []
    for script, what in (("end_to_end", "copies of mixed-dev"), ("end_to_end_distinct", "distinct pages")):
        path = RESULTS / f"{script}.json"
        rec = json.loads(path.read_text()) if path.exists() else None
        budget = (rec.get("result") or {}).get("budget") if rec else None
        if budget:
            runs.append((script, what, rec, budget))
    if not runs:
        return []
    rows = ["", "## Per-page budget", "",
            "The timed run of `benchmarks/end_to_end.py` (copies of one real WARC: from exact dedup on, a run",
            "carries one copy's documents, so the stages after it have little to do) and of",
            "`benchmarks/end_to_end_distinct.py` (distinct real pages: every stage works on every page), 1 worker,",
            "`curate run --stage-cost`: Beam's execution time of each stage's transforms per page read (the page",
            "views that the branches share, one decoding and parse of each page, are charged to the first stage",
            "that reads them: the extract stage's figure includes the image branches' views); a change that raises",
            "a stage's figure says by how much and why. "
            + "; ".join(f"`{script}.py`: {rec['commit']}, {rec['date']}, {rec['machine']}"
                        for script, _, rec, _ in runs)
            + ".", "",
            "| stage | " + " | ".join(f"{what}, {budget['pages']:,} pages" for _, what, _, budget in runs) + " |",
            "|---|" + "---|" * len(runs)]
    order = list(dict.fromkeys(name for *_, budget in runs for name in budget["order"]))  # the runs' order

    def cells(fn) -> str:
        return " | ".join(fn(budget) for *_, budget in runs)

    for name in order:
        rows.append(f"| {name} | "
                    + cells(lambda b: f"{b['stages'][name]['ms_per_page']:.2f}" if name in b["stages"] else "") + " |")
    rows += ["| loss audit (outside any stage) | "
             + cells(lambda b: f"{b['outside_stages']['ms_per_page']:.2f}") + " |",
             "| **all transforms** | " + cells(lambda b: f"**{b['transforms_ms_per_page']:.2f}**") + " |",
             "| runner machinery and idle (the pipeline's wall clock less the above) | "
             + cells(lambda b: f"{b['runner_ms_per_page']:.2f}") + " |",
             "| **the command's wall clock** (Python start-up and graph construction too) | "
             + cells(lambda b: f"**{b['wall_s'] * 1000 / b['pages']:.2f}**") + " |"]
    return rows


if __name__ == "__main__":
    DOC.write_text(render())
    print(DOC)
