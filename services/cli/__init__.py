"""The ``governor`` command line: one module per command group."""

__all__: list[str] = []
