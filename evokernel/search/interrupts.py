"""How a driver is stopped: Ctrl-C and SIGTERM (`kill`, `ray job stop`) both end the search as an
interrupt (status 'stopped', resumable), except while the run's closing writes are made."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop as Ctrl-C does."""
    raise KeyboardInterrupt


@contextmanager
def signals_deferred(main_thread: bool = True) -> Iterator[None]:
    """Ctrl-C and SIGTERM are noted, not raised, inside (the store's closing writes are not cut short)."""
    if not main_thread:
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
