"""The engine SDK: what an engine or router imports to talk to Governor."""

from services.sdk.protocol import ListSink, PolicySource, StaticPolicySource, TelemetrySink

__all__ = ["ListSink", "PolicySource", "StaticPolicySource", "TelemetrySink"]
