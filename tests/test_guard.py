"""The per-document watchdog: fires in the right thread, on time, and never after a block has ended."""

import threading
import time

import pytest

from extract.guard import DocumentTimeout, watchdog


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_block_over_its_limit_times_out_promptly():
    started = time.monotonic()
    with pytest.raises(DocumentTimeout):
        with watchdog().limit(0.05):
            _spin(5)
    assert time.monotonic() - started < 1.0


def test_short_limit_fires_while_the_watchdog_waits_for_a_long_one():
    """Another thread's 30 s deadline must not delay this thread's 50 ms one."""
    entered, release = threading.Event(), threading.Event()

    def long_block():
        with watchdog().limit(30):
            entered.set()
            release.wait(10)

    other = threading.Thread(target=long_block)
    other.start()
    entered.wait(5)
    try:
        started = time.monotonic()
        with pytest.raises(DocumentTimeout):
            with watchdog().limit(0.05):
                _spin(5)
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
        other.join()


def test_only_the_slow_thread_is_interrupted():
    outcomes = {}

    def run(name, limit, work):
        try:
            with watchdog().limit(limit):
                _spin(work)
            outcomes[name] = "done"
        except DocumentTimeout:
            outcomes[name] = "timeout"

    threads = [threading.Thread(target=run, args=("slow", 0.1, 5)),
               threading.Thread(target=run, args=("fast", 5, 0.3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == {"slow": "timeout", "fast": "done"}


def test_finished_blocks_are_never_interrupted_later():
    for _ in range(200):
        with watchdog().limit(0.05):
            pass
    _spin(0.3)  # past every deadline above: nothing may fire now
