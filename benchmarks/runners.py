"""The local runners side by side: `curate run` (every stage, default config) on the same copies of a
real WARC with FnApiRunner (1 and 2 worker processes), Prism, Spark (`local[2]`) and Flink (an
embedded cluster, parallelism 2) through Beam's job servers, the engines `make engines` built, in one
run of this script; the engines' SDK workers either LOOPBACK (in the `curate` process) or from an
external worker pool (`-pool`: a process per worker, as a cluster without Docker runs them).

    python benchmarks/runners.py [--warc PATH] [--pages 10000] [--runners fnapi-1 fnapi-2 prism ... flink-pool]

The input is made as benchmarks/end_to_end.py makes it (the WARC copied with distinct record ids until
it holds about --pages HTML pages). Prints one JSON object: the input, and per runner the wall
clock of the `curate run` command, pages per second, and whether its documents and shards are the same
bytes as the first runner's (`same_bytes_as_first`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.end_to_end import DEFAULT_WARC, curate_run, make_input  # noqa: E402
from benchmarks.record import record  # noqa: E402

PRISM = ["--", "--runner=PrismRunner"]
SPARK = ["--", "--runner=SparkRunner", "--spark_master_url=local[2]"]
FLINK = ["--", "--runner=FlinkRunner", "--flink_master=[local]", "--parallelism=2"]
LOOPBACK = ["--environment_type=LOOPBACK"]
POOL = None  # an external SDK worker pool (Beam's worker_pool_main), started for the run
RUNNERS = {
    "fnapi-1": (1, []),
    "fnapi-2": (2, []),
    "prism": (1, PRISM + LOOPBACK),
    "spark": (1, SPARK + LOOPBACK),
    "flink": (1, FLINK + LOOPBACK),
    "prism-pool": (1, PRISM + [POOL]),
    "spark-pool": (1, SPARK + [POOL]),
    "flink-pool": (1, FLINK + [POOL]),
}


@contextlib.contextmanager
def worker_pool(extra: list):
    """`extra` with POOL replaced by an external worker pool's options, the pool running meanwhile: each
    worker the engine asks for is a process of its own (as on a cluster without Docker)."""
    if POOL not in extra:
        yield extra
        return
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             f"--service_port={port}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        yield [a for a in extra if a is not POOL] + ["--environment_type=EXTERNAL", f"--environment_config=localhost:{port}"]
    finally:
        pool.terminate()
        pool.wait(timeout=30)


def output_hashes(root: Path) -> str:
    """One sha256 over the run's documents and shards, file by file in name order."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.relative_to(root).parts[0] in ("docs", "shards"):
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--pages", type=int, default=10000)
    ap.add_argument("--runners", nargs="+", default=list(RUNNERS), choices=list(RUNNERS))
    ap.add_argument("--work", type=Path, default=None, help="folder for the copies (kept between runs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        data = make_input(args.warc, args.pages, work / f"copies-{args.pages}")
        result = {"input": {"warc": str(args.warc), **{k: v for k, v in data.items() if k != "files"},
                            "files": len(data["files"])}, "runners": {}}
        reference = None
        for name in args.runners:
            workers, extra = RUNNERS[name]
            out = Path(tmp) / f"out-{name}"
            with worker_pool(extra) as options:
                run = curate_run(data["files"], str(out), workers, options)
            digest = output_hashes(out)
            reference = reference or digest
            result["runners"][name] = {**run, "pages_per_s": round(data["pages"] / run["wall_s"], 1),
                                       "same_bytes_as_first": digest == reference}
            print(json.dumps({name: result["runners"][name]}), file=sys.stderr)
        print(json.dumps(result, indent=1))
        headline = {"pages": result["input"]["pages"]}
        headline.update({name: f"{r['wall_s']} s{'' if r['same_bytes_as_first'] else ' (different bytes)'}"
                         for name, r in result["runners"].items()})
        record(__file__, headline, result)


if __name__ == "__main__":
    main()
