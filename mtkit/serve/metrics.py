"""What `mtkit serve` has done, counted, and written in Prometheus' text format at /metrics.

The text format (version 0.0.4) is small: `# HELP` and `# TYPE` lines, then one
`name{label="value"} number` line per series; a histogram is cumulative `_bucket` series
ending at le="+Inf", plus `_sum` and `_count`. Updated from the event loop and from the
model's thread (batch sizes), hence one lock.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class Histogram:
    bounds: tuple[float, ...]  # upper bounds, ascending; +Inf is implied
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; +Inf last
    total: float = 0.0
    observations: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound),
                     len(self.bounds))
        self.counts[index] += 1
        self.total += value
        self.observations += 1

    def series(self, name: str, labels: dict[str, str]) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip((*self.bounds, math.inf), self.counts):
            cumulative += count
            out.append(f"{name}_bucket{_labels({**labels, 'le': _number(bound)})} {cumulative}")
        out.append(f"{name}_sum{_labels(labels)} {_number(self.total)}")
        out.append(f"{name}_count{_labels(labels)} {self.observations}")
        return out


class ServeMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()  # (endpoint, status) -> requests
        self.latency: dict[str, Histogram] = {}  # translation endpoint -> seconds
        self.lines = 0
        self.truncated = 0
        self.source_tokens = 0
        self.target_tokens = 0
        self.batch_lines = Histogram(BATCH_BUCKETS)

    def count_request(self, endpoint: str, status: int, seconds: float | None) -> None:
        """One answered request; `seconds` for the translation endpoints' latency."""
        with self._lock:
            self.requests[(endpoint, status)] += 1
            if seconds is not None:
                self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def count_translated(self, lines: int, truncated: int, source_tokens: int,
                         target_tokens: int) -> None:
        with self._lock:
            self.lines += lines
            self.truncated += truncated
            self.source_tokens += source_tokens
            self.target_tokens += target_tokens

    def count_batch(self, lines: int) -> None:
        """One batch the engine decoded (called from the model's thread)."""
        with self._lock:
            self.batch_lines.observe(lines)

    def text(self, queue_lines: int) -> str:
        with self._lock:
            blocks = [
                _block("mtkit_serve_requests_total", "counter",
                       "HTTP requests answered, by endpoint and status (499: the client went "
                       "away first).",
                       [f"mtkit_serve_requests_total"
                        f"{_labels({'endpoint': e, 'status': str(s)})} {n}"
                        for (e, s), n in sorted(self.requests.items())]),
                _block("mtkit_serve_request_duration_seconds", "histogram",
                       "Latency of translation requests, from arrival to answer.",
                       [line for endpoint, h in sorted(self.latency.items())
                        for line in h.series("mtkit_serve_request_duration_seconds",
                                             {"endpoint": endpoint})]),
                _scalar("mtkit_serve_lines_total", "counter", "Lines translated.", self.lines),
                _scalar("mtkit_serve_truncated_lines_total", "counter",
                        "Lines longer than the model takes, truncated before decoding.",
                        self.truncated),
                _scalar("mtkit_serve_source_tokens_total", "counter",
                        "Source tokens decoded (after truncation, EOS included).",
                        self.source_tokens),
                _scalar("mtkit_serve_target_tokens_total", "counter",
                        "Target tokens produced (best hypotheses, EOS excluded).",
                        self.target_tokens),
                _scalar("mtkit_serve_queue_lines", "gauge",
                        "Lines waiting for the model.", queue_lines),
                _block("mtkit_serve_batch_lines", "histogram",
                       "Lines per batch the engine decoded.",
                       self.batch_lines.series("mtkit_serve_batch_lines", {})),
            ]
        return "".join(blocks)


def _block(name: str, kind: str, help_text: str, series: list[str]) -> str:
    return "".join(line + "\n" for line in (f"# HELP {name} {help_text}",
                                            f"# TYPE {name} {kind}", *series))


def _scalar(name: str, kind: str, help_text: str, value: float) -> str:
    return _block(name, kind, help_text, [f"{name} {_number(value)}"])


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    escaped = (f'{key}="{_escape(value)}"' for key, value in labels.items())
    return "{" + ",".join(escaped) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(float(value))
    return repr(float(value))
