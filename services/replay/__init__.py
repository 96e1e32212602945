"""Record and replay: topics to files, files back to Kafka, and the offline in-process control loop."""

from services.replay.offline import OfflineControlPlane

__all__ = ["OfflineControlPlane"]
