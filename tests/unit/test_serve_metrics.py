"""/metrics of `mtkit serve` (mtkit/serve_metrics.py): what is counted, in Prometheus'
text format, read back by a parser of that format (tests/builders.py)."""

from __future__ import annotations

import threading

import pytest
from builders import prometheus_text as parse

from mtkit.serve.metrics import Histogram, ServeMetrics


def test_everything_counted_is_written_in_the_text_format():
    metrics = ServeMetrics()
    metrics.count_request("/translate", 200, 0.003)
    metrics.count_request("/translate", 200, 0.2)
    metrics.count_request("/translate", 503, 0.001)
    metrics.count_request("/health", 200, None)
    metrics.count_translated(lines=5, truncated=1, source_tokens=40, target_tokens=33)
    for lines in (1, 3, 64):
        metrics.count_batch(lines)
    types, values = parse(metrics.text(queue_lines=7))
    assert types == {
        "mtkit_serve_requests_total": "counter",
        "mtkit_serve_request_duration_seconds": "histogram",
        "mtkit_serve_lines_total": "counter",
        "mtkit_serve_truncated_lines_total": "counter",
        "mtkit_serve_source_tokens_total": "counter",
        "mtkit_serve_target_tokens_total": "counter",
        "mtkit_serve_queue_lines": "gauge",
        "mtkit_serve_batch_lines": "histogram",
    }
    requests = "mtkit_serve_requests_total"
    assert values[(requests, (("endpoint", "/translate"), ("status", "200")))] == 2
    assert values[(requests, (("endpoint", "/translate"), ("status", "503")))] == 1
    assert values[(requests, (("endpoint", "/health"), ("status", "200")))] == 1
    latency = "mtkit_serve_request_duration_seconds"
    translate = (("endpoint", "/translate"),)
    assert values[(f"{latency}_count", translate)] == 3
    assert values[(f"{latency}_sum", translate)] == pytest.approx(0.204)
    bucket = f"{latency}_bucket"
    assert values[(bucket, (("endpoint", "/translate"), ("le", "0.005")))] == 2
    assert values[(bucket, (("endpoint", "/translate"), ("le", "0.1")))] == 2
    assert values[(bucket, (("endpoint", "/translate"), ("le", "0.25")))] == 3
    assert values[(bucket, (("endpoint", "/translate"), ("le", "+Inf")))] == 3
    assert not any(key[0] == bucket and ("endpoint", "/health") in key[1] for key in values)
    assert values[("mtkit_serve_lines_total", ())] == 5
    assert values[("mtkit_serve_truncated_lines_total", ())] == 1
    assert values[("mtkit_serve_source_tokens_total", ())] == 40
    assert values[("mtkit_serve_target_tokens_total", ())] == 33
    assert values[("mtkit_serve_queue_lines", ())] == 7
    assert values[("mtkit_serve_batch_lines_count", ())] == 3
    assert values[("mtkit_serve_batch_lines_sum", ())] == 68
    assert values[("mtkit_serve_batch_lines_bucket", (("le", "1"),))] == 1
    assert values[("mtkit_serve_batch_lines_bucket", (("le", "4"),))] == 2
    assert values[("mtkit_serve_batch_lines_bucket", (("le", "32"),))] == 2
    assert values[("mtkit_serve_batch_lines_bucket", (("le", "64"),))] == 3


def test_histogram_buckets_are_cumulative_and_end_at_inf():
    histogram = Histogram((1.0, 2.5))
    for value in (0.5, 1.0, 2.0, 3.0, 100.0):  # a bound holds the values equal to it
        histogram.observe(value)
    assert histogram.series("h", {"k": "v"}) == [
        'h_bucket{k="v",le="1"} 2', 'h_bucket{k="v",le="2.5"} 3', 'h_bucket{k="v",le="+Inf"} 5',
        'h_sum{k="v"} 106.5', 'h_count{k="v"} 5']


def test_label_values_are_escaped():
    metrics = ServeMetrics()
    metrics.count_request('a"b\\c\nd', 200, None)
    text = metrics.text(0)
    assert 'endpoint="a\\"b\\\\c\\nd"' in text
    _, values = parse(text)
    assert values[("mtkit_serve_requests_total",
                   (("endpoint", 'a\\"b\\\\c\\nd'), ("status", "200")))] == 1


def test_an_idle_server_writes_every_family_with_zeros():
    types, values = parse(ServeMetrics().text(0))
    assert len(types) == 8
    assert values[("mtkit_serve_lines_total", ())] == 0
    assert values[("mtkit_serve_batch_lines_bucket", (("le", "+Inf"),))] == 0


def test_counting_from_several_threads_loses_nothing():
    metrics = ServeMetrics()

    def work() -> None:
        for _ in range(2000):
            metrics.count_batch(2)
            metrics.count_translated(1, 0, 1, 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _, values = parse(metrics.text(0))
    assert values[("mtkit_serve_batch_lines_count", ())] == 8000
    assert values[("mtkit_serve_lines_total", ())] == 8000
