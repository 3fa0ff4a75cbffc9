"""The compile cache shared by every runtime (see store.py)."""

from caten.cache.store import Cache, default_cache, default_dir, key_of

__all__ = ["Cache", "default_cache", "default_dir", "key_of"]
