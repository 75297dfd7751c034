"""Worker processes for independent simulation runs, reporting progress and logs as they go.

Policies on one scenario do not depend on each other, so on a multi-core machine
they run side by side. Each worker sends its fraction done and its log records
through one queue the caller drains, so the caller's progress display keeps moving
and log lines reach the caller's handlers (and its live display) instead of
being written to the terminal from another process. On POSIX the workers are
forked, all at once and before the caller starts any thread (a progress
display), so no lock is inherited half-held; elsewhere they are spawned.

Workers ignore SIGINT: Ctrl-C reaches the caller only, which cancels the
runs not started and terminates the workers (``RunPool.run``), so an
interrupt stops everything at once instead of letting queued runs start.
"""

import contextlib
import logging
import logging.handlers
import multiprocessing
import queue
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

R = TypeVar("R")
Task = Callable[..., R]
"""A module-level function called as ``task(*args, progress=report)``."""

Message = tuple[str, Any, Any]
"""``("progress", key, fraction)``, ``("log", record, None)`` or ``("done", key, None)``."""

_SINK: "Queue[Message] | None" = None

STOP_TIMEOUT_S = 1.0
"""How long ``cancel`` waits for a terminated worker to exit, seconds."""

FLUSH_TIMEOUT_S = 2.0
"""How long ``run`` waits, after the last result, for the workers' last messages, seconds."""


@contextlib.contextmanager
def decisions_at_debug() -> Iterator[None]:
    """Keep the policies' own lines (their reasoning, at DEBUG) out of a sweep's output.

    Yields:
        Nothing; the level is restored on exit.
    """
    decisions = logging.getLogger("gpuscale.scaling")
    saved = decisions.level
    if not logging.getLogger().isEnabledFor(logging.DEBUG):  # a run makes thousands
        decisions.setLevel(logging.WARNING)
    try:
        yield
    finally:
        decisions.setLevel(saved)


class _QueueLogHandler(logging.handlers.QueueHandler):
    """Puts each (formatted, picklable) record on the pool's queue as a ``log`` message."""

    def enqueue(self, record: logging.LogRecord) -> None:
        """Send the record to the parent."""
        self.queue.put_nowait(("log", record, None))


def _init_worker(sink: "Queue[Message]", level: int) -> None:
    global _SINK  # set once per worker process by the pool
    _SINK = sink
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    root = logging.getLogger()
    root.handlers[:] = [_QueueLogHandler(sink)]
    root.setLevel(level)


def _noop() -> int:
    return 0


def _call(task: Task[R], key: str, args: tuple[Any, ...]) -> R:
    sink = _SINK

    def report(fraction: float) -> None:
        if sink is not None:
            sink.put(("progress", key, fraction))

    try:
        return task(*args, progress=report)
    finally:
        if sink is not None:  # after every message of this call: the caller waits for it
            sink.put(("done", key, None))


class RunPool:
    """A started process pool and the queue its workers report progress and logs on.

    Args:
        jobs: Worker processes, all started before this returns.
    """

    def __init__(self, jobs: int) -> None:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.jobs = jobs
        self._queue: Queue[Message] = context.Queue()
        self._executor = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=context,
            initializer=_init_worker,
            initargs=(self._queue, logging.getLogger().getEffectiveLevel()),
        )
        for warm in [self._executor.submit(_noop) for _ in range(jobs)]:
            warm.result()
        self._cancelled = False
        logger.debug("started %d workers (%s)", jobs, context.get_start_method())

    def run(
        self,
        task: Task[R],
        calls: Sequence[tuple[str, tuple[Any, ...]]],
        progress: Callable[[str, float], None] | None = None,
    ) -> list[R]:
        """Call ``task(*args, progress=...)`` for each (key, args) in the workers.

        Workers' log records are handled here, by the logger that made them, while
        this runs; it returns once every call's last message has arrived (a result
        can overtake the messages sent before it). On any exception here
        (KeyboardInterrupt included) the runs are cancelled and the workers
        terminated before it propagates.

        Args:
            task: A module-level function (workers receive it by reference).
            calls: One (key, args) per call; the key labels its progress reports.
            progress: Called here with (key, fraction done) as workers report.

        Returns:
            The results, in the order of ``calls``.
        """
        futures: list[Future[R]] = [
            self._executor.submit(_call, task, key, args) for key, args in calls
        ]
        try:
            pending: set[Future[R]] = set(futures)
            done = 0
            while pending:
                done += self._drain(progress)
                _, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            flushed_by = time.monotonic() + FLUSH_TIMEOUT_S
            done += self._drain(progress)
            while done < len(futures) and time.monotonic() < flushed_by:
                time.sleep(0.01)
                done += self._drain(progress)
            return [f.result() for f in futures]
        except BaseException:
            self.cancel(futures)
            raise

    def _drain(self, progress: Callable[[str, float], None] | None) -> int:
        """Handle every message waiting; returns how many calls said they are done."""
        done = 0
        while True:
            try:
                kind, first, second = self._queue.get_nowait()
            except queue.Empty:
                return done
            if kind == "done":
                done += 1
            elif kind == "progress":
                if progress is not None:
                    progress(first, second)
            else:
                record: logging.LogRecord = first
                source = logging.getLogger(record.name)
                if source.isEnabledFor(record.levelno):
                    source.handle(record)

    def cancel(self, futures: Sequence[Future[Any]] = ()) -> None:
        """Cancel ``futures`` not started and terminate the workers, without waiting for runs."""
        if self._cancelled:
            return
        self._cancelled = True
        for future in futures:
            future.cancel()
        processes: list[BaseProcess] = list(self._executor._processes.values())
        # A call too big for the pipe (a day's scenario) may still be half-sent to a
        # worker about to die; without this the executor's thread, and then the
        # interpreter's exit, would wait for that send forever.
        call_queue = getattr(self._executor, "_call_queue", None)
        if call_queue is not None:
            call_queue.cancel_join_thread()
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():  # a loaded machine can be slow to deliver SIGTERM
                process.kill()
                process.join(STOP_TIMEOUT_S)
        self._queue.cancel_join_thread()  # the readers are gone; drop what was not read
        logger.debug("terminated %d workers", len(processes))

    def close(self) -> None:
        """Stop the workers and the queue (at once when the runs were cancelled)."""
        if not self._cancelled:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._queue.close()
        self._queue.join_thread()

    def __enter__(self) -> "RunPool":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            self.cancel()  # an error or Ctrl-C: do not wait for runs nobody will read
        self.close()
