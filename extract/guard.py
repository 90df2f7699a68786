"""Per-document wall-clock limit without a thread per document.

One watchdog thread per worker process watches the current deadline and, when it passes, raises
`DocumentTimeout` in the guarded thread (CPython's async exception, as resiliparse's TimeGuard does).
Entering a guarded block costs two attribute writes, so it can wrap every document. The exception is
delivered at the next Python bytecode: native extractor code is bounded by the HTML size cap instead.
"""

from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager


class DocumentTimeout(BaseException):
    """BaseException, so that libraries' broad `except Exception` blocks cannot swallow it."""


class Watchdog:
    def __init__(self, check_interval_s: float = 0.02):
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._target = 0
        self._fired = False
        self._interval = check_interval_s
        threading.Thread(target=self._watch, name="curate-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(self._interval)
            with self._lock:
                if self._deadline is not None and time.monotonic() > self._deadline:
                    self._deadline = None  # fire once per guarded block
                    self._fired = True
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(self._target), ctypes.py_object(DocumentTimeout))

    @contextmanager
    def limit(self, seconds: float):
        with self._lock:
            self._target = threading.get_ident()
            self._deadline = time.monotonic() + seconds
            self._fired = False
        try:
            yield
        finally:
            with self._lock:
                self._deadline = None
                fired = self._fired
        if fired:  # delivered inside code that swallowed it: still a timeout
            raise DocumentTimeout()


_WATCHDOG: Watchdog | None = None


def watchdog() -> Watchdog:
    """The process-wide watchdog, started on first use (so DoFns stay picklable)."""
    global _WATCHDOG
    if _WATCHDOG is None:
        _WATCHDOG = Watchdog()
    return _WATCHDOG
