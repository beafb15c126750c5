"""Batching across requests: the lines of concurrent requests decoded together.

Each request becomes a `Job` (its lines, their source lengths, and the decode settings it
asked for), submitted from any thread. Each model thread (one, or several workers that
decode side by side) calls `run()`: it waits for work, lets a short collection window
pass (so that jobs arriving together share a batch), then takes a *step*: waiting jobs
with the oldest job's settings, oldest first, while their lines fit one padded batch of
`max_tokens` source tokens (always at least one job, however large). The step's lines go
to the decode function in one call and the results are routed back to each job's
future, in its own line order. Jobs with other settings wait for a later step, so a
batch never mixes decode settings. With several workers a step takes at most an equal
part of the lines in the service (`Batcher._share`), so that under load they decode
side by side.

The window is a quiet period: a step starts once no job has arrived for a window,
counted from the end of the previous step too, since the clients whose answers that step
just sent come back with their next request within milliseconds. Without that, under a
steady load the next step would start with only the jobs that waited during this one,
and the clients would split into two halves decoded in turn, each step half the batch it
could be. But once every client the step answered has sent its next request (a client
is its connection: keep-alive clients come back on the same one), the next step starts
at once: waiting out the quiet window then only adds to every line's latency while the
model idles. `window=0, max_tokens=1` gives one job per step: the unbatched reference of
bench/serve_load.py.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

MAX_WINDOWS = 10  # the longest a step waits for more jobs, in collection windows
IDLE_WAKE_SECONDS = 0.5  # how often an idle model thread wakes (see _next_step)

# the decode function: (settings, lines) -> one result per line, in order; a line is
# whatever the caller submits (the server's: serve.lines.SourceLine), the batcher only counts
Decode = Callable[[Any, list[Any]], Sequence[Any]]


class QueueFull(Exception):
    """More lines are waiting than the queue holds: the request is refused, not queued."""


class BatcherClosed(Exception):
    """The service is shutting down: no new work is taken."""


@dataclass(eq=False)
class Job:
    settings: Hashable  # jobs are batched only with jobs of equal settings
    lines: list[Any]
    lengths: list[int]  # padded source tokens per line (0 for a line the model skips)
    arrived: float  # the batcher's clock when it was submitted
    client: Hashable = None  # who sent it (the server: its connection's address); None: unknown
    future: Future = field(default_factory=Future)

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)


def take_step(waiting: Sequence[Job], max_tokens: int, max_lines: float = math.inf
              ) -> list[Job]:
    """The jobs of the next step: those with the first job's settings, in order, while
    (lines so far) x (longest line so far) stays within max_tokens and the lines within
    max_lines; at least one job.

    That product is the padded size of the batch they make, so a step that fits is one
    engine batch: later jobs do not wait behind a queue-long decode. `max_lines` is a
    worker's part of the lines in the service (`Batcher._share`)."""
    if not waiting:
        return []
    first = waiting[0]
    step, lines, longest = [first], len(first.lines), first.longest
    for job in waiting[1:]:
        if job.settings != first.settings:
            continue
        grown_lines, grown_longest = lines + len(job.lines), max(longest, job.longest)
        if grown_lines * grown_longest > max_tokens or grown_lines > max_lines:
            break  # FIFO: a later, smaller job does not overtake this one
        step.append(job)
        lines, longest = grown_lines, grown_longest
    return step


def fits_one_batch(jobs: Sequence[Job], max_tokens: int) -> bool:
    """True when the jobs with the first one's settings already fill a batch (the
    collection window need not run out then)."""
    if not jobs:
        return False
    same = [job for job in jobs if job.settings == jobs[0].settings]
    lines = sum(len(job.lines) for job in same)
    longest = max(job.longest for job in same)
    return lines * max(longest, 1) >= max_tokens


class Batcher:
    """Jobs in from any thread (`submit`), decoded in steps by the threads in `run()`: a
    step is taken under the lock, so each job goes to exactly one of them."""

    def __init__(self, decode: Decode, *, window: float, max_tokens: int,
                 max_queue_lines: int, clock: Callable[[], float] = time.monotonic):
        self._decode = decode
        self.window = window  # seconds
        self.max_tokens = max_tokens
        self.max_queue_lines = max_queue_lines
        self._clock = clock
        self._waiting: list[Job] = []
        self._queued_lines = 0
        self._free_since = -float("inf")  # when the last step ended
        # the clients answered by the steps that ended since one was last taken; None
        # once one of them was unknown (then only the window starts the next step)
        self._answered: set[Hashable] | None = set()
        self._workers = 0  # threads in run()
        self._decoding_lines = 0  # lines of the steps being decoded now
        self._closed = False
        self._changed = threading.Condition()

    @property
    def queued_lines(self) -> int:
        """Lines submitted and not yet taken into a step."""
        with self._changed:
            return self._queued_lines

    def submit(self, settings: Hashable, lines: list[Any], lengths: list[int],
               client: Hashable = None) -> Future:
        """Queue one request's lines; the future gets one result per line, in order.
        `client`: who sent them, if known (see `_due`). QueueFull when the lines do not
        fit, BatcherClosed after close()."""
        if len(lines) != len(lengths):
            raise ValueError("one length per line")
        job = Job(settings, list(lines), list(lengths), self._clock(), client)
        job.future.add_done_callback(self._forget_if_cancelled)
        with self._changed:
            if self._closed:
                raise BatcherClosed("the service is shutting down")
            if self._queued_lines + len(lines) > self.max_queue_lines:
                raise QueueFull(f"{self._queued_lines} lines are waiting, the queue holds "
                                f"{self.max_queue_lines}")
            self._waiting.append(job)
            self._queued_lines += len(lines)
            self._changed.notify_all()
        return job.future

    def close(self) -> None:
        """Take no new jobs; `run()` returns once the waiting ones are decoded."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def run(self) -> None:
        """Decode steps until closed and drained (in each model thread)."""
        with self._changed:
            self._workers += 1
        try:
            while (step := self._next_step()) is not None:
                # a job cancelled between submit and now is dropped; the rest cannot be
                # cancelled any more, so their results always have a future to go to
                live = [job for job in step if job.future.set_running_or_notify_cancel()]
                if live:
                    self._decode_step(live)
                with self._changed:
                    self._decoding_lines -= sum(len(job.lines) for job in step)
                    if live:
                        self._free_since = self._clock()
                        clients = {job.client for job in live}
                        known = self._answered is not None and None not in clients
                        self._answered = self._answered | clients if known else None
        finally:
            with self._changed:
                self._workers -= 1

    # ------------------------------------------------------------------- the worker

    def _forget_if_cancelled(self, future: Future) -> None:
        """A job cancelled while waiting (its client went away) leaves the queue at once."""
        if not future.cancelled():
            return
        with self._changed:
            for job in self._waiting:
                if job.future is future:
                    self._waiting.remove(job)
                    self._queued_lines -= len(job.lines)
                    return

    def _due(self) -> float:
        """When the next step starts: once no job has arrived for a window, counted from
        the end of the last step too; but no later than MAX_WINDOWS windows after the
        oldest job (or that end), however steadily jobs keep coming; and at once when
        every client the last steps answered has a job waiting again."""
        start = max(self._waiting[0].arrived, self._free_since)
        quiet = max(self._waiting[-1].arrived, self._free_since)
        if self._answered and self._answered <= {job.client for job in self._waiting}:
            return quiet
        return min(quiet + self.window, start + MAX_WINDOWS * self.window)

    def _next_step(self) -> list[Job] | None:
        """Block until a step is due; None once closed and drained."""
        with self._changed:
            while True:
                if not self._waiting:
                    if self._closed:
                        return None
                    # Timed: in the main thread, a signal that the OS delivers to another
                    # thread does not interrupt this wait, and Python runs its handler
                    # (SIGTERM: stop serving) only when this thread runs again.
                    self._changed.wait(IDLE_WAKE_SECONDS)
                    continue
                due = self._due()
                now = self._clock()
                if now < due and not self._closed and not fits_one_batch(self._waiting,
                                                                         self.max_tokens):
                    self._changed.wait(due - now)
                    continue
                step = take_step(self._waiting, self.max_tokens, self._share())
                self._answered = set()
                for job in step:
                    self._waiting.remove(job)
                    self._queued_lines -= len(job.lines)
                    self._decoding_lines += len(job.lines)
                if self._waiting:
                    self._changed.notify_all()  # a free worker may take the rest now
                return step

    def _share(self) -> int:
        """The most lines one step may take: an equal part, per worker, of all the lines
        in the service (waiting or being decoded). So under a steady load of N clients W
        workers settle into W batches of N/W lines, decoding side by side: a worker does
        not take the whole queue while another idles, and fragments left behind by short
        windows are merged again by the next worker to come free."""
        return math.ceil((self._queued_lines + self._decoding_lines) / max(self._workers, 1))

    def _decode_step(self, jobs: list[Job]) -> None:
        lines = [line for job in jobs for line in job.lines]
        try:
            results = list(self._decode(jobs[0].settings, lines))
            if len(results) != len(lines):
                raise RuntimeError(f"decode gave {len(results)} results for {len(lines)} lines")
        except Exception as exc:  # noqa: BLE001 - every waiting request gets the error
            for job in jobs:
                job.future.set_exception(exc)
            return
        start = 0
        for job in jobs:
            job.future.set_result(results[start : start + len(job.lines)])
            start += len(job.lines)
