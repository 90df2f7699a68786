"""The worker process of a local run with worker processes (FnApiRunner, `direct_running_mode=
multi_processing`, started by `pipelines/beam_overhead.py`): Beam's SDK harness, run as `python -m
apache_beam.runners.worker.sdk_worker_main` runs it, and once the harness has done its work and the
process's exit functions have run (the extraction children stopped, logs flushed), the process ends
without the interpreter's finalization: freeing every object of a worker that has held the run's
models is slow, and the runner waits for each worker to exit, one after another. A harness that
fails raises, and the process ends as Beam's own would, with the traceback and a non-zero status.

With `--standby` the process is started before the runner needs it, as the run begins: it imports
Beam's harness and the pipeline's modules while the driver builds the graph, then waits for one line
on stdin, the environment Beam gives a worker it starts (the runner's control and logging addresses,
the pipeline options, the worker id), and runs the harness with it. End of input before that line
(the run needed no worker process) ends it with status 0. A standby worker forked from the driver
(pipelines/beam_overhead.py `run_forked`) has those modules already and waits for the same line on a
pipe."""

from __future__ import annotations

import json
import os
import sys

from pipelines.beam_overhead import STANDBY, run_harness


def await_environment() -> bool:
    """A standby worker's wait: the pipeline's modules imported (what unpickling its functions imports
    first), then its environment read from stdin and installed; False at end of input."""
    import pipelines.run  # noqa: F401  (the stages' modules, their models' libraries)

    line = sys.stdin.readline()
    if not line:
        return False
    os.environ.clear()
    os.environ.update(json.loads(line))
    return True


def main() -> None:
    if sys.argv[1:] == [STANDBY] and not await_environment():
        os._exit(0)
    run_harness()


if __name__ == "__main__":
    main()
