"""Paged KV cache: block pool (reference counts, hash map, LRU of cached free blocks) and the
manager (block tables, prefix caching, copy-on-write)."""

from .block_pool import BlockPool, KVBlock, PoolInvariantError, hash_block_tokens
from .manager import KVCacheManager

__all__ = ["BlockPool", "KVBlock", "KVCacheManager", "PoolInvariantError", "hash_block_tokens"]
