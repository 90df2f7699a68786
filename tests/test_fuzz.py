"""Fuzz targets (tests/fuzz): each runs under atheris for FUZZ_SECONDS (default 6) in a subprocess and
must end with no crash and no unaccounted record; every saved failing input in tests/fuzz/regressions/
is replayed through its target in-process. `make fuzz` runs the targets for 10 minutes each."""

import json
import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("atheris")

from tests.fuzz.run import TARGET_NAMES  # noqa: E402
from tests.fuzz.targets import TARGETS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions"
FUZZ_SECONDS = int(os.environ.get("FUZZ_SECONDS", "6"))
MIN_EXECUTIONS = 20   # the slowest target (warc_records) does about 100 a second
REPLAY_SECONDS = 30   # a saved hang must fail its replay, not stall the suite


def test_every_target_has_a_runner_entry():
    assert sorted(TARGETS) == sorted(TARGET_NAMES)


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_fuzz_target(target, tmp_path):
    cmd = [sys.executable, "-m", "tests.fuzz.run", target, f"-max_total_time={FUZZ_SECONDS}",
           f"-artifact_prefix={ROOT / 'build' / 'fuzz' / 'artifacts' / target}{os.sep}", str(tmp_path / "corpus")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=FUZZ_SECONDS * 3 + 180,
                          env={**os.environ, "RUST_BACKTRACE": "0"})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no report from {' '.join(cmd)} (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report = json.loads(lines[-1])
    failures = "\n".join(f"  {sig} x{v['count']}: {v['input']}" for sig, v in report["signatures"].items())
    log = "\n".join(ln for ln in proc.stderr.splitlines() if not re.match(r"#\d+\s", ln))  # no libFuzzer status lines
    assert proc.returncode == 0 and report["crashes"] == 0, (
        f"{target}: {report['crashes']} failing inputs in {report['executions']} executions "
        f"(exit {proc.returncode}):\n{failures}\n{log[-3000:]}")
    assert report["executions"] >= MIN_EXECUTIONS, report


def _regressions() -> list:
    if not REGRESSIONS.is_dir():
        return []
    return [pytest.param(d.name, f, id=f"{d.name}/{f.name}")
            for d in sorted(REGRESSIONS.iterdir()) if d.is_dir()
            for f in sorted(d.iterdir()) if f.is_file()]


@contextmanager
def _time_limit(seconds: float):
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # repeats: the first may land in a broad except
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("target,path", _regressions())
def test_regression_input(target, path):
    """A saved input (see tests/fuzz/regressions/README.md for what each one triggered) must pass."""
    assert target in TARGETS, f"{path}: no target {target!r}"
    with _time_limit(REPLAY_SECONDS):
        TARGETS[target](path.read_bytes())
