"""The embedded local stack: a Tansu Kafka-protocol broker and a Redis (or an embedded Valkey)."""

from services.stack.launcher import StackState, stack_down, stack_status, stack_up

__all__ = ["StackState", "stack_down", "stack_status", "stack_up"]
