"""The cross-request batcher of `mtkit serve` (mtkit/batcher.py), with a recording
stand-in for the model: which jobs share a step, results routed back, settings never
mixed, the token budget, the queue bound, cancelled jobs, errors and closing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from mtkit.serve.batcher import Batcher, BatcherClosed, Job, QueueFull, take_step

TIMEOUT = 10  # seconds a future may take here before the test fails (never reached)


class RecordingDecode:
    """Uppercases lines, recording each step's (settings, lines); `hold` keeps the first
    step running until released, so that later jobs are waiting together meanwhile."""

    def __init__(self, hold: bool = False):
        self.steps: list[tuple[object, list[str]]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self, settings: object, lines: list[str]) -> list[str]:
        self.steps.append((settings, list(lines)))
        self.started.set()
        assert self.release.wait(TIMEOUT)
        return [f"{settings}:{line.upper()}" for line in lines]


def batcher(decode, window: float = 0.0, max_tokens: int = 1000, max_queue: int = 100
            ) -> tuple[Batcher, threading.Thread]:
    """A batcher and the thread in its run(), as the server's model thread would be."""
    b = Batcher(decode, window=window, max_tokens=max_tokens, max_queue_lines=max_queue)
    worker = threading.Thread(target=b.run, daemon=True)
    worker.start()
    return b, worker


def finish(b: Batcher, worker: threading.Thread) -> None:
    b.close()
    worker.join(TIMEOUT)
    assert not worker.is_alive(), "run() did not return after close()"


def job(settings: object, lines: int, length: int = 1) -> Job:
    return Job(settings, ["x"] * lines, [length] * lines, 0.0)


def test_waiting_jobs_share_one_step_and_get_their_own_results_back():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode)
    first = b.submit("s", ["a"], [2])
    assert decode.started.wait(TIMEOUT)  # the first step runs (held) with "a" alone
    futures = [b.submit("s", [f"{i}a", f"{i}b"], [2, 2]) for i in range(5)]
    decode.release.set()
    assert first.result(TIMEOUT) == ["s:A"]
    for i, future in enumerate(futures):
        assert future.result(TIMEOUT) == [f"s:{i}A", f"s:{i}B"]
    assert [len(lines) for _, lines in decode.steps] == [1, 10]  # the five jobs: one step
    finish(b, worker)


def test_the_collection_window_lets_jobs_arriving_together_share_a_step():
    decode = RecordingDecode()
    b, worker = batcher(decode, window=1.0)
    futures = [b.submit("s", [str(i)], [2]) for i in range(4)]  # well within a second
    assert [f.result(TIMEOUT) for f in futures] == [[f"s:{i}"] for i in range(4)]
    assert [lines for _, lines in decode.steps] == [["0", "1", "2", "3"]]
    finish(b, worker)


def test_the_window_is_a_quiet_period_with_an_upper_bound():
    """Jobs 20 ms apart, with a 100 ms window, share a step; jobs that never stop coming
    still get a step within MAX_WINDOWS windows of the first."""
    decode = RecordingDecode()
    b, worker = batcher(decode, window=0.1)
    spaced = []
    for i in range(5):
        spaced.append(b.submit("s", [str(i)], [1]))
        threading.Event().wait(0.02)
    for future in spaced:
        future.result(TIMEOUT)
    assert [lines for _, lines in decode.steps] == [["0", "1", "2", "3", "4"]]
    finish(b, worker)

    decode = RecordingDecode()
    b, worker = batcher(decode, window=0.02)  # at most 10 x 20 ms = 0.2 s
    start = time.monotonic()
    steady = []
    while time.monotonic() - start < 0.6:
        steady.append(b.submit("s", ["x"], [1]))
        threading.Event().wait(0.005)
    for future in steady:
        future.result(TIMEOUT)
    assert len(decode.steps) >= 2, "a steady stream must not hold the first step back"
    finish(b, worker)


def test_after_a_step_the_window_waits_for_the_clients_it_answered():
    """A job that waited through a long step does not leave at once, alone: the window
    runs from the step's end too, and the client just answered comes back within it."""
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode, window=0.3)
    first = b.submit("s", ["a"], [1])
    assert decode.started.wait(TIMEOUT)
    waited = b.submit("s", ["b"], [1])
    threading.Event().wait(0.4)  # the step outlasts the window of `waited`
    decode.release.set()
    first.result(TIMEOUT)
    back = b.submit("s", ["c"], [1])  # the answered client's next request
    assert waited.result(TIMEOUT) == ["s:B"] and back.result(TIMEOUT) == ["s:C"]
    assert [lines for _, lines in decode.steps] == [["a"], ["b", "c"]]
    finish(b, worker)


def test_once_the_clients_it_answered_are_back_the_next_step_starts_at_once():
    """A step answered clients 1 and 2: once both have sent their next request the next
    step does not wait out the (here long) quiet window; while one is missing, or when a
    client is unknown, it does."""
    decode = RecordingDecode()
    b, worker = batcher(decode, window=0.5)
    start = time.monotonic()
    first = [b.submit("s", [line], [1], client) for line, client in (("a", 1), ("b", 2))]
    assert [f.result(TIMEOUT) for f in first] == [["s:A"], ["s:B"]]
    assert time.monotonic() - start >= 0.49  # a first step waits out its window
    start = time.monotonic()
    back = [b.submit("s", [line], [1], client) for line, client in (("c", 2), ("d", 1))]
    assert [f.result(TIMEOUT) for f in back] == [["s:C"], ["s:D"]]
    assert time.monotonic() - start < 0.25, "the step waited for a window"
    for clients in ([1, 3], [None, None]):  # 2 not back; clients unknown
        start = time.monotonic()
        for client in clients:
            b.submit("s", ["e"], [1], client).result(TIMEOUT)
            assert time.monotonic() - start >= 0.49
            start = time.monotonic()
    assert [len(lines) for _, lines in decode.steps] == [2, 2, 1, 1, 1, 1]
    finish(b, worker)


def test_jobs_with_other_settings_wait_for_their_own_step():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode)
    b.submit("held", ["h"], [1])
    assert decode.started.wait(TIMEOUT)
    beam2 = [b.submit("beam2", [f"b{i}"], [1]) for i in range(3)]
    beam4 = [b.submit("beam4", [f"c{i}"], [1]) for i in range(2)]
    beam2.append(b.submit("beam2", ["b3"], [1]))  # behind the beam4 jobs, still with beam2
    decode.release.set()
    assert [f.result(TIMEOUT) for f in beam2] == [[f"beam2:B{i}"] for i in range(4)]
    assert [f.result(TIMEOUT) for f in beam4] == [["beam4:C0"], ["beam4:C1"]]
    assert decode.steps[1:] == [("beam2", ["b0", "b1", "b2", "b3"]), ("beam4", ["c0", "c1"])]
    finish(b, worker)


def test_a_step_is_one_padded_batch_of_max_tokens():
    waiting = [job("s", 2, 10), job("s", 1, 30), job("s", 1, 5), job("t", 9, 1)]
    # 2 lines x 10 = 20; + 1 line of 30: 3 x 30 = 90 <= 100; + 1 more: 4 x 30 = 120 > 100
    assert take_step(waiting, 100) == waiting[:2]
    # the later, smaller job does not overtake the one that did not fit
    big, small1, small2 = job("s", 1, 60), job("s", 1, 60), job("s", 1, 1)
    assert take_step([big, small1, small2], 100) == [big]
    # a job over the budget on its own still goes, alone
    huge = job("s", 50, 50)
    assert take_step([huge, job("s", 1, 1)], 100) == [huge]
    assert take_step([], 100) == []


def test_over_the_budget_jobs_go_to_the_next_step():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode, max_tokens=8)
    b.submit("s", ["first"], [1])
    assert decode.started.wait(TIMEOUT)
    futures = [b.submit("s", [str(i)], [2]) for i in range(6)]  # 4 lines x 2 tokens = 8
    decode.release.set()
    for future in futures:
        future.result(TIMEOUT)
    assert [len(lines) for _, lines in decode.steps] == [1, 4, 2]
    finish(b, worker)


def test_no_window_and_a_budget_of_one_token_decode_one_job_per_step():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode, window=0.0, max_tokens=1)
    b.submit("s", ["first"], [1])
    assert decode.started.wait(TIMEOUT)
    futures = [b.submit("s", [str(i)], [3]) for i in range(3)]
    decode.release.set()
    for future in futures:
        future.result(TIMEOUT)
    assert [lines for _, lines in decode.steps] == [["first"], ["0"], ["1"], ["2"]]
    finish(b, worker)


def test_a_full_queue_refuses_and_counts_only_waiting_lines():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode, max_queue=5)
    running = b.submit("s", ["a", "b", "c"], [1, 1, 1])
    assert decode.started.wait(TIMEOUT)  # taken by the worker: no longer waiting
    assert b.queued_lines == 0
    waiting = b.submit("s", ["d", "e", "f", "g"], [1] * 4)
    assert b.queued_lines == 4
    with pytest.raises(QueueFull, match="4 lines are waiting, the queue holds 5"):
        b.submit("s", ["h", "i"], [1, 1])
    b.submit("s", ["h"], [1])  # exactly full is fine
    decode.release.set()
    assert running.result(TIMEOUT) == ["s:A", "s:B", "s:C"]
    assert waiting.result(TIMEOUT) == ["s:D", "s:E", "s:F", "s:G"]
    finish(b, worker)
    assert b.queued_lines == 0


def test_a_cancelled_job_leaves_the_queue_and_is_never_decoded():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode)
    b.submit("s", ["a"], [1])
    assert decode.started.wait(TIMEOUT)
    gone = b.submit("s", ["gone", "gone too"], [1, 1])
    kept = b.submit("s", ["kept"], [1])
    assert b.queued_lines == 3
    assert gone.cancel()
    assert b.queued_lines == 1  # at once, not when the worker gets to it
    decode.release.set()
    assert kept.result(TIMEOUT) == ["s:KEPT"]
    with pytest.raises(CancelledError):
        gone.result(TIMEOUT)
    assert all("gone" not in lines for _, lines in decode.steps)
    finish(b, worker)


def test_a_failing_step_fails_its_jobs_and_the_worker_goes_on():
    calls = []

    def decode(settings: object, lines: list[str]) -> list[str]:
        calls.append(lines)
        if "boom" in lines:
            raise RuntimeError("the model fell over")
        return lines

    b, worker = batcher(decode)
    with pytest.raises(RuntimeError, match="fell over"):
        b.submit("s", ["boom"], [1]).result(TIMEOUT)
    assert b.submit("s", ["fine"], [1]).result(TIMEOUT) == ["fine"]
    finish(b, worker)


def test_a_decode_that_loses_lines_is_an_error_not_a_misrouting():
    b, worker = batcher(lambda settings, lines: lines[:-1])
    with pytest.raises(RuntimeError, match="gave 1 results for 2 lines"):
        b.submit("s", ["a", "b"], [1, 1]).result(TIMEOUT)
    finish(b, worker)


def test_close_finishes_waiting_jobs_then_refuses_new_ones():
    decode = RecordingDecode(hold=True)
    b, worker = batcher(decode, window=60.0)  # closing does not wait for the window either
    first = b.submit("s", ["a"], [1])
    later = b.submit("t", ["b"], [1])
    b.close()
    with pytest.raises(BatcherClosed):
        b.submit("s", ["c"], [1])
    decode.release.set()
    finish(b, worker)  # run() returned, with both jobs done
    assert first.result(0) == ["s:A"] and later.result(0) == ["t:B"]


def test_free_workers_share_the_waiting_lines_and_decode_side_by_side():
    """Two threads in run(): jobs waiting when both are free are split between them, and
    the two steps run at the same time (each decode waits for the other at a barrier;
    had one worker taken every job, the barrier would break and the jobs fail)."""
    side_by_side = threading.Barrier(2, timeout=TIMEOUT)
    steps: list[list[str]] = []

    def decode(settings: object, lines: list[str]) -> list[str]:
        steps.append(list(lines))
        side_by_side.wait()
        return [line.upper() for line in lines]

    b = Batcher(decode, window=0.2, max_tokens=1000, max_queue_lines=100)
    workers = [threading.Thread(target=b.run, daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    futures = [b.submit("s", [str(i), f"{i}b"], [1, 1]) for i in range(4)]  # within 0.2 s
    assert [f.result(TIMEOUT) for f in futures] == [[str(i), f"{i}B"] for i in range(4)]
    assert sorted(steps) == [["0", "0b", "1", "1b"], ["2", "2b", "3", "3b"]]
    b.close()
    for worker in workers:
        worker.join(TIMEOUT)
        assert not worker.is_alive()


def test_a_worker_takes_an_equal_part_of_all_the_lines_in_the_service():
    """One worker decodes 4 lines (held); 4 more wait, in two jobs: the free worker's part
    is (4 + 4) / 2 = 4 lines, so it merges both jobs into one step. With 6 waiting its
    part is 5 (10 / 2): two whole jobs, the last one left for the next worker free."""
    release = threading.Event()
    steps: list[list[str]] = []

    def decode(settings: object, lines: list[str]) -> list[str]:
        steps.append(list(lines))
        if lines[0] == "held":
            assert release.wait(TIMEOUT)
        return lines

    b = Batcher(decode, window=0.05, max_tokens=1000, max_queue_lines=100)
    workers = [threading.Thread(target=b.run, daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    held = b.submit("s", ["held", "h", "h", "h"], [1] * 4)
    wait_for(lambda: steps == [["held", "h", "h", "h"]])
    first = [b.submit("s", [f"{i}a", f"{i}b"], [1, 1]) for i in range(2)]
    wait_for(lambda: len(steps) == 2)
    assert steps[1] == ["0a", "0b", "1a", "1b"]
    for future in first:
        future.result(TIMEOUT)
    later = [b.submit("s", [f"{i}a", f"{i}b"], [1, 1]) for i in range(2, 5)]  # 6 lines
    wait_for(lambda: len(steps) == 3)
    assert steps[2] == ["2a", "2b", "3a", "3b"]  # ceil((4 + 6) / 2) = 5: two whole jobs
    release.set()
    assert held.result(TIMEOUT) == ["held", "h", "h", "h"]
    assert later[2].result(TIMEOUT) == ["4a", "4b"]
    assert steps[3] == ["4a", "4b"]
    b.close()
    for worker in workers:
        worker.join(TIMEOUT)
        assert not worker.is_alive()


def wait_for(condition) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_step_stops_at_its_share_of_lines_but_takes_at_least_one_job():
    """A worker's share (max_lines) bounds its step by whole jobs, like max_tokens."""
    waiting = [job("s", 3), job("s", 3), job("s", 3)]
    assert take_step(waiting, max_tokens=1000) == waiting
    assert take_step(waiting, max_tokens=1000, max_lines=5) == waiting[:1]
    assert take_step(waiting, max_tokens=1000, max_lines=6) == waiting[:2]
    assert take_step(waiting, max_tokens=1000, max_lines=1) == waiting[:1]  # at least one


def test_submit_needs_one_length_per_line():
    b, worker = batcher(RecordingDecode())
    with pytest.raises(ValueError):
        b.submit("s", ["a", "b"], [1])
    finish(b, worker)
