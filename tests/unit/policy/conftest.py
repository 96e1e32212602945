"""The recorded demo stream, folded once for every wiring test: real summaries of every kind."""

from __future__ import annotations

import pytest

from services.replay.offline import OfflineControlPlane
from tests.fixtures import recorded_demo_plane


@pytest.fixture(scope="session")
def demo_plane(tmp_path_factory: pytest.TempPathFactory) -> OfflineControlPlane:
    """The demo fleet's 20 simulated seconds, recorded to a file, read back, folded and decided."""
    return recorded_demo_plane(tmp_path_factory.mktemp("demo") / "demo.jsonl")
