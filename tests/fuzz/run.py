"""Runs one fuzz target under atheris (libFuzzer) with the product modules instrumented.

    python -m tests.fuzz.run <target> -max_total_time=N [libFuzzer flags] [corpus_dir ...]
                             [--stop-on-crash] [--input-timeout=SECONDS]
    python -m tests.fuzz.run --summary build/fuzz/*.json

Without a corpus directory the seeds (tests/fuzz/seeds.py, built from tests/data) go to a temporary
one; a given directory is seeded when it holds no seeds yet and keeps what the fuzzer adds. The saved
regression inputs of the target (tests/fuzz/regressions/<target>/) are loaded as seeds too.

A crash is any exception out of the target: one the product code must not raise, or an
OracleViolation (a record neither output nor accounted for, a broken invariant). By default the
run keeps going after one, so that a 10-minute run reports every distinct failure: the smallest input
of each (signature: exception type and product frame, or oracle kind and container) is kept under
the artifact prefix (-artifact_prefix, default build/fuzz/artifacts/<target>/) with its traceback
next to it. --stop-on-crash gives libFuzzer's usual stop at the first one instead. An input that
runs longer than --input-timeout (CPU seconds, per-target defaults in INPUT_TIMEOUT) is interrupted and counted as a hang
(InputTimeout); native crashes, native hangs (-timeout, default 60 s per input) and out-of-memory
stop the run as libFuzzer does.

At the end one JSON line goes to stdout: target, executions (counted in TestOneInput), seconds,
exec_per_s, crashes (inputs that failed), distinct (signatures) and the signatures with their saved
inputs. The exit status is 0 only with no crash. `-max_total_time` and `-runs` are handled here (so the
JSON line is printed; libFuzzer gets a later backstop).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = Path(__file__).resolve().parent / "regressions"

# What each target's run instruments for coverage: the product code and the pure-Python library code
# it drives (fastwarc and resiliparse are compiled, so they give no Python-level coverage).
INSTRUMENT = {
    "warc_raw": ["extract"],
    "warc_records": ["extract"],
    "charset": ["extract"],
    "html": ["extract"],
    "image": ["filters", "PIL", "imagehash"],
    "text_rules": ["filters"],
    "interleaved": ["extract"],
    "image_refs": ["extract"],
    "pdf": ["extract"],
}
TARGET_NAMES = list(INSTRUMENT)
# Default --input-timeout per target (CPU seconds): a few hundred times a typical input's cost.
INPUT_TIMEOUT = {"warc_raw": 2.0, "warc_records": 5.0, "charset": 2.0, "html": 5.0, "image": 10.0,
                 "text_rules": 2.0, "interleaved": 5.0, "image_refs": 5.0, "pdf": 10.0}


def signature(exc: BaseException) -> str:
    """Stable name of a failure: oracle kind (and container), or exception type at its product frame."""
    from tests.fuzz.targets import OracleViolation

    if isinstance(exc, OracleViolation):
        m = re.match(r"\[([^\]]*)\]", str(exc).partition(": ")[2])
        return f"oracle:{exc.kind}" + (f"[{m.group(1)}]" if m else "")
    frames = traceback.extract_tb(exc.__traceback__)
    here = str(Path(__file__).resolve().parent)
    product = [f for f in frames if not f.filename.startswith(here)] or frames
    f = product[-1] if product else None
    if f is None:
        return type(exc).__name__
    name = _short_path(f.filename)
    if isinstance(exc, InputTimeout):  # where a hang was interrupted varies: name the module only
        return f"{type(exc).__name__}@{name}"
    return f"{type(exc).__name__}@{name}:{f.name}:{f.lineno}"


def _short_path(filename: str) -> str:
    """Repository files relative to the root; library files from their package (site-packages or
    the standard library: encodings/punycode.py)."""
    if filename.startswith(str(ROOT) + os.sep) and "site-packages" not in filename:
        return os.path.relpath(filename, ROOT)
    m = re.match(r".*/lib/python3\.\d+/(?:site-packages/)?(.*)", filename)
    return m.group(1) if m else os.path.basename(filename)


def _slug(sig: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", sig)
    return slug if len(slug) <= 100 else slug[:80] + "-" + hashlib.sha1(sig.encode()).hexdigest()[:12]


class InputTimeout(KeyboardInterrupt):
    """One input ran past --input-timeout seconds of CPU time (SIGVTALRM; libFuzzer's -timeout uses
    SIGALRM and stays the backstop for hangs in native code). A KeyboardInterrupt, so that product
    code which swallows every exception but interrupts (extract.warc around fastwarc) lets it
    through; the timer repeats every 0.5 s in case one lands in a broader handler anyway."""


def _on_vtalrm(signum, frame):
    raise InputTimeout()


class Runner:
    def __init__(self, target: str, test_one_input, artifacts: Path, keep_going: bool,
                 max_seconds: float | None, max_runs: int | None, input_timeout: float = 10.0):
        self.target, self.fn, self.artifacts = target, test_one_input, artifacts
        self.input_timeout = input_timeout
        self.keep_going, self.max_seconds, self.max_runs = keep_going, max_seconds, max_runs
        self.executions = self.crashes = 0
        self.signatures: dict[str, dict] = {}
        self.start = time.monotonic()
        self.reported = False
        self.cleanup: list[Path] = []
        self.seeds = 0

    def __call__(self, data: bytes) -> None:
        if (self.max_seconds is not None and time.monotonic() - self.start >= self.max_seconds) or \
                (self.max_runs is not None and self.executions >= self.max_runs):
            self.finish()
        self.executions += 1
        try:
            signal.setitimer(signal.ITIMER_VIRTUAL, self.input_timeout, 0.5)
            try:
                self.fn(data)
            finally:
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        except InputTimeout as exc:
            self.failed(data, exc)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - everything else is a finding
            self.failed(data, exc)

    def failed(self, data: bytes, exc: BaseException) -> None:
        self.crashes += 1
        self.record(data, exc)
        if not self.keep_going:
            raise exc

    def record(self, data: bytes, exc: BaseException) -> None:
        sig = signature(exc)
        entry = self.signatures.setdefault(sig, {"count": 0, "size": None, "input": None})
        entry["count"] += 1
        if entry["size"] is not None and len(data) >= entry["size"]:
            return
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / f"crash-{_slug(sig)}"
        path.write_bytes(data)
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        path.with_name(path.name + ".txt").write_text(f"{sig}\n{len(data)} bytes, sha1 "
                                                      f"{hashlib.sha1(data).hexdigest()}\n\n{tb}")
        entry["size"], entry["input"] = len(data), str(path)
        if entry["count"] == 1:
            print(f"\n=== {self.target}: new failure {sig} ({len(data)} bytes) -> {path}\n{tb}",
                  file=sys.stderr, flush=True)

    def report(self) -> dict:
        seconds = time.monotonic() - self.start
        return {"target": self.target, "executions": self.executions, "seconds": round(seconds, 1),
                "exec_per_s": round(self.executions / seconds, 1) if seconds else 0.0,
                "crashes": self.crashes, "distinct": len(self.signatures), "seeds": self.seeds,
                "signatures": self.signatures}

    def print_report(self) -> None:
        if self.reported:
            return
        self.reported = True
        print(json.dumps(self.report(), sort_keys=False), flush=True)
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)

    def finish(self) -> None:
        self.print_report()
        sys.stderr.flush()
        os._exit(1 if self.crashes else 0)  # libFuzzer's own exit would skip the report


def _int_flag(args: list[str], name: str) -> tuple[list[str], float | None]:
    value, rest = None, []
    for a in args:
        if a.startswith(f"-{name}="):
            value = float(a.split("=", 1)[1])
        else:
            rest.append(a)
    return rest, value


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--summary":
        sys.exit(summary(argv[1:]))
    if not argv or argv[0] not in INSTRUMENT:
        sys.exit(f"usage: python -m tests.fuzz.run {{{','.join(TARGET_NAMES)}}} -max_total_time=N [corpus_dir]")
    target, args = argv[0], argv[1:]
    keep_going = "--stop-on-crash" not in args
    args = [a for a in args if a != "--stop-on-crash"]
    input_timeout = INPUT_TIMEOUT[target]
    for a in [a for a in args if a.startswith("--input-timeout=")]:
        input_timeout = float(a.split("=", 1)[1])
        args.remove(a)
    args, max_seconds = _int_flag(args, "max_total_time")
    args, max_runs = _int_flag(args, "runs")
    flags = [a for a in args if a.startswith("-")]
    corpora = [Path(a) for a in args if not a.startswith("-")]
    prefix = next((a.split("=", 1)[1] for a in flags if a.startswith("-artifact_prefix=")), None)
    if prefix is None:
        prefix = str(ROOT / "build" / "fuzz" / "artifacts" / target) + os.sep
        flags.append(f"-artifact_prefix={prefix}")
    art_dir = Path(prefix) if prefix.endswith(os.sep) else Path(prefix).parent
    art_dir.mkdir(parents=True, exist_ok=True)
    if not any(a.startswith("-timeout=") for a in flags):
        flags.append("-timeout=60")
    if target == "warc_records" and not any(a.startswith("-max_len=") for a in flags):
        flags.append("-max_len=2048")  # the seeds are short random strings; let inputs grow past them
    if not any(a.startswith("-keep_seed=") for a in flags):
        # keep every seed in the corpus: compiled code (fastwarc, resiliparse, Pillow's C decoders) gives
        # no coverage, so libFuzzer would otherwise drop most real pages and images as uninteresting
        flags.append("-keep_seed=1")
    if max_seconds is not None:
        flags.append(f"-max_total_time={int(max_seconds) + 120}")  # backstop only
    if max_runs is not None:
        flags.append(f"-runs={int(max_runs) + 1000}")

    import atheris

    with atheris.instrument_imports(include=INSTRUMENT[target]):
        import extract.html  # noqa: F401
        import extract.images  # noqa: F401
        import extract.interleaved  # noqa: F401
        import extract.pdf  # noqa: F401
        import extract.sandbox  # noqa: F401
        import extract.warc  # noqa: F401
        import filters.boilerplate  # noqa: F401
        import filters.clean  # noqa: F401
        import filters.image  # noqa: F401
        import filters.quality  # noqa: F401
        if target == "image":
            from PIL import Image

            Image.init()  # the format plugins, imported lazily otherwise (and then uninstrumented)
    from tests.fuzz import seeds, targets

    if target == "image":
        targets.image_cfg(0)  # pipelines.image_pairs (Beam) imported before the clock starts
    if target == "pdf":
        import pipelines.interleaved  # noqa: F401  (Beam, for PDF_REASONS) before the clock starts
    seeds.records()

    runner = Runner(target, targets.TARGETS[target], art_dir, keep_going, max_seconds, max_runs, input_timeout)
    signal.signal(signal.SIGVTALRM, _on_vtalrm)
    if not corpora:
        tmp = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
        runner.cleanup.append(tmp)
        corpora = [tmp]
    main_corpus = corpora[0]
    main_corpus.mkdir(parents=True, exist_ok=True)
    if not any(main_corpus.glob("seed-*")):
        runner.seeds = seeds.write_seeds(target, main_corpus)
    else:
        runner.seeds = sum(1 for _ in main_corpus.glob("seed-*"))
    regressions = REGRESSIONS / target
    if regressions.is_dir() and any(regressions.iterdir()):
        corpora.append(regressions)  # read only: libFuzzer adds new units to the first directory
    atexit.register(runner.print_report)  # a crash with --stop-on-crash ends through sys.exit
    print(f"fuzz {target}: {runner.seeds} seeds in {main_corpus}, instrumenting {INSTRUMENT[target]}",
          file=sys.stderr, flush=True)
    runner.start = time.monotonic()
    atheris.Setup([sys.argv[0], *flags, *map(str, corpora)], runner)
    atheris.Fuzz()


def summary(paths: list[str]) -> int:
    """Table of the JSON lines of a `make fuzz` run; non-zero if any target crashed or reported nothing."""
    bad = 0
    print(f"{'target':<14}{'executions':>12}{'seconds':>9}{'exec/s':>9}{'crashes':>9}  signatures")
    for p in paths:
        name = Path(p).stem
        lines = [ln for ln in Path(p).read_text().splitlines() if ln.startswith("{")] if Path(p).exists() else []
        if not lines:
            print(f"{name:<14}{'-':>12}{'-':>9}{'-':>9}{'-':>9}  no report (see {Path(p).with_suffix('.log')})")
            bad += 1
            continue
        r = json.loads(lines[-1])
        sigs = ", ".join(f"{s} x{v['count']}" for s, v in r["signatures"].items())
        print(f"{r['target']:<14}{r['executions']:>12}{r['seconds']:>9}{r['exec_per_s']:>9}{r['crashes']:>9}  {sigs}")
        bad += bool(r["crashes"]) or r["executions"] == 0
    return 1 if bad else 0


if __name__ == "__main__":
    main(sys.argv[1:])
