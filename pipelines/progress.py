"""Progress of a local run: bytes and records read against the inputs' total size, with an ETA, and
each group as it finishes.

The reader's DoFn (one input file per call) reports where it is in its file to a small JSON file
under OUT/logs/progress/ at most every `REPORT_S` seconds and once at the end of the file (`report`).
The driver, blocked in the pipeline's run, polls those files and the groups' completion markers from
a thread (`Progress`) and prints to the console it had before the workers' logs were redirected:
one line rewritten in place on a terminal, a plain line every `plain_every_s` seconds otherwise (CI
logs), and always a last line. Only local runners share the driver's filesystem, so only they report.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

REPORT_S = 1.0


class FileProgress:
    """The reader's side: `update(position, records)` while reading one input file; `position` is a
    callable (the stream's tell), asked only when a report is due."""

    def __init__(self, folder: str | None, path: str):
        self.file = None if folder is None else os.path.join(
            folder, hashlib.sha1(path.encode()).hexdigest()[:16] + ".json")
        self.path, self.last = path, 0.0

    def update(self, position, records: int, done: bool = False) -> None:
        if self.file is None or (not done and time.monotonic() - self.last < REPORT_S):
            return
        self.last = time.monotonic()
        tmp = f"{self.file}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump({"path": self.path, "bytes": int(position()), "records": records, "done": done}, fh)
        os.replace(tmp, self.file)  # a reader never sees half a file


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """The driver's side, a context manager around the pipeline's run: polls OUT/logs/progress/ and
    the markers of `groups` ({label: marker paths}), writes lines to file descriptor `console`."""

    def __init__(self, folder: str, total_bytes: int, files: int, groups: dict[str, list[str]], console: int,
                 tty: bool, plain_every_s: float = 10.0, poll_s: float = 0.5):
        self.folder, self.total, self.files, self.groups = folder, total_bytes, files, dict(groups)
        self.console = console
        self.tty, self.plain_every_s, self.poll_s = tty, plain_every_s, poll_s
        self.stop, self.started, self.thread = threading.Event(), time.monotonic(), None
        self.last_plain = self.started

    def __enter__(self):
        os.makedirs(self.folder, exist_ok=True)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._poll(final=True)
        os.close(self.console)

    def _loop(self):
        while not self.stop.wait(self.poll_s):
            self._poll()

    def _write(self, text: str) -> None:
        os.write(self.console, text.encode("utf-8", "replace"))

    def read_state(self) -> tuple[int, int, int]:
        """(bytes read, records read, files done) over the reports so far."""
        done_bytes = records = files = 0
        for name in sorted(os.listdir(self.folder)):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.folder, name)) as fh:
                    state = json.load(fh)
            except (OSError, ValueError):
                continue
            done_bytes += state["bytes"]
            records += state["records"]
            files += bool(state["done"])
        return done_bytes, records, files

    def line(self) -> str:
        read, records, files = self.read_state()
        elapsed = time.monotonic() - self.started
        if files >= self.files:  # the input is read: what is left is the groups still running
            return (f"read all {files} files ({_size(read)}, {records:,} records); "
                    f"{len(self.groups)} groups running after {_duration(elapsed)}")
        share = min(1.0, read / self.total) if self.total else 1.0
        eta = f", ETA {_duration(elapsed * (1 - share) / share)}" if 0 < share < 1 else ""
        return (f"read {share:.0%} ({_size(read)} of {_size(self.total)}, {records:,} records, {files} files done) "
                f"in {_duration(elapsed)}{eta}")

    def _poll(self, final: bool = False) -> None:
        for label, markers in list(self.groups.items()):
            if all(os.path.exists(m) for m in markers):
                del self.groups[label]
                self._write(("\r\033[K" if self.tty else "") + f"  done: {label} after "
                            f"{_duration(time.monotonic() - self.started)}\n")
        now = time.monotonic()
        if self.tty:
            self._write("\r\033[K" + self.line() + ("\n" if final else ""))
        elif final or now - self.last_plain >= self.plain_every_s:
            self.last_plain = now
            self._write(self.line() + "\n")
