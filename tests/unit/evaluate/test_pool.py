import logging
import sys
import time

import pytest

from gpuscale.evaluate.pool import RunPool

logger = logging.getLogger("gpuscale.test_pool")


def chatty(word, *, progress):
    logger.info("worker says %s", word)
    progress(1.0)
    return word.upper()


def slow(seconds, *, progress):
    progress(0.0)
    time.sleep(seconds)
    logger.info("slow run finished")
    return seconds


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append((record.name, record.getMessage()))


@pytest.fixture
def records():
    root = logging.getLogger()
    handler = Records()
    saved, level = list(root.handlers), root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    yield handler
    root.handlers[:] = saved
    root.setLevel(level)


def test_worker_log_records_reach_the_callers_handlers_not_the_terminal(records, capfd):
    logging.getLogger().addHandler(logging.StreamHandler(sys.stderr))  # as the CLI has
    with RunPool(2) as pool:
        capfd.readouterr()  # drop anything from start-up
        assert pool.run(chatty, [("a", ("one",)), ("b", ("two",))]) == ["ONE", "TWO"]
    said = sorted(m for name, m in records.messages if name == "gpuscale.test_pool")
    assert said == ["worker says one", "worker says two"]
    # Only the caller's own stream handler wrote them: once each, never from a worker directly.
    err = capfd.readouterr().err
    assert err.count("worker says one") == 1
    assert err.count("worker says two") == 1


def test_an_interrupt_cancels_queued_runs_and_stops_the_workers_at_once(records):
    calls = [(f"r{i}", (30.0,)) for i in range(5)]

    def interrupt(key, fraction):
        raise KeyboardInterrupt

    pool = RunPool(2)
    processes = list(pool._executor._processes.values())
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), pool:
        pool.run(slow, calls, interrupt)
    assert time.monotonic() - start < 2.0
    # The executor's own thread may be reaping a worker at this moment, and until it
    # records the exit code is_alive() still says True: allow it the same 2 s bound.
    while any(p.is_alive() for p in processes) and time.monotonic() - start < 2.0:
        time.sleep(0.01)
    assert not any(p.is_alive() for p in processes)
    assert ("gpuscale.test_pool", "slow run finished") not in records.messages
