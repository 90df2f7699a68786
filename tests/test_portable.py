"""The same pipeline on a portable runner: Beam's Python job service (the Job API that Flink's and
Spark's job servers also implement) with an external SDK worker pool (`worker_pool_main`, the way
Flink and Spark clusters run Python workers), compared byte for byte with the local FnApiRunner.

The Python job service runs a job through `FnApiRunner.run_via_runner_api`, which asks the pool for
one SDK worker per environment (it never reads `direct_num_workers`): one pool worker here; Flink's
and Spark's job servers ask for one per task slot (`--parallelism`)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.run import run
from tests.warc_factory import MINI

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
TEXT_BRANCH = ["read", "extract", "language", "quality", "synthetic", "exact_dedup", "near_dedup", "crosslingual", "write"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service on port {port} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listening on port {port} after {seconds} s")


@pytest.fixture(scope="module")
def job_service(tmp_path_factory):
    """(job endpoint, worker pool endpoint) of a Python job service and an external worker pool whose
    workers run this interpreter (the pool starts `python` from PATH)."""
    logs = tmp_path_factory.mktemp("portable")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT)}
    job, pool = _free_port(), _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=ROOT,
                              stdout=open(logs / f"{name}.log", "wb"), stderr=subprocess.STDOUT)
             for name, module, args in (
                 ("job", "apache_beam.runners.portability.local_job_service_main", ["--port", str(job)]),
                 ("pool", "apache_beam.runners.worker.worker_pool_main", ["--service_port", str(pool)]))]
    try:
        for port, proc in zip((job, pool), procs):
            _wait_listening(port, proc)
        yield f"localhost:{job}", f"localhost:{pool}", logs
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def _outputs(root: Path) -> dict[str, str]:
    """sha256 of every deterministic output file: documents, shards, the reader's rows per file."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()
            and (p.relative_to(root).parts[0] in ("docs", "shards", "images") or p.name == "file_rows.json")}


def test_portable_runner_with_an_external_worker_pool_gives_the_same_bytes(job_service, tmp_path):
    job, pool, logs = job_service
    cfg = load_config(TINY, input=[str(MINI)], workers=1, stages=TEXT_BRANCH)
    local = run(cfg.model_copy(update={"output": str(tmp_path / "local")}), echo=False)
    result = {}
    portable_cfg = cfg.model_copy(update={
        "output": str(tmp_path / "portable"),
        "beam_args": ["--runner=PortableRunner", f"--job_endpoint={job}", "--environment_type=EXTERNAL",
                      f"--environment_config={pool}"]})
    # a job whose worker never starts waits forever: bound it (the fixture's teardown then stops the services)
    thread = threading.Thread(target=lambda: result.update(run(portable_cfg, echo=False)), daemon=True)
    thread.start()
    thread.join(300)
    if thread.is_alive():
        pytest.fail(f"the portable run did not finish in 300 s; see {logs}")
    portable = result
    assert local["runner"] == "FnApiRunner" and portable["runner"] == "PortableRunner"
    assert portable["audit"]["ok"]
    assert [s["out"] for s in portable["stages"]] == [s["out"] for s in local["stages"]]
    ours = _outputs(tmp_path / "local")
    assert ours and any(k.startswith("docs/text/") for k in ours)
    assert _outputs(tmp_path / "portable") == ours
    assert "Starting worker" in (logs / "pool.log").read_text()  # the pool's worker ran the job
