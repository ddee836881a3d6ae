"""Which CUDA graph layout a step takes: the padded slot ladder, fresh prompts' layouts, steps split into several
graphs or joined in one mixed layout, and the layouts the warm-up captures (cuda_graphs.py has the layouts' story;
CudaGraphCache holds the graphs and inherits this planning)."""

from __future__ import annotations

import bisect

from strata.types import ScheduledSlot

# padded slot counts: exact up to 8 (padding rows route to experts too, so small batches pad little)
SLOT_LADDER = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128)
MIN_PROMPT_LAYOUT = 16  # fresh prompts pad up to 16, 32, 64, ... tokens
# rows of a graph of several fresh prompts (prompts x padded length): 32 prompts of 64 tokens, 4 of 512
PROMPT_GRAPH_ROWS = 2048
# a mixed layout's fresh prompts pad up to 32, 64, ... tokens: longer than any window, so the layers tell its prompts
# from its windows by length (attention's BATCHED_MAX_QUERY_LEN, the recurrent layers' short windows: 16 tokens)
MIN_MIXED_PROMPT_LAYOUT = 32
# graphs the cache holds beyond the warm-up ladder's by default: mixed layouts (and model variants the warm-up
# leaves out), captured as steps bring them
MIXED_GRAPH_ROOM = 16
# a graph's key: (padded slot count, tokens per slot); for a model's variant of it (slots, tokens, variant); for a
# mixed layout (window slots, tokens per window, (prompts, padded prompt length))
Layout = tuple


def slot_rows(key: Layout) -> list[int]:
    """The rows each slot of a layout takes, its padding slots included."""
    prompts = prompts_beside(key)
    return [key[1]] * key[0] + ([] if prompts is None else [prompts[1]] * prompts[0])


def prompts_beside(key: Layout) -> tuple[int, int] | None:
    """A mixed layout's (padded prompt count, padded length), else None."""
    return key[2] if len(key) > 2 and isinstance(key[2], tuple) else None


def layout_variant(key: Layout) -> str:
    """The model's graph variant a layout was captured as ("" for the plain one)."""
    return key[2] if len(key) > 2 and isinstance(key[2], str) else ""


class GraphLayouts:
    """Layout planning over the cache's settings: `ladder` (padded slot counts), `max_tokens_per_slot`,
    `max_prompt_tokens`, `prompt_counts` (prompts a multi-prompt graph takes), `graph_variant` (the model's),
    `warm_variants`, `eager_only` (layouts whose capture failed) and `inputs` (the graph inputs: rows they hold)."""

    def layout_for(self, scheduled: list[ScheduledSlot]) -> Layout | None:
        """The step's layout when it fits a graph, else None."""
        n = scheduled[0].num_new_tokens
        if n > self.max_tokens_per_slot or len(scheduled) > self.ladder[-1] \
                or any(w.num_new_tokens != n for w in scheduled):
            return None
        variant = self.graph_variant(scheduled)
        if variant is None:
            return None
        key = (self.ladder[bisect.bisect_left(self.ladder, len(scheduled))], n) + ((variant,) if variant else ())
        return None if key in self.eager_only else key

    @property
    def prompt_rows(self) -> int:
        return prompt_graph_rows(self.max_prompt_tokens)

    def prompt_layout(self, work: ScheduledSlot, num_prompts: int = 1) -> tuple[int, int] | None:
        """(padded prompt count, padded length) of a graph that takes fresh prompt (chunk) `work` among
        num_prompts of at most its length, else None."""
        n = work.num_new_tokens
        if work.num_computed_tokens or n > self.max_prompt_tokens or num_prompts > max(self.prompt_counts, default=0) \
                or self.graph_variant([work]) != "":
            return None
        length = max(MIN_PROMPT_LAYOUT, 1 << (n - 1).bit_length())
        count = self.prompt_counts[bisect.bisect_left(self.prompt_counts, num_prompts)]
        key = (count, length)
        return None if count * length > self.prompt_rows or key in self.eager_only else key

    def split_layouts(self, scheduled: list[ScheduledSlot]) -> list[tuple[Layout, list[int]]] | None:
        """A step that no single layout fits, as graphs: (layout, indices into `scheduled`) for the
        step's fresh prompts, longest first, as few multi-prompt layouts as hold them, and for the other
        slots one layout of uniform windows; None if some slot fits neither (it runs eagerly then)."""
        if not self.max_prompt_tokens:
            return None
        prompts = sorted((i for i, work in enumerate(scheduled) if self.prompt_layout(work) is not None),
                         key=lambda i: -scheduled[i].num_new_tokens)
        if not prompts:
            return None
        parts = []
        while prompts:  # the longest prompt left sets the group's length; as many follow as still fit
            group = [prompts.pop(0)]
            while prompts and self.prompt_layout(scheduled[group[0]], len(group) + 1) is not None:
                group.append(prompts.pop(0))
            parts.append((self.prompt_layout(scheduled[group[0]], len(group)), group))
        grouped = {i for _, group in parts for i in group}
        windows = [i for i in range(len(scheduled)) if i not in grouped]
        if windows:
            key = self.layout_for([scheduled[i] for i in windows])
            if key is None:
                return None
            parts.insert(0, (key, windows))
        return parts

    def mixed_layout(self, scheduled: list[ScheduledSlot]) -> tuple[Layout, list[int], list[int]] | None:
        """A step of fresh prompts beside uniform windows (decode or verification), which split_layouts replays as
        two graphs or more (each reading the weights), as one: (its layout, the windows' indices into `scheduled`,
        the prompts'); None where the step lacks either, or they do not fit one graph's slots and rows."""
        if not self.max_prompt_tokens:
            return None
        prompts = [i for i, work in enumerate(scheduled) if self.prompt_layout(work) is not None]
        taken = set(prompts)
        windows = [i for i in range(len(scheduled)) if i not in taken]
        if not prompts or not windows:
            return None
        key = self.layout_for([scheduled[i] for i in windows])
        if key is None or layout_variant(key):
            return None
        longest = max(scheduled[i].num_new_tokens for i in prompts)
        length = max(MIN_MIXED_PROMPT_LAYOUT, 1 << (longest - 1).bit_length())
        count = next(c for c in self.prompt_counts + (len(prompts),) if c >= len(prompts))
        if key[0] + count > self.ladder[-1]:
            count = len(prompts)  # prompt counts are padded while the slots allow
        mixed = (key[0], key[1], (count, length))
        if length > self.max_prompt_tokens or key[0] + count > self.ladder[-1] or mixed in self.eager_only \
                or sum(slot_rows(mixed)) > self.inputs.max_tokens:
            return None
        return mixed, windows, prompts

    def ladder_keys(self) -> list[tuple[int, int]]:
        """Every layout decoding uses, most needed first: plain decode for every ladder size (and one slot's
        decode in each variant the model warms), single fresh prompts, longer verification windows, then
        several fresh prompts at once."""
        decode = [(slots, 1) for slots in self.ladder] + [(self.ladder[0], 1, v) for v in self.warm_variants]
        lengths = powers_of_two(MIN_PROMPT_LAYOUT, self.max_prompt_tokens)
        prompts = [(1, n) for n in lengths]
        windows = [(slots, n) for n in range(2, self.max_tokens_per_slot + 1) for slots in self.ladder]
        several = [(count, n) for n in lengths for count in self.prompt_counts[1:] if count * n <= self.prompt_rows]
        return list(dict.fromkeys(decode + prompts + windows + several))  # a window may equal a prompt layout


def prompt_token_limit(requested: int, max_len: int) -> int:
    """The longest fresh prompt given a graph: the largest power of two within both limits, so every
    padded prompt layout fits the graph inputs and the model's positions; 0 (none) below 16."""
    limit = min(requested, max_len)
    return 0 if limit < MIN_PROMPT_LAYOUT else 1 << (limit.bit_length() - 1)


def prompt_graph_rows(max_prompt_tokens: int) -> int:
    """Rows of the largest multi-prompt layout for prompts up to max_prompt_tokens (0: no prompt graphs)."""
    return max(PROMPT_GRAPH_ROWS, max_prompt_tokens) if max_prompt_tokens else 0


def powers_of_two(low: int, high: int) -> list[int]:
    return [1 << e for e in range(low.bit_length() - 1, high.bit_length()) if low <= 1 << e <= high]
