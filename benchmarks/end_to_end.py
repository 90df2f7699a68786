"""End to end: `curate run` (every stage, default config) on copies of a real WARC, with 1 and 2 local
workers, against datatrove's FineWeb recipe (when datatrove is installed) and a bare fastwarc +
resiliparse loop over the same files, in the same run.

    python benchmarks/end_to_end.py [--warc PATH] [--pages 2000 10000] [--workers 1 2] [--tries 1]

The input is the WARC copied until it holds about --pages HTML pages, each copy's WARC-Record-IDs made
distinct (as records of different crawls would be), so every copy is read, extracted and scored; the
texts stay the same, so dedup drops the repeats, as it would on a real re-crawl. Prints one JSON object:
  inputs:      per size, files, pages (HTML 200 responses), bytes;
  curate:      per size and worker count, wall_s (process start to exit, the `curate run` command),
               pages_per_s, pages_per_s_per_core, and the summary's pipeline wall_s;
  datatrove:   per size and task count, its version and wall_s of its FineWeb recipe (WarcReader,
               URLFilter, resiliparse main-content extraction, language, Gopher repetition and quality,
               C4, FineWeb quality, JsonlWriter; no dedup) with --datatrove-python;
  bare:        pages/s of a single-process loop (read, charset, main-content extraction only);
  speedup_2w:  curate 2 workers / 1 worker at each size; per_core_vs_datatrove when both ran;
  budget:      ms per page read, per stage, of one more 1-worker run of the largest size with
               `--stage-cost` (Beam's per-transform msecs; docs/benchmarks.md shows it as a table);
  fixed_s:     a rerun on the bundled sample with every group finished except the last (--tries times,
               the fastest reported): the cost of a run that does almost nothing (start-up, pipeline
               construction, the last group); and a rerun with nothing left to do.
Settings alternate within each try (the machine's speed drifts); each setting's fastest try is reported
beside all of them (`tries_wall_s`).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.record import record  # noqa: E402

DEFAULT_WARC = ROOT.parent / "shared" / "data" / "corpus" / "mixed-dev.warc.gz"
CURATE = str(Path(sys.executable).with_name("curate"))
RECORD_ID = re.compile(rb"^(WARC-Record-ID:\s*<urn:uuid:)([0-9a-fA-F-]+)>", re.M)


def gzip_members(data: bytes):
    """The decompressed gzip members of a WARC.gz, one by one."""
    while data:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        yield inflater.decompress(data)
        data = inflater.unused_data


def copy_with_new_ids(src: Path, dest: Path, copy: int) -> None:
    """`src` rewritten member by member with every WARC-Record-ID made unique to this copy (written
    under a temporary name first: an interrupted copy is never taken for a finished one)."""
    partial = dest.with_suffix(".partial")
    with open(partial, "wb") as out:
        for member in gzip_members(src.read_bytes()):
            member = RECORD_ID.sub(lambda m: m.group(1) + m.group(2)[:-4] + b"%04x>" % copy, member)
            out.write(gzip.compress(member, compresslevel=1))
    partial.rename(dest)


def count_pages(path: Path) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    with open(path, "rb") as fh:
        return sum(1 for rec in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True)
                   if rec.http_headers.status_code == 200 and "html" in (rec.http_content_type or ""))


def make_input(src: Path, pages: int, folder: Path) -> dict:
    per_copy = count_pages(src)
    copies = max(1, round(pages / per_copy))
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(copies):
        dest = folder / f"copy-{i:04d}.warc.gz"
        if not dest.exists():
            copy_with_new_ids(src, dest, i)
        files.append(dest)
    pages = sum(count_pages(f) for f in files)
    if pages != per_copy * copies:
        raise RuntimeError(f"{folder}: {pages} pages in the copies, {per_copy * copies} expected; delete it")
    return {"files": [str(f) for f in files], "pages": pages,
            "bytes": sum(f.stat().st_size for f in files)}


def bare_loop(files: list[str]) -> tuple[int, float]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    docs, started = 0, time.perf_counter()
    for path in files:
        with open(path, "rb") as fh:
            for rec in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True):
                if rec.http_headers.status_code != 200 or "html" not in (rec.http_content_type or ""):
                    continue
                body = rec.reader.read()
                extract_plain_text(bytes_to_str(body, rec.http_charset or detect_encoding(body)), main_content=True)
                docs += 1
    return docs, time.perf_counter() - started


def curate_run(files: list[str], out: str, workers: int, extra: list[str] = ()) -> dict:
    cmd = [CURATE, "run", "--output", out, "--workers", str(workers)]
    for f in files:
        cmd += ["--input", f]
    cmd += extra  # last: it may end with `-- BEAM OPTIONS`
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"curate run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(Path(out, "stats", "summary.json").read_text())
    return {"wall_s": round(wall, 2), "pipeline_wall_s": summary.get("wall_s"),
            "docs_out": next(s["out"] for s in summary["stages"] if s["stage"] == "near_dedup"),
            **({"cost": {**summary["cost"], "order": [s["stage"] for s in summary["stages"]]}}
               if "cost" in summary else {})}


DATATROVE_SCRIPT = r'''
import sys, time
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.extractors.base import BaseExtractor
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter, LanguageFilter, URLFilter)
from datatrove.pipeline.readers import WarcReader
from datatrove.pipeline.writers.jsonl import JsonlWriter
from datatrove.utils import lid

folder, out, tasks, lid_model, engine = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]


class Resiliparse(BaseExtractor):
    # datatrove 0.10.1 ships Trafilatura and ReadabilityInscriptis; the FineWeb recipe with
    # resiliparse's main-content extraction is the peer measured here (docs/benchmarks.md)
    name = "resiliparse"

    def __init__(self, timeout: float = 1):
        super().__init__(timeout)

    def extract(self, text):
        from resiliparse.extract.html2text import extract_plain_text
        return extract_plain_text(text, main_content=True)


def _local_model(self):  # no network here: the lid.176 model this repository ships (.ftz, quantized)
    if self._model is None:
        from fasttext.FastText import _FastText
        self._model = _FastText(lid_model)
    return self._model


lid.FastTextLID.model = property(_local_model)
# the task processes unpickle datatrove's own class, not the patch above: put the file where its
# cache looks first, so nothing is downloaded there either
import os, shutil
from datatrove.io import cached_assets_path, strip_protocol
cache = cached_assets_path(library_name="datatrove", namespace="lid", subfolder=lid.FT176LID.MODEL_SUBFOLDER)
target = os.path.join(cache, strip_protocol(lid.FT176LID.MODEL_URL).replace("/", "_"))
if not os.path.exists(target + ".completed"):
    shutil.copyfile(lid_model, target)
    open(target + ".completed", "w").close()
started = time.perf_counter()
# engine "trafilatura": the published FineWeb recipe's extractor (favour_precision, datatrove's default dedup)
extractor = Resiliparse() if engine == "resiliparse" else Trafilatura(favour_precision=True)
LocalPipelineExecutor(pipeline=[WarcReader(folder, glob_pattern="*.warc.gz"), URLFilter(), extractor,
                                LanguageFilter(), GopherRepetitionFilter(), GopherQualityFilter(),
                                C4QualityFilter(filter_no_terminal_punct=False), FineWebQualityFilter(),
                                JsonlWriter(out)],
                      tasks=tasks, workers=tasks, logging_dir=out + "/logs").run()
print(time.perf_counter() - started)
'''


def datatrove_version(python: str) -> str | None:
    proc = subprocess.run([python, "-c", "from importlib.metadata import version; print(version('datatrove'))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def datatrove_run(python: str, folder: str, out: str, tasks: int, engine: str = "resiliparse") -> float:
    """datatrove's FineWeb recipe over the *.warc.gz of `folder` into `out` (JSONL, ids = WARC-Record-IDs),
    with resiliparse's main-content extraction (the default) or `engine="trafilatura"`; its wall s."""
    lid_model = str(ROOT / "filters" / "models" / "lid.176.ftz")
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:  # not a pipe: its pool's forkserver outlives it, holding pipes
        proc = subprocess.run([python, "-c", DATATROVE_SCRIPT, folder, out, str(tasks), lid_model, engine],
                              stdout=log, stderr=subprocess.STDOUT, text=True)
        if proc.returncode:
            log.seek(0)
            raise RuntimeError(f"datatrove failed: {log.read()[-2000:]}")
    return round(time.perf_counter() - started, 2)


def compare_size(result: dict, pages: int, inp: dict, folder: Path, workers_list: list[int], tries: int,
                 datatrove_python: str) -> None:
    """The bare loop, then curate with each worker count and datatrove with as many tasks, alternating, into
    `result` under `pages`."""
    result["inputs"][pages] = {**inp, "files": len(inp["files"])}
    docs, seconds = bare_loop(inp["files"])
    result["bare"][pages] = {"pages": docs, "wall_s": round(seconds, 2), "pages_per_s": round(docs / seconds, 1)}
    # Settings alternate within each try (1 worker, datatrove 1 task, 2 workers, datatrove 2 tasks,
    # then again): this machine's speed drifts by up to 1.5x within an hour, so settings run one
    # after another would compare different machines. The fastest try of each is reported.
    runs = {w: [] for w in workers_list}
    dt_walls = {w: [] for w in workers_list}
    for _ in range(tries):
        for workers in workers_list:
            out = tempfile.mkdtemp(prefix="curate-e2e-")
            runs[workers].append(curate_run(inp["files"], out, workers))
            subprocess.run(["rm", "-rf", out])
            if result["datatrove"]["version"]:
                dt_out = tempfile.mkdtemp(prefix="datatrove-e2e-")
                dt_walls[workers].append(datatrove_run(datatrove_python, str(folder), dt_out, workers))
                subprocess.run(["rm", "-rf", dt_out])
    for workers in workers_list:
        best = min(runs[workers], key=lambda r: r["wall_s"])
        rate = inp["pages"] / best["wall_s"]
        result["curate"][f"{pages}/{workers}w"] = {**best, "pages_per_s": round(rate, 1),
                                                   "pages_per_s_per_core": round(rate / workers, 1),
                                                   "tries_wall_s": [r["wall_s"] for r in runs[workers]]}
        if dt_walls[workers]:
            wall = min(dt_walls[workers])
            result["datatrove"][f"{pages}/{workers}"] = {"wall_s": wall, "pages_per_s": round(inp["pages"] / wall, 1),
                                                         "tries_wall_s": dt_walls[workers]}
            result["curate"][f"{pages}/{workers}w"]["per_core_vs_datatrove"] = round(wall / best["wall_s"], 2)
    one, two = (result["curate"].get(f"{pages}/{w}w") for w in (1, 2))
    if one and two:
        result.setdefault("speedup_2w", {})[pages] = round(one["wall_s"] / two["wall_s"], 2)


def timed_budget(files: list[str], pages: int) -> dict:
    """One more 1-worker run with each stage timed (Beam's state sampler on, which the other runs leave off:
    it costs about 2 ms per bundle): ms per page read, per stage."""
    out = tempfile.mkdtemp(prefix="curate-e2e-cost-")
    timed = curate_run(files, out, 1, ["--stage-cost"])
    subprocess.run(["rm", "-rf", out])
    return {"pages": pages, "workers": 1, "wall_s": timed["wall_s"], **timed["cost"]}


def headline_of(result: dict) -> dict:
    """The record's figures: each size and worker count's wall clock and ratio, 2 workers against 1, the budget."""
    headline = {}
    for key, run in result["curate"].items():
        pages, workers = key.split("/")
        vs = f", {run['per_core_vs_datatrove']}x datatrove per core" if "per_core_vs_datatrove" in run else ""
        headline[f"{int(pages):,} pages, {workers}"] = f"{run['wall_s']} s{vs}"
    headline.update({f"2 workers vs 1 at {int(p):,} pages": f"{x}x" for p, x in result.get("speedup_2w", {}).items()})
    budget = result["budget"]
    headline[f"ms per page at {budget['pages']:,} pages, 1 worker, timed"] = (
        f"{budget['transforms_ms_per_page']} in stages + {budget['runner_ms_per_page']} runner")
    return headline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--pages", type=int, nargs="+", default=[2000, 10000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tries", type=int, default=1, help="runs per setting; the fastest is reported")
    ap.add_argument("--work", type=Path, default=None, help="folder for the copies (kept between runs)")
    ap.add_argument("--datatrove-python", default=sys.executable,
                    help="a Python with datatrove[io,processing], resiliparse, spacy, aiohttp and requests "
                         "installed (it pins other versions than ours: a venv of its own); skipped when it has "
                         "no datatrove")
    args = ap.parse_args()
    work = args.work or Path(tempfile.gettempdir()) / "curate-end-to-end"
    result = {"warc": str(args.warc), "cores": os.cpu_count(), "inputs": {}, "curate": {}, "bare": {},
              "datatrove": {"version": datatrove_version(args.datatrove_python)}}
    for pages in args.pages:
        inp = make_input(args.warc, pages, work / f"in-{pages}")
        compare_size(result, pages, inp, work / f"in-{pages}", args.workers, args.tries, args.datatrove_python)
    result["budget"] = timed_budget(inp["files"], args.pages[-1])  # the largest size, from the loop's last round
    # fixed cost: the bundled sample (the default config's inputs, what `make run` runs) with every
    # group finished except the last, rerun --tries times
    out = tempfile.mkdtemp(prefix="curate-e2e-fixed-")
    curate_run([], out, 1)
    from pipelines.registry import STAGES

    last = list(STAGES)[-1]
    reruns = []
    for _ in range(args.tries):
        subprocess.run(["rm", "-rf", f"{out}/{last}/_SUCCESS"])
        reruns.append(curate_run([], out, 1)["wall_s"])
    noop = curate_run([], out, 1)
    subprocess.run(["rm", "-rf", out])
    result["fixed_s"] = {f"sample_last_group_{last}": min(reruns), "tries_wall_s": reruns,
                         "nothing_to_do": noop["wall_s"], "goal_s": 5}
    print(json.dumps(result, indent=2))
    headline = headline_of(result)
    headline["last-group rerun / nothing to do"] = (f"{result['fixed_s'][f'sample_last_group_{last}']} / "
                                                    f"{result['fixed_s']['nothing_to_do']} s")
    record(__file__, headline, result)


if __name__ == "__main__":
    main()
