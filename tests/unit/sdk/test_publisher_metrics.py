"""The publisher's series in prometheus_client's multiprocess mode: written by one process, read by another.

This is how a Governor scheduler's publisher, in vLLM's engine-core process, reaches the front end's
``/metrics``: the engine core writes the directory's files, the front end's ``MultiProcessCollector``
reads them. prometheus_client chooses the mode when it is imported, so the writer is a child process
started with ``PROMETHEUS_MULTIPROC_DIR`` set, as vLLM's engine core inherits it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry, multiprocess

from services.sdk.publisher_metrics import multiprocess_mode

ROOT = Path(__file__).resolve().parents[3]

# The engine core's side: a publisher whose stats grow, refreshed twice (as two heartbeats would).
WRITER = textwrap.dedent(
    """
    from services.sdk.publisher import PublisherStats
    from services.sdk.publisher_metrics import PublisherCounters, multiprocess_mode

    class Publisher:
        stats_seen = [PublisherStats(published=5, delivered=3, dropped=0, queued=2),
                      PublisherStats(published=9, delivered=8, dropped=1, queued=0)]

        def stats(self):
            return self.stats_seen.pop(0)

    assert multiprocess_mode()
    counters = PublisherCounters(Publisher(), deployment="dep", engine="eng-0")
    counters.refresh()
    counters.refresh()
    """
)


def _samples(directory: Path) -> dict[str, float]:
    """What a ``/metrics`` reading ``directory`` serves: sample name -> value, for the engine's labels."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    labels = {"deployment": "dep", "service": "engine", "engine": "eng-0"}
    return {
        sample.name: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.labels == labels
    }


class TestPublisherCounters:
    def test_this_process_is_not_in_multiprocess_mode(self) -> None:
        """The test process imported prometheus_client without the directory: collectors are served here."""
        assert not multiprocess_mode()

    def test_another_process_s_counters_reach_the_directory_s_reader(self, tmp_path: Path) -> None:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", WRITER], env=env, check=True, timeout=60)
        assert _samples(tmp_path) == {
            "governor_publisher_events_published_total": 9.0,
            "governor_publisher_events_delivered_total": 8.0,
            "governor_publisher_events_dropped_total": 1.0,
            "governor_publisher_queue_depth": 0.0,
        }
