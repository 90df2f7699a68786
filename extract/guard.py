"""Per-document wall-clock limit without a thread per document.

One watchdog thread per worker process holds the deadline of every guarded block (one per thread, so
Beam harnesses that run several bundles at once in one process are covered) and, when one passes,
raises `DocumentTimeout` in that thread (CPython's async exception, as resiliparse's TimeGuard does).
The watchdog sleeps until the earliest deadline instead of polling: in a busy worker it wakes about
once per timeout period, and entering a guarded block costs one uncontended lock. The exception is
delivered at the next Python bytecode, so it cannot stop native code that is already running:
extract_main_text sends every page whose native worst case is not provably small to a child process
that is killed at the deadline instead (extract/sandbox.py). A process forked from one with a watchdog
starts its own on first use (threads do not survive fork(); the inherited one would never fire).
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time


class DocumentTimeout(BaseException):
    """BaseException, so that libraries' broad `except Exception` blocks cannot swallow it."""


class Watchdog:
    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._deadlines: dict[int, float] = {}  # thread id -> deadline of its guarded block
        self._fired: set[int] = set()
        self._waiting_until = math.inf  # the deadline the watchdog sleeps towards (inf: idle)
        threading.Thread(target=self._watch, name="curate-watchdog", daemon=True).start()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if not self._deadlines:
                    self._waiting_until = math.inf
                    self._cond.wait()
                    continue
                thread, deadline = min(self._deadlines.items(), key=lambda kv: kv[1])
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self._waiting_until = deadline
                    self._cond.wait(remaining)
                    continue
                del self._deadlines[thread]  # fire once per guarded block
                self._fired.add(thread)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(DocumentTimeout))

    def limit(self, seconds: float) -> "_Limit":
        """`with watchdog().limit(s):` raises DocumentTimeout if the block runs longer than `s`."""
        return _Limit(self, seconds)


class _Limit:
    """The guarded block (a plain class: contextlib's generator machinery costs more than the guard)."""

    __slots__ = ("dog", "seconds", "thread")

    def __init__(self, dog: Watchdog, seconds: float):
        self.dog, self.seconds = dog, seconds

    def __enter__(self) -> None:
        dog, self.thread = self.dog, threading.get_ident()
        with dog._cond:
            deadline = dog._deadlines[self.thread] = time.monotonic() + self.seconds
            dog._fired.discard(self.thread)
            if deadline < dog._waiting_until:  # sooner than the watchdog would wake: wake it now
                dog._cond.notify()

    def __exit__(self, *exc) -> bool:
        dog = self.dog
        with dog._cond:
            dog._deadlines.pop(self.thread, None)
            fired = self.thread in dog._fired
            dog._fired.discard(self.thread)
        if fired and exc[0] is None:  # delivered inside code that swallowed it: still a timeout
            raise DocumentTimeout()
        return False


_WATCHDOG: Watchdog | None = None


def watchdog() -> Watchdog:
    """The process-wide watchdog, started on first use (so DoFns stay picklable)."""
    global _WATCHDOG
    if _WATCHDOG is None:
        _WATCHDOG = Watchdog()
    return _WATCHDOG


def _forget_after_fork() -> None:
    global _WATCHDOG
    _WATCHDOG = None


os.register_at_fork(after_in_child=_forget_after_fork)
