"""OpenAI's `n`: parallel choices of one prompt (or of each of a completions request's prompts), each its own
engine request (its SamplingParams.for_choice: seed mixed per choice), read as one stream of (choice index, delta)
pairs. Owns their staged submission and their merged deltas; it renders nothing (the routes turn deltas into API
shapes).

Sharing the prompt: choice 0 is submitted alone and the others when its first token arrives. By then the
engine has computed the prompt and registered its full KV blocks (and, on hybrid models, the recurrent-state
checkpoint at the prompt's last block boundary) in the prefix cache, so each sibling is admitted onto those
blocks, shared read-only by refcount, and computes only the prompt's last partial block. Chosen over
submitting all n at once (blocks are registered only once computed, so every choice would read the whole
prompt) and over forking a slot after prefill (a copy of the partial block and of the recurrent state in
the runner): this uses the prefix cache's tested path and changes nothing in the engine. Without prefix
caching every choice reads the prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import Request as HTTPRequest

from strata.server.generation import Generation, Output, ServerState, while_connected
from strata.types import FinishReason, Request, TokenDelta


class Choices:
    """`await choices.__aenter__()` submits each prompt's choice 0 (errors before any output are HTTP errors);
    `__aexit__` aborts every unfinished choice. Several prompts (a completions request's list of them) have their
    n choices each, prompt p's choice j at index p * n + j, as OpenAI numbers them. Usage counts each prompt once."""

    def __init__(self, state: ServerState, request: Request | list[Request], n: int) -> None:
        self.state, self.n = state, n
        requests = request if isinstance(request, list) else [request]
        # every Generation checks the queue limit here, before anything is submitted
        self.gens = [Generation(state, r if j == 0 else r.choice(j)) for r in requests for j in range(n)]
        self.heads = list(range(0, len(self.gens), n))  # each prompt's choice 0
        self._queue: asyncio.Queue[tuple[int, TokenDelta | None | BaseException]] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._siblings_submitted: set[int] = set()  # heads whose siblings are submitted

    @property
    def request(self) -> Request:
        return self.gens[0].request

    @property
    def num_prompt_tokens(self) -> int:
        return sum(self.gens[head].num_prompt_tokens for head in self.heads)

    @property
    def num_cached_tokens(self) -> int:
        return sum(self.gens[head].num_cached_tokens for head in self.heads)

    @property
    def num_completion_tokens(self) -> int:
        """The choices' tokens so far, summed (usage)."""
        return sum(gen.tracker.num_output_tokens for gen in self.gens)

    async def __aenter__(self) -> Choices:
        try:
            # every prompt at once: entering one waits for its first token
            await asyncio.gather(*(self.gens[head].__aenter__() for head in self.heads))
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        for task in self._tasks:
            task.cancel()
        for gen in self.gens:
            if gen.stream is None:  # never submitted
                gen.tracker.on_end(FinishReason.ABORT.value)
            else:
                await gen.__aexit__()

    async def _pump(self, index: int) -> None:
        gen = self.gens[index]
        try:
            if index % self.n:
                await gen.__aenter__()
            async for delta in gen.deltas():
                if delta is not None and index % self.n == 0 and index not in self._siblings_submitted:
                    self._siblings_submitted.add(index)  # choice 0's first token: its prompt is cached
                    self._tasks += [asyncio.create_task(self._pump(i)) for i in range(index + 1, index + self.n)]
                self._queue.put_nowait((index, delta))
        except Exception as e:  # noqa: BLE001 - handed to the reader, which raises it
            self._queue.put_nowait((index, e))

    async def deltas(self) -> AsyncIterator[tuple[int, TokenDelta] | None]:
        """(choice index, delta) in arrival order until every choice has finished; None when a choice has
        waited `keepalive_s` for its next delta. Raises a choice's APIError or EngineDeadError."""
        if len(self.gens) == 1:  # one choice: its deltas as they come, no task or queue between
            async for delta in self.gens[0].deltas():
                yield None if delta is None else (0, delta)
            return
        self._tasks = [asyncio.create_task(self._pump(head)) for head in self.heads]
        num_running = len(self.gens)
        while num_running:
            index, delta = await self._queue.get()
            if isinstance(delta, BaseException):
                raise delta
            if delta is None:
                yield None
                continue
            num_running -= int(delta.finished)
            yield index, delta

    async def collect(self, http_request: HTTPRequest) -> list[Output]:
        """Every choice's whole output; 503 if the engine dies; aborts if the client disconnects."""
        outputs = [Output() for _ in self.gens]
        async for index, delta in while_connected(self.deltas(), http_request):
            outputs[index].add(delta)
        return outputs
