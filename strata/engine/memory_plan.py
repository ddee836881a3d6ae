"""The engine's memory plan: how many experts go on the device, how many KV blocks the pool holds, and
the host-RAM rows of the conversation cache, decided once at start from the configs and the budget.

It runs in two phases, because the second needs the loaded weights' real footprint: `expert_slots`
before the weights load (from a meta model's sizes), `cache_sizes` after. The bytes of one KV block
are computed here once and read by every decision. The device pools the runner allocates after the KV
pool (recurrent states, their checkpoints, the CUDA graph pool) are set aside in both phases (`pools`).
`table` is what the engine prints at start, `as_dict` what status and the monitor show.

With KV beyond VRAM (--kv-resident-tokens N) the device pool holds N tokens (+ the drafter's lookahead and
a block) per slot, and the host tier (--kv-host-mib) the rest: by default every slot at max_model_len, on
CUDA (pinned memory is resident at once) capped at DEFAULT_HOST_KV_BYTES and a DEFAULT_HOST_KV_SHARE of the
RAM available at start, never under one sequence; a max_model_len that the two cannot hold for one
sequence is an error with the numbers.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import torch

from strata.cache.block_allocator import blocks_needed
from strata.cache.pools import KVPool
from strata.config import EngineConfig, ModelConfig, SpecConfig, kv_cache_torch_dtype
from strata.experts.placement import staging_capacity
from strata.runner.cuda_graphs import HEAD_GRAPH_MAX_ROWS
from strata.runner.memory import GiB, GpuBudget, ModelDoesNotFit, WeightSizes, activation_headroom, \
    auto_expert_slots, check_host_fits, check_weights_fit, host_available_bytes, kv_reserve_tokens, measure_budget, \
    weight_sizes

logger = logging.getLogger(__name__)

CPU_KV_BUDGET_BYTES = 1 << 30
CONVERSATION_CACHE_MIB_CUDA = 4096  # --conversation-cache-mib default on CUDA (0 on the CPU)
# Without --max-model-len on CUDA, the auto expert cache reserves KV for contexts of this length (not the
# model's maximum, 262K tokens on Qwen3-Next: ~1,000 expert slots of a 24 GB card), and max_model_len then
# becomes what the KV pool holds, up to the model's maximum, at least MIN_DEFAULT_CONTEXT.
DEFAULT_CONTEXT_RESERVE = 32768
# device memory in use after the weights load beyond their bytes (measured ~0.33 GiB on the H200 with
# random:qwen3-next-80b-a3b?num_hidden_layers=8 offloaded under a 24 GiB limit): kept free by the auto
# expert cache so the KV reserve it promises is there
RUNTIME_GROWTH_BYTES = GiB // 2
MIN_DEFAULT_CONTEXT = 4096
# Without --kv-host-mib on CUDA the host KV tier takes at most this much pinned RAM and this share of the RAM
# available at start (a 64 GB host keeps room for host experts, the conversation cache and the rest);
# the scheduler keeps a block on the device when the tier is full
DEFAULT_HOST_KV_BYTES = 16 * GiB
DEFAULT_HOST_KV_SHARE = 0.25


@dataclasses.dataclass(frozen=True)
class CacheSizes:
    num_kv_blocks: int
    num_checkpoints: int
    park_rows: tuple[int, int]      # host-RAM rows of the conversation cache: (KV blocks, checkpoints)
    max_model_len: int              # as given, or sized from the KV pool when not given (CUDA)
    num_host_kv_blocks: int = 0     # the host tier of KV beyond VRAM (--kv-resident-tokens)
    kv_staging: tuple[int, int] = (0, 0)  # --kv-staging-layers: (ring layers, blocks a layer's entry holds)


class MemoryPlan:
    def __init__(self, config: EngineConfig, model_config: ModelConfig, spec: SpecConfig, max_model_len: int,
                 device: str, dtype: torch.dtype, has_mtp: bool, recurrent_shapes: dict, stage=None) -> None:
        """`stage`: a pipeline stage's part (runner/pipeline.py): the plan is its card's, with its own layers'
        weights, KV and recurrent states only."""
        self.config, self.model_config, self.max_model_len = config, model_config, max_model_len
        owns = stage.owns if stage is not None else (lambda layer: True)
        self.owned_layers = range(stage.first_layer, stage.end_layer) if stage is not None else None
        recurrent_shapes = {layer: shape for layer, shape in recurrent_shapes.items() if owns(layer)}
        attention_layers = [layer for layer in model_config.full_attention_layers if owns(layer)]
        self.on_cuda = device.startswith("cuda")
        # no --max-model-len: the plan sizes it (cache_sizes) from what the KV pool gets (the GPU's budget, or
        # CPU_KV_BUDGET_BYTES), so a model whose maximum is 256K tokens still starts (not with KV beyond VRAM,
        # where host RAM holds the context and the device only each slot's window)
        self.sized_context = config.scheduler.max_model_len is None and not config.cache.kv_offload
        self.device, self.dtype, self.recurrent_shapes = device, dtype, recurrent_shapes
        cache, sched = config.cache, config.scheduler
        self.num_kv_layers = max(len(attention_layers) + int(has_mtp and owns(model_config.num_hidden_layers)), 1)
        self.block_bytes = KVPool.bytes_per_block(self.num_kv_layers,
                                                  cache.block_size, model_config.num_key_value_heads,
                                                  model_config.head_dim, kv_cache_torch_dtype(cache.kv_cache_dtype, dtype))
        if model_config.qsa:  # QSA's index keys ride in the same blocks (KVPool extra_keys)
            self.block_bytes += (len(attention_layers) * cache.block_size
                                 * model_config.indexer_head_dim * dtype.itemsize)
        window = 1 + (spec.num_speculative_tokens if spec.enabled else 0)
        # KV beyond VRAM: device blocks one slot holds at most (scheduler/kv_offload.py)
        self.resident_blocks = blocks_needed(cache.kv_resident_tokens + window - 1, cache.block_size) + 1 \
            if cache.kv_offload else None
        self.headroom = activation_headroom(model_config, sched.max_num_batched_tokens, sched.max_num_seqs, window,
                                            recurrent_shapes, dtype)
        self.state_row_bytes = sum(math.prod(conv) * dtype.itemsize + math.prod(ssm) * 4
                                   for conv, ssm in recurrent_shapes.values())
        self.pools = self._device_pools(window)
        self.auto_expert_slots: int | None = None
        self.numbers: dict = {"pools_bytes": dict(self.pools)}

    def _device_pools(self, window: int) -> dict[str, int]:
        """Bytes of what the runner allocates on the device beside the weights and the KV pool: the slots'
        recurrent states (one spare row takes graph padding), the prefix cache's checkpoints of them, and the
        CUDA graph pool (one pool shared by the graphs: the largest captured step's temporaries, estimated
        like the step headroom, whose fixed part it shares, and the logits their LM head graphs share)."""
        if not self.on_cuda:
            return {}
        cache, sched, runner = self.config.cache, self.config.scheduler, self.config.runner
        checkpoints = cache.checkpoint_pool_size if self.recurrent_shapes and cache.enable_prefix_caching else 0
        graphs = 0
        if runner.cuda_graphs:
            slots = min(runner.cuda_graph_max_slots, sched.max_num_seqs)
            tokens = max(slots * window, runner.cuda_graph_prompt_tokens)
            graphs = activation_headroom(self.model_config, tokens, slots, window, self.recurrent_shapes,
                                         self.dtype) - activation_headroom(self.model_config, 0, 0, 1, {}, self.dtype)
            # the decode and verify graphs' shared float32 logits (cuda_graphs.CudaGraphCache.head_rows)
            graphs += min(HEAD_GRAPH_MAX_ROWS, slots * window) * self.model_config.vocab_size * 4
        ring_layers, ring_blocks = self._kv_staging() if cache.kv_offload else (0, 0)
        return {"recurrent states": (sched.max_num_seqs + 1) * self.state_row_bytes,
                "state checkpoints": checkpoints * self.state_row_bytes, "CUDA graph pool (estimate)": graphs,
                f"KV staging ring ({ring_layers} layers x {ring_blocks} blocks)":
                    ring_layers * ring_blocks * self.block_bytes // self.num_kv_layers}

    @property
    def set_aside(self) -> int:
        """What every decision keeps free beside the weights and the KV pool: the step headroom and the pools."""
        return self.headroom + sum(self.pools.values())

    def _budget(self) -> GpuBudget:
        runner = self.config.runner
        return measure_budget(runner.gpu_memory_utilization, runner.vram_reserve_mib, runner.gpu_memory_limit_mib)

    # ---- before the weights load ------------------------------------------------------------------

    def expert_slots(self, meta: torch.nn.Module, sizes: WeightSizes | None = None):
        """The expert config to load with and where routed experts load to: (config, expert device);
        the device is "cpu" when only a hot set will be copied to the GPU. `sizes`: the weights' bytes as
        they load where the source knows them (GGUF blocks), else the meta model's parameters. Raises
        ModelDoesNotFit when not even the resident weights fit, or the offloaded experts not in host RAM."""
        experts = self.config.experts
        if not self.on_cuda:
            return experts, None
        sizes = sizes or weight_sizes(meta, self.dtype, self.owned_layers)
        resident = experts.num_slots(sizes.num_experts)
        if experts.is_auto and sizes.num_experts:
            resident = self.auto_expert_slots = self._auto_expert_slots(sizes)
            if resident < sizes.num_experts:
                experts = dataclasses.replace(experts, expert_cache=str(resident))
        runner = self.config.runner
        check_weights_fit(sizes.on_device(resident), self._budget(), runner.gpu_memory_utilization,
                          runner.vram_reserve_mib)
        self.numbers.update(weight_bytes=sizes.total, expert_bytes=sizes.experts, expert_slot_bytes=sizes.per_slot,
                            resident_experts=min(resident, sizes.num_experts), total_experts=sizes.num_experts)
        if resident < sizes.num_experts or sizes.host:
            check_host_fits(sizes.experts if resident < sizes.num_experts else 0, host_available_bytes(), sizes.host)
        return experts, ("cpu" if resident < sizes.num_experts else None)

    def _auto_expert_slots(self, sizes) -> int:
        """--expert-cache auto on CUDA: every expert when the model fits with a KV reserve for
        max_num_seqs sequences (up to KV_RESERVE_TOKENS_PER_SEQ tokens each; --kv-cache-mib where given), else
        what fits."""
        cfg, sched, experts = self.model_config, self.config.scheduler, self.config.experts
        context = min(self.max_model_len, DEFAULT_CONTEXT_RESERVE) if self.sized_context else self.max_model_len
        reserve_blocks = blocks_needed(kv_reserve_tokens(context, sched.max_num_seqs), self.config.cache.block_size)
        if self.resident_blocks is not None:
            reserve_blocks = self.resident_blocks * sched.max_num_seqs
        # + what the CUDA runtime takes after the weights (cuBLAS workspaces, Triton modules) and the
        # allocator's rounding: on the H200 the KV pool got 0.33 GiB less than this reserve without it
        kv_reserve = reserve_blocks * self.block_bytes + RUNTIME_GROWTH_BYTES
        if self.config.cache.kv_cache_mib is not None:  # the KV pool's size asked for: the rest may hold experts
            kv_reserve = self.config.cache.kv_cache_mib * 2**20 + RUNTIME_GROWTH_BYTES
        staging = 0 if experts.parse_pcie_frac() == 0 and not experts.prompt_stream_min_pairs \
            else staging_capacity(cfg.num_experts, cfg.num_experts_per_tok)
        slots = auto_expert_slots(sizes, self._budget().available, self.set_aside, kv_reserve, staging)
        if slots < sizes.num_experts:
            logger.warning("expert_cache=auto: %d of %d routed experts fit on the GPU (KV reserve %.1f GiB, "
                           "step headroom and state / graph pools %.1f GiB); the rest run from host RAM", slots,
                           sizes.num_experts, kv_reserve / GiB, self.set_aside / GiB)
        return slots

    # ---- after the weights load -------------------------------------------------------------------

    def cache_sizes(self) -> CacheSizes:
        cache = self.config.cache
        recurrent = bool(self.recurrent_shapes)
        checkpoints = cache.checkpoint_pool_size if recurrent and cache.enable_prefix_caching else 0
        park_rows = self._conversation_cache_rows() if cache.enable_prefix_caching else (0, 0)
        num_blocks = self._num_kv_blocks()
        return CacheSizes(num_blocks, checkpoints, park_rows, self.max_model_len, self._num_host_kv_blocks(),
                          self._kv_staging())

    def _kv_staging(self) -> tuple[int, int]:
        """(ring layers, blocks an entry holds): --kv-staging-tokens, by default one sequence's host blocks at
        max_model_len."""
        cache = self.config.cache
        if not cache.kv_staging_layers:
            return 0, 0
        layers = min(cache.kv_staging_layers, self.num_kv_layers)
        if cache.kv_staging_tokens is not None:
            return layers, -(-cache.kv_staging_tokens // cache.block_size)
        return layers, max(self.max_model_len - cache.kv_resident_tokens, 0) // cache.block_size + 1

    def _num_host_kv_blocks(self) -> int:
        """The host tier's blocks (KV beyond VRAM): --kv-host-mib, or the default (_default_host_kv_blocks);
        at least what one sequence of max_model_len moves there."""
        cache = self.config.cache
        if not cache.kv_offload:
            return 0
        per_seq = max(self.max_model_len - cache.kv_resident_tokens, 0) // cache.block_size
        if cache.kv_host_mib is None:
            num_blocks, sizing = self._default_host_kv_blocks(per_seq)
        else:
            num_blocks, sizing = cache.kv_host_mib * 2**20 // self.block_bytes, f"--kv-host-mib {cache.kv_host_mib}"
        if num_blocks < max(per_seq, 1):
            raise ValueError(f"the host KV tier holds {num_blocks} blocks of {cache.block_size} tokens "
                             f"(kv_host_mib={cache.kv_host_mib}, {self.block_bytes / 2**20:.3f} MiB a block), fewer "
                             f"than one sequence of max_model_len={self.max_model_len} moves there beyond "
                             f"kv_resident_tokens={cache.kv_resident_tokens} ({max(per_seq, 1)} blocks, "
                             f"{max(per_seq, 1) * self.block_bytes / 2**20:.1f} MiB); raise --kv-host-mib or "
                             f"--kv-resident-tokens, or lower --max-model-len")
        available = host_available_bytes() if self.on_cuda else None  # pinned memory is resident at once
        if available is not None and num_blocks * self.block_bytes > available:
            raise ValueError(f"the host KV tier needs {num_blocks * self.block_bytes / GiB:.2f} GiB of pinned host "
                             f"RAM ({num_blocks} blocks), {available / GiB:.2f} GiB are available; set --kv-host-mib "
                             f"(one sequence of max_model_len={self.max_model_len} needs "
                             f"{max(per_seq, 1) * self.block_bytes / 2**20:.0f} MiB) or lower --max-num-seqs")
        self.numbers.update(host_kv_blocks=num_blocks, host_kv_bytes=num_blocks * self.block_bytes,
                            kv_resident_tokens=cache.kv_resident_tokens, host_kv_sizing=sizing)
        return num_blocks

    def _default_host_kv_blocks(self, per_seq: int) -> tuple[int, str]:
        """Without --kv-host-mib: every slot at max_model_len (per_seq host blocks each), on CUDA at most
        DEFAULT_HOST_KV_BYTES and DEFAULT_HOST_KV_SHARE of the available RAM but at least one sequence ->
        (blocks, how they were chosen, for the plan's table)."""
        every_slot = max(per_seq * self.config.scheduler.max_num_seqs, 1)
        if not self.on_cuda:
            return every_slot, "every slot at max_model_len"
        available = host_available_bytes()
        cap = DEFAULT_HOST_KV_BYTES if available is None else min(DEFAULT_HOST_KV_BYTES,
                                                                  int(available * DEFAULT_HOST_KV_SHARE))
        if every_slot * self.block_bytes <= cap:
            return every_slot, "every slot at max_model_len"
        num_blocks = max(cap // self.block_bytes, per_seq, 1)
        room = "" if available is None else f" and {DEFAULT_HOST_KV_SHARE:.0%} of {available / GiB:.1f} GiB available"
        return num_blocks, (f"default: at most {DEFAULT_HOST_KV_BYTES / GiB:.0f} GiB{room}, at least one sequence; "
                            f"every slot at max_model_len would take {every_slot * self.block_bytes / GiB:.1f} GiB: "
                            f"--kv-host-mib to change")

    def _num_kv_blocks(self) -> int:
        cache, sched = self.config.cache, self.config.scheduler
        if self.sized_context and cache.num_gpu_blocks is None:
            return self._size_context()
        per_seq = blocks_needed(self.max_model_len, cache.block_size)
        if self.resident_blocks is not None:  # KV beyond VRAM: the window on the device, the rest on the host
            per_seq = min(per_seq, self.resident_blocks)
        if cache.num_gpu_blocks is not None:
            num_blocks = cache.num_gpu_blocks
        else:
            budget = self._kv_budget(per_seq * cache.block_size)
            # at most enough for every slot at max length; what is left of that serves the prefix cache
            num_blocks = min(per_seq * sched.max_num_seqs, max(budget // self.block_bytes, 1))
        if num_blocks < per_seq:
            needs = f"max_model_len={self.max_model_len}" if self.resident_blocks is None else \
                f"kv_resident_tokens={cache.kv_resident_tokens} keeps on the device"
            raise ValueError(f"the KV pool holds {num_blocks} blocks of {cache.block_size} tokens, fewer than "
                             f"one sequence of {needs} needs ({per_seq}, {per_seq * self.block_bytes / 2**20:.0f} "
                             f"MiB); lower max_model_len (or kv_resident_tokens) or raise kv_cache_mib "
                             f"(num_gpu_blocks)")
        return num_blocks

    def _kv_budget(self, sequence_tokens: int) -> int:
        """The KV pool's bytes: --kv-cache-mib, else on CUDA what the GPU's budget leaves (_gpu_kv_bytes) and on
        the CPU CPU_KV_BUDGET_BYTES or one sequence of `sequence_tokens` where that is more. On CUDA an asked size
        must fit what the budget leaves, on the CPU the RAM available now: else a clear error with the numbers."""
        asked = self.config.cache.kv_cache_mib
        asked_bytes = None if asked is None else asked * 2**20
        if self.on_cuda:
            room = self._gpu_kv_bytes(sequence_tokens if asked is None else 0)
            if asked_bytes is not None and asked_bytes > room:
                raise ModelDoesNotFit(f"--kv-cache-mib {asked} asks {asked_bytes / GiB:.2f} GiB for the KV cache, but "
                                      f"after the weights, the step headroom and the pools {room / GiB:.2f} GiB are "
                                      f"left; lower --kv-cache-mib or raise --gpu-memory-utilization")
            return room if asked_bytes is None else asked_bytes
        one_sequence = self.block_bytes * blocks_needed(sequence_tokens, self.config.cache.block_size)
        budget = max(CPU_KV_BUDGET_BYTES, one_sequence) if asked_bytes is None else asked_bytes
        available = host_available_bytes()
        if available is not None and budget > available:
            what = f"--kv-cache-mib {asked}" if asked is not None else \
                f"one sequence of max_model_len={sequence_tokens}"
            raise ModelDoesNotFit(f"the KV cache for {what} needs {budget / GiB:.2f} GiB of RAM, only "
                                  f"{available / GiB:.2f} GiB are available; lower --max-model-len or --kv-cache-mib")
        self.numbers.update(kv_budget_bytes=budget)
        return budget

    def _size_context(self) -> int:
        """No --max-model-len: the KV pool takes its budget (_kv_budget: --kv-cache-mib, what the GPU's budget
        leaves, or CPU_KV_BUDGET_BYTES on the CPU), up to every slot at the model's maximum, and max_model_len
        becomes what it holds, capped at the model's maximum, so one request may use the whole pool; on CUDA at
        least MIN_DEFAULT_CONTEXT tokens must fit."""
        block_size, model_max = self.config.cache.block_size, self.max_model_len
        floor = min(model_max, MIN_DEFAULT_CONTEXT)
        budget = self._kv_budget(floor if self.on_cuda else 0)
        num_blocks = min(blocks_needed(model_max, block_size) * self.config.scheduler.max_num_seqs,
                         max(budget // self.block_bytes, 1))
        self.max_model_len = min(model_max, num_blocks * block_size)
        self.numbers.update(max_model_len=self.max_model_len, model_max_len=model_max)
        return num_blocks

    def _gpu_kv_bytes(self, sequence_tokens: int) -> int:
        """What the KV pool may take: the allowed memory minus what is in use (weights), the step headroom
        and the pools allocated after it; a clear error when not even one sequence of `sequence_tokens` fits."""
        one_sequence_bytes = self.block_bytes * blocks_needed(sequence_tokens, self.config.cache.block_size)
        runner = self.config.runner
        if self.on_cuda:  # what loading left in the allocator's cache is free for the pools, not in use
            torch.cuda.empty_cache()
        budget = self._budget()
        kv_bytes = budget.available - self.set_aside
        self.numbers = {**self.numbers, "total_bytes": budget.total, "allowed_bytes": budget.allowed,
                        "in_use_after_weights_bytes": budget.in_use, "headroom_bytes": self.headroom,
                        "kv_budget_bytes": kv_bytes, "auto_expert_slots": self.auto_expert_slots}
        if kv_bytes < one_sequence_bytes:
            raise ModelDoesNotFit(
                f"after the weights, {max(kv_bytes, 0) / GiB:.2f} GiB are left for the KV cache (a step headroom "
                f"of {self.headroom / GiB:.2f} GiB and {sum(self.pools.values()) / GiB:.2f} GiB of state and "
                f"graph pools set aside; "
                f"{budget.describe(runner.gpu_memory_utilization, runner.vram_reserve_mib)}) "
                f"but one sequence of max_model_len={sequence_tokens} needs {one_sequence_bytes / GiB:.2f} GiB; "
                f"lower --max-model-len, --max-num-seqs or --max-num-batched-tokens, or raise --gpu-memory-utilization")
        return kv_bytes

    def _conversation_cache_rows(self) -> tuple[int, int]:
        """Host-RAM rows for parked (KV blocks, checkpoints) from --conversation-cache-mib; a quarter
        goes to checkpoints on hybrid models."""
        mib = self.config.cache.conversation_cache_mib
        if mib is None:
            mib = CONVERSATION_CACHE_MIB_CUDA if self.on_cuda else 0
        if mib <= 0:
            return 0, 0
        budget = mib * 2**20
        if not self.recurrent_shapes:
            return budget // self.block_bytes, 0
        checkpoint_bytes = sum(math.prod(conv) * self.dtype.itemsize + math.prod(ssm) * 4
                               for conv, ssm in self.recurrent_shapes.values())
        checkpoint_rows = max(budget // 4 // checkpoint_bytes, 1)
        return max((budget - checkpoint_rows * checkpoint_bytes) // self.block_bytes, 0), checkpoint_rows

    def as_dict(self) -> dict:
        return dict(self.numbers)

    def check_after_start(self, graph_pool_bytes: int) -> None:
        """After the runner allocated its pools and captured its graphs: record what the device holds and
        the graph pool's measured size beside the estimate, and warn when the allowance is exceeded."""
        if not self.on_cuda or "allowed_bytes" not in self.numbers:
            return
        budget = self._budget()
        self.numbers.update(in_use_after_start_bytes=budget.in_use, graph_pool_measured_bytes=graph_pool_bytes)
        if budget.in_use > budget.allowed:
            logger.warning("GPU memory in use after start (%.2f GiB, CUDA graph pool %.2f GiB) exceeds the plan's "
                           "allowance (%.2f GiB): lower --max-num-seqs, --max-model-len or --cuda-graph-max-slots",
                           budget.in_use / GiB, graph_pool_bytes / GiB, budget.allowed / GiB)

    def table(self, num_kv_blocks: int) -> str:
        """The plan as the engine prints it at start (CUDA, after cache_sizes): each device allocation, the
        total, and what the budget allows."""
        n = self.numbers
        if "allowed_bytes" not in n:
            return ""
        rows = [("weights and resident experts (measured)", n["in_use_after_weights_bytes"]),
                (f"KV cache ({num_kv_blocks} blocks)", num_kv_blocks * self.block_bytes),
                *((name, size) for name, size in self.pools.items() if size),
                ("step activations (headroom)", self.headroom)]
        total = sum(size for _, size in rows)
        width = max(len(name) for name, _ in rows) + 2
        lines = [f"  {name:<{width}}{size / GiB:8.2f} GiB" for name, size in rows]
        lines.append(f"  {'total':<{width}}{total / GiB:8.2f} GiB of {n['allowed_bytes'] / GiB:.2f} GiB allowed "
                     f"(GPU {n['total_bytes'] / GiB:.1f} GiB)")
        if "host_kv_blocks" in n:
            lines.append(f"  host KV tier ({n['host_kv_blocks']} blocks in pinned host RAM beyond the newest "
                         f"{n['kv_resident_tokens']} tokens a slot): {n['host_kv_bytes'] / GiB:.2f} GiB "
                         f"({n['host_kv_sizing']})")
        return "GPU memory plan:\n" + "\n".join(lines)
