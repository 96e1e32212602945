"""Where estimates, offsets and policies live: Redis in production, memory in tests and replay."""

from services.store.memory_store import MemoryStore
from services.store.protocol import Store
from services.store.redis_store import RedisStore

__all__ = ["MemoryStore", "RedisStore", "Store"]
