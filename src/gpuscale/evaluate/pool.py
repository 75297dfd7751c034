"""Worker processes for independent simulation runs, reporting progress as they go.

Policies on one scenario do not depend on each other, so on a multi-core machine
they run side by side. Each worker reports its fraction done through a queue the
caller drains, so one progress bar per run keeps moving. On POSIX the workers
are forked, all at once and before the caller starts any thread (a progress
display), so no lock is inherited half-held; elsewhere they are spawned.
"""

import logging
import multiprocessing
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing.queues import Queue
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

R = TypeVar("R")
Task = Callable[..., R]
"""A module-level function called as ``task(*args, progress=report)``."""

_PROGRESS: "Queue[tuple[str, float]] | None" = None


def _init_worker(progress_queue: "Queue[tuple[str, float]]") -> None:
    global _PROGRESS  # set once per worker process by the pool
    _PROGRESS = progress_queue


def _noop() -> int:
    return 0


def _call(task: Task[R], key: str, args: tuple[Any, ...]) -> R:
    sink = _PROGRESS

    def report(fraction: float) -> None:
        if sink is not None:
            sink.put((key, fraction))

    return task(*args, progress=report)


class RunPool:
    """A started process pool and the queue its workers report progress on.

    Args:
        jobs: Worker processes, all started before this returns.
    """

    def __init__(self, jobs: int) -> None:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.jobs = jobs
        self._queue: Queue[tuple[str, float]] = context.Queue()
        self._executor = ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=_init_worker, initargs=(self._queue,)
        )
        for warm in [self._executor.submit(_noop) for _ in range(jobs)]:
            warm.result()
        logger.debug("started %d workers (%s)", jobs, context.get_start_method())

    def run(
        self,
        task: Task[R],
        calls: Sequence[tuple[str, tuple[Any, ...]]],
        progress: Callable[[str, float], None] | None = None,
    ) -> list[R]:
        """Call ``task(*args, progress=...)`` for each (key, args) in the workers.

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
        pending: set[Future[R]] = set(futures)
        while pending:
            self._drain(progress)
            _, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
        self._drain(progress)
        return [f.result() for f in futures]

    def _drain(self, progress: Callable[[str, float], None] | None) -> None:
        while True:
            try:
                key, fraction = self._queue.get_nowait()
            except queue.Empty:
                return
            if progress is not None:
                progress(key, fraction)

    def close(self) -> None:
        """Stop the workers and the queue."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._queue.close()
        self._queue.join_thread()

    def __enter__(self) -> "RunPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
