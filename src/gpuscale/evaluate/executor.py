"""Where independent runs execute: here, a local process pool, or a Dask cluster.

A sweep is hundreds of independent runs (policy x knob value x seed), so the
harness hands them to a ``concurrent.futures`` executor. Three runners share
one ``run(task, calls, progress)`` method: ``SerialRunner`` (this process),
``pool.RunPool`` (local worker processes that forward progress and logs) and
``DaskRunner`` (a Dask distributed cluster, through ``Client.get_executor()``,
for sweeps larger than one machine; its workers keep their own logs, and
progress moves as runs finish). ``open_runner`` picks one.
"""

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Protocol, TypeVar

from gpuscale.errors import config_error
from gpuscale.evaluate.pool import RunPool

logger = logging.getLogger(__name__)

R = TypeVar("R")
Progress = Callable[[str, float], None]
"""Called with (call key, fraction done of that call)."""

DASK_CONNECT_TIMEOUT_S = 10.0
"""How long ``DaskRunner`` waits for the scheduler, seconds."""


class Runner(Protocol):
    """Runs ``task(*args, progress=...)`` for each (key, args), results in call order."""

    def run(
        self,
        task: Callable[..., R],
        calls: Sequence[tuple[str, tuple[Any, ...]]],
        progress: Progress | None = None,
    ) -> list[R]:
        """Run every call (see ``pool.RunPool.run``).

        Returns:
            The results, in the order of ``calls``.
        """
        ...


class SerialRunner:
    """Runs every call in this process, one after another."""

    def run(
        self,
        task: Callable[..., R],
        calls: Sequence[tuple[str, tuple[Any, ...]]],
        progress: Progress | None = None,
    ) -> list[R]:
        """Run every call here (see ``Runner``).

        Returns:
            The results, in the order of ``calls``.
        """
        out = []
        for key, args in calls:

            def report(fraction: float, key: str = key) -> None:
                if progress is not None:
                    progress(key, fraction)

            out.append(task(*args, progress=report))
        return out


def _plain(task: Callable[..., R], args: tuple[Any, ...]) -> R:
    """Call ``task`` without a progress channel (a remote worker has none to the caller)."""
    return task(*args, progress=lambda _fraction: None)


class DaskRunner:
    """Runs calls on a Dask distributed cluster through its ``concurrent.futures`` executor.

    Args:
        address: The scheduler, e.g. ``tcp://10.0.0.5:8786``.
        timeout_s: How long to wait for the scheduler, seconds.

    Raises:
        ConfigError: dask.distributed is not installed, or the scheduler does not answer.
    """

    def __init__(self, address: str, timeout_s: float = DASK_CONNECT_TIMEOUT_S) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise config_error(
                f"--dask-scheduler {address}",
                "dask.distributed is not installed",
                "pip install 'gpuscale[dask]'",
            ) from None
        try:
            self._client = Client(address, timeout=timeout_s, set_as_default=False)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as exc:
            raise config_error(
                f"--dask-scheduler {address}",
                f"no scheduler answered ({type(exc).__name__})",
                "check the address and that the scheduler runs",
            ) from None
        self._executor = self._client.get_executor(pure=False)  # type: ignore[no-untyped-call]
        self.address = address
        logger.info("connected to the Dask scheduler at %s", address)

    def run(
        self,
        task: Callable[..., R],
        calls: Sequence[tuple[str, tuple[Any, ...]]],
        progress: Progress | None = None,
    ) -> list[R]:
        """Run every call on the cluster; progress reports each call when it finishes.

        On any exception here (KeyboardInterrupt included) the calls not finished are
        cancelled before it propagates.

        Returns:
            The results, in the order of ``calls``.
        """
        futures: list[Future[R]] = [self._executor.submit(_plain, task, args) for _, args in calls]
        keys = {id(f): key for f, (key, _) in zip(futures, calls, strict=True)}
        try:
            pending: set[Future[R]] = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # raise a failed run's error at once
                    if progress is not None:
                        progress(keys[id(future)], 1.0)
            return [f.result() for f in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    def close(self) -> None:
        """Disconnect from the scheduler (the cluster keeps running)."""
        self._executor.shutdown(wait=False)
        self._client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> "DaskRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def open_runner(jobs: int, calls: int, dask_scheduler: str | None = None) -> Iterator[Runner]:
    """The runner for ``calls`` runs: Dask when a scheduler is given, else local.

    Local runs use a process pool of ``min(jobs, calls)`` workers when that is more
    than one, else this process. Open it before any thread starts (see ``RunPool``).

    Yields:
        The runner, closed (its workers stopped) on exit.
    """
    if dask_scheduler:
        with DaskRunner(dask_scheduler) as dask:
            yield dask
        return
    workers = min(jobs, calls)
    if workers <= 1:
        yield SerialRunner()
        return
    with RunPool(workers) as pool:
        yield pool
