"""Everything that does I/O: stream processors, policy services, store, SDK, simulator, CLI."""

__all__: list[str] = []
