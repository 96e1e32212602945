"""Stream processing: the live processor around the pure fold (fold/)."""

from services.stream.processor import StreamProcessor

__all__ = ["StreamProcessor"]
