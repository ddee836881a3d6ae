"""KV blocks and recurrent state: the block allocator (pure Python), the paged KV pool and the
recurrent-state pool (tensors, one row per slot)."""
