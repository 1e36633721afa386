"""Signals that end a run: SIGINT, SIGTERM and SIGHUP unwind every ``with`` block, so no
temporary output file is left and an old output stays as it was."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

__all__ = ["Terminated", "interrupts_deferred", "termination_handled"]

# The signals that end a run and after which no temporary output may remain. SIGINT already
# raises KeyboardInterrupt; the others are given a handler that raises Terminated (POSIX only).
_TERMINATING = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived. A BaseException, like KeyboardInterrupt, so that no per-line
    ``except Exception`` takes it for a bad line, and every ``with`` block unwinds: the temporary
    output file is removed and an old output stays as it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    # Once the run is ending, a second signal must not interrupt the cleanup that removes the
    # temporary file; it stays pending and dies with the process.
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(_TERMINATING))
    raise Terminated(signum)


@contextlib.contextmanager
def _swapped(handler: Any, keep: Any) -> Iterator[dict[int, Any]]:
    """``handler`` for each terminating signal whose current handler ``keep`` accepts, the
    previous handlers (yielded) back after. Nothing is swapped outside the main thread: the
    signals are not ours there (main() called from a thread)."""
    previous: dict[int, Any] = {}
    for signum in _TERMINATING:
        if keep(signum, signal.getsignal(signum)):
            try:
                previous[signum] = signal.signal(signum, handler)
            except ValueError:
                break
    try:
        yield previous
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def termination_handled() -> contextlib.AbstractContextManager[dict[int, Any]]:
    """SIGTERM and SIGHUP raise Terminated while a command runs (and the previous handlers come
    back after, for a caller running main() in its own process). A signal the caller ignores
    stays ignored (nohup sets SIGHUP to SIG_IGN); SIGINT already raises KeyboardInterrupt."""
    return _swapped(
        _raise_terminated,
        lambda signum, current: signum != signal.SIGINT and current is signal.SIG_DFL,
    )


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP back while the temporary output file is created and its
    cleanup registered: a signal between the two would leave the file behind (seen under load in
    the termination tests). The held signal is delivered (KeyboardInterrupt, Terminated) right
    after. The handlers themselves are swapped for one that only notes the signal: blocking it
    in this thread's signal mask is not enough once the engines' thread pools exist, since the
    kernel then hands the signal to one of those threads and Python still runs its handler here,
    at the next line. An ignored signal stays ignored (None: a handler not set from Python)."""
    held: list[int] = []
    previous: dict[int, Any] = {}
    try:
        with _swapped(
            lambda number, frame: held.append(number),
            lambda signum, current: current is not signal.SIG_IGN and current is not None,
        ) as previous:
            yield
    finally:
        if held:  # delivered once the handlers are back
            _deliver(held[0], previous[held[0]])


def _deliver(signum: int, handler: Any) -> None:
    """What the signal would have done had it not been held."""
    if callable(handler):
        handler(signum, None)
    else:  # SIG_DFL: the default action (ending the process)
        signal.raise_signal(signum)
