"""The runner's half of KV beyond VRAM (--kv-resident-tokens): the host tier's tensors and each slot's
host block list, kept in step with the plans (the scheduler decides, kv_offload.py; this copies).

A slot's block table in the runner keeps one column per block of its context; a column whose block
moved to the host tier holds -1 (a path that forgot the host tier fails loudly instead of reading a
device block that another sequence now owns), and `tables[slot]` lists the host blocks, in order.
"""

from __future__ import annotations

from strata.cache.host_kv import HostKVPool
from strata.cache.pools import KVPool
from strata.types import NewSlotData, ScheduledSlot, StepPlan

MOVED = -1  # a block-table column whose block is in the host tier


class HostKVTiers:
    def __init__(self, kv_pool: KVPool, num_host_blocks: int) -> None:
        self.pool = HostKVPool(kv_pool, num_host_blocks)
        self.tables: dict[int, list[int]] = {}

    @property
    def caches(self) -> dict:
        return self.pool.caches

    def copy(self, plan: StepPlan, park_kv: dict | None) -> None:
        """The plan's copies into the host tier: after its parks (an offloaded block may be evicted in the
        same plan), before its restores and its forward (either may overwrite an offloaded device block)."""
        self.pool.offload(plan.offload_blocks)
        if plan.unpark_blocks:
            self.pool.unpark(park_kv, plan.unpark_blocks)

    def add_slot(self, new: NewSlotData, block_tables: dict[int, list[int]]) -> None:
        self.tables[new.slot_id] = list(new.host_block_ids)
        block_tables[new.slot_id] = [MOVED] * len(new.host_block_ids) + list(new.cached_block_ids)

    def remove_slot(self, slot_id: int) -> None:
        self.tables.pop(slot_id, None)

    def offloaded(self, work: ScheduledSlot, block_tables: dict[int, list[int]]) -> None:
        """The slot's next oldest device blocks went to `work.offloaded_host_ids`."""
        if not work.offloaded_host_ids:
            return
        host, table = self.tables.setdefault(work.slot_id, []), block_tables[work.slot_id]
        first = len(host)
        table[first:first + len(work.offloaded_host_ids)] = [MOVED] * len(work.offloaded_host_ids)
        host.extend(work.offloaded_host_ids)

    def settle(self) -> None:
        """Wait for the offload copies in flight (before the host reads the tier: cache/host_kv.py)."""
        self.pool.settle()

    def has_host_blocks(self, scheduled: list[ScheduledSlot]) -> bool:
        """Whether some slot of the step reads host blocks."""
        return any(self.tables.get(w.slot_id) for w in scheduled)
