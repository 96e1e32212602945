"""The consumer-group shell the kafka-python services run in: one partition loop driving a service's work."""

from services.runtime.partition_loop import PartitionLoop, PartitionWork
from services.runtime.source import KafkaSource, RecordSource

__all__ = ["KafkaSource", "PartitionLoop", "PartitionWork", "RecordSource"]
