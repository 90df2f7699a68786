"""The worker process of a local run with worker processes (FnApiRunner, `direct_running_mode=
multi_processing`, started by `pipelines/beam_overhead.py`): Beam's SDK harness, run as `python -m
apache_beam.runners.worker.sdk_worker_main` runs it, and once the harness has done its work and the
process's exit functions have run (the extraction children stopped, logs flushed), the process ends
without the interpreter's finalization: freeing every object of a worker that has held the run's
models is slow, and the runner waits for each worker to exit, one after another. A harness that
fails raises, and the process ends as Beam's own would, with the traceback and a non-zero status."""

from __future__ import annotations

import atexit
import os
import sys

from apache_beam.runners.worker import sdk_worker_main


def main() -> None:
    sdk_worker_main.main(sys.argv)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
