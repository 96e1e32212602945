"""Governor's contracts: events, policy documents, topic and key names, errors."""

from schemas.errors import (
    BackendUnavailableError,
    ConfigError,
    GovernorError,
    InvalidInputError,
    LateEventError,
    StaleVersionError,
)

__all__ = [
    "BackendUnavailableError",
    "ConfigError",
    "GovernorError",
    "InvalidInputError",
    "LateEventError",
    "StaleVersionError",
]
