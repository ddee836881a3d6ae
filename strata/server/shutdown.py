"""Graceful shutdown for `strata serve` (SIGTERM, Ctrl-C): stop accepting connections, answer new
requests on open connections with 503, let the running ones finish for up to --drain-timeout-s, then
end each one still running with its API's error event (a 503 for a non-streaming request) and only then
hand over to uvicorn's own shutdown, which finds nothing left to cancel (no CancelledError). The
engine processes stop in the app's lifespan shutdown after that. A second Ctrl-C ends the drain at once.
"""

from __future__ import annotations

import asyncio
import logging

import uvicorn

from strata.server.generation import ServerState

logger = logging.getLogger("strata.server")

_POLL_S = 0.05
# uvicorn's own wait for responses after the drain: the error events are already on their way
FINAL_GRACE_S = 5.0


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state

    async def shutdown(self, sockets=None) -> None:
        for server in self.servers:
            server.close()  # stop accepting; uvicorn's shutdown closes them again (a no-op)
        await drain(self.state, lambda: self.force_exit)
        await super().shutdown(sockets)


async def drain(state: ServerState, forced=lambda: False) -> None:
    """Wait for the requests in flight to finish (up to the drain timeout), then end the rest."""
    state.draining = True
    client, timeout = state.client, state.config.drain_timeout_s
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if client.num_in_flight:
        logger.warning("shutting down: waiting up to %.0f s for %d requests to finish", timeout, client.num_in_flight)
    while client.num_in_flight and loop.time() < deadline and not forced():
        await asyncio.sleep(_POLL_S)
    if client.num_in_flight:
        logger.warning("shutting down: ending %d requests still running", client.num_in_flight)
        client.end_all("the server is shutting down")
