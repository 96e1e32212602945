"""Pure, incremental, serialisable and mergeable estimators (no I/O, no clock)."""

__all__: list[str] = []
