"""KEDA's external scaler proto (vendored, pinned tag in its header) and the Python stubs generated from it."""

__all__: list[str] = []
