"""How many drafts a request gets: who may speculate, and the adaptive draft length.

Requests whose sampling needs the exact per-position history (penalties, min_tokens not yet met) or
per-token logprobs decode without drafts. The adaptive length falls as the batch grows (verification
rows cost compute that a large batch no longer has spare) and as the request's own acceptance drops.
A new request's acceptance starts at the engine's running estimate over all verifications (so a
drafter that does not match the traffic is not re-learned by every request), and drifts back up
while it does not draft (so it is retried now and then).
"""

from __future__ import annotations

from strata.types import SamplingParams

_ACCEPTANCE_EMA_WEIGHT = 0.3
_ACCEPTANCE_RECOVERY = 1 / 256
_ACCEPTANCE_FLOOR = 0.01
_MIN_GAIN = 1.05  # drafting must promise 5 % more tokens per step than not drafting, whatever it costs


def can_speculate(params: SamplingParams, num_output_tokens: int) -> bool:
    return (params.logprobs is None and params.repetition_penalty == 1.0 and params.presence_penalty == 0.0
            and params.frequency_penalty == 0.0 and num_output_tokens >= params.min_tokens)


def draft_length(k_max: int, adaptive: bool, num_running: int, acceptance_ema: float,
                 k_step: int | None = None) -> int:
    """Drafts for a request's next step. `k_step` is the whole batch's choice of the cost model (None
    until it has step times, or when all of them went stale: then k falls with the batch size and the
    request's acceptance by a fixed rule, which drafts nothing below 5 % acceptance; a request whose
    drafts were all rejected thus waits for `recover_acceptance` to retry, about 400 steps)."""
    if not adaptive:
        return k_max
    if k_step is not None:
        return k_step  # one length for the batch: its cost model already weighs each request's acceptance
    k = k_max if num_running <= 4 else max(1, (k_max * 4) // num_running)
    if expected_tokens(acceptance_ema, 1) < _MIN_GAIN:
        return 0  # even one draft is all but certain to be rejected (the cost model's cut-off too)
    if acceptance_ema < 0.25:
        return min(k, 1)
    if acceptance_ema < 0.5:
        return min(k, max(1, k_max // 2))
    return k


def update_acceptance(ema: float, num_drafts: int, num_accepted: int) -> float:
    if num_drafts == 0:
        return ema
    return (1 - _ACCEPTANCE_EMA_WEIGHT) * ema + _ACCEPTANCE_EMA_WEIGHT * num_accepted / num_drafts


def recover_acceptance(ema: float) -> float:
    """A step without drafts moves the request's acceptance estimate back up a little (by 1/256 of
    itself, from at least 1 %), so a request that stopped drafting (k = 0 once its drafts were
    rejected) tries again now and then: a retry whose drafts are rejected (x 0.7) takes about 90 steps
    to win back."""
    return min(1.0, max(ema, _ACCEPTANCE_FLOOR) * (1.0 + _ACCEPTANCE_RECOVERY))


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a window of k drafts emits on average when each draft is accepted with probability
    `acceptance` given the ones before it: 1 + a + a^2 + ... + a^k (the bonus token included)."""
    return float(k + 1) if acceptance >= 1.0 else (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


class DraftCostModel:
    """Step time of decode-only steps against tokens per step, learned online, to choose the batch's
    draft length: the k in 0..k_max with the most expected tokens per second. Speculation therefore
    turns itself off (k = 0) where verification rows cost more than they return. The times are wall
    times with the host's work (the engine's, start to commits): plain steps planned ahead hide theirs
    behind the device, verification steps do not (measured 2.3 against 0.4 ms a step at 16 streams on
    the H200), and the choice must see that.

    Unseen sizes are estimated optimistically (interpolated between seen ones; below the smallest seen,
    proportional to tokens; above the largest, as cheap as the largest), so every candidate gets tried
    once and then judged by its measured time.

    A size not observed for a while is forgotten and tried again: a size that is never chosen is never
    measured again, so one slow first measurement (a kernel compiled at first use, a busy host) would
    otherwise turn drafting off for good. The wait doubles each time a forgotten size is measured again
    (from `refresh_decisions` up to 64 times that), so a size that is really too slow costs ever fewer
    retries. A forgotten size below the smallest one measured lately keeps its last time (at most that
    one's) instead of the proportional guess: on a GPU, where a step's time barely grows with its rows, the
    guess made plain decoding (k = 0) look 4x cheaper than 3 drafts after every wait, and the retries took
    89-107 of ~470 choices on issue 29's run (bench/results/2026-12-07-cpu-session65/adaptive_sim.py; the H100
    took 381-387 decode steps where k fixed at 3 takes ~345). A slow first measurement of a larger (drafting)
    size is still forgotten and retried."""

    def __init__(self, ema_weight: float = 0.2, refresh_decisions: int = 16) -> None:
        self.ema_weight = ema_weight
        self.seconds: dict[int, float] = {}     # tokens per step -> EMA of step seconds
        self.refresh_decisions = refresh_decisions
        self.decisions = 0                      # best_k calls so far: the clock of staleness
        self.last_seen: dict[int, int] = {}     # tokens per step -> decision count at its last observation
        self.retries: dict[int, int] = {}       # tokens per step -> times it was forgotten and measured again

    def _stale(self, num_tokens: int) -> bool:
        wait = self.refresh_decisions << min(self.retries.get(num_tokens, 0), 6)
        return self.decisions - self.last_seen.get(num_tokens, self.decisions) > wait

    def observe(self, num_tokens: int, seconds: float) -> None:
        if num_tokens <= 0 or seconds <= 0:
            return
        old = self.seconds.get(num_tokens)
        if old is not None and self._stale(num_tokens):  # a retry: measure afresh, wait longer next time
            self.retries[num_tokens] = self.retries.get(num_tokens, 0) + 1
            old = None
        elif old is not None and self.decisions - self.last_seen[num_tokens] <= 1:
            self.retries.pop(num_tokens, None)  # chosen step after step: it earns its place again
        self.last_seen[num_tokens] = self.decisions
        self.seconds[num_tokens] = seconds if old is None else (1 - self.ema_weight) * old + self.ema_weight * seconds

    def estimate(self, num_tokens: int) -> float | None:
        seconds = {size: s for size, s in self.seconds.items() if not self._stale(size)}
        if not seconds:
            return None
        if num_tokens in seconds:
            return seconds[num_tokens]
        sizes = sorted(seconds)
        if num_tokens < sizes[0]:
            if num_tokens in self.seconds:  # measured before, gone stale: its last time, not the optimistic guess
                return min(self.seconds[num_tokens], seconds[sizes[0]])
            return seconds[sizes[0]] * num_tokens / sizes[0]
        if num_tokens > sizes[-1]:
            return seconds[sizes[-1]]
        above = next(s for s in sizes if s > num_tokens)
        below = max(s for s in sizes if s < num_tokens)
        frac = (num_tokens - below) / (above - below)
        return seconds[below] + frac * (seconds[above] - seconds[below])

    def best_k(self, k_max: int, acceptances: list[float]) -> int | None:
        """The draft length for a batch of requests with these acceptance rates (None: no data yet)."""
        if not acceptances or not self.seconds:
            return None
        self.decisions += 1
        if self.estimate(len(acceptances)) is None:
            return None  # everything measured is stale
        best, best_rate = 0, 0.0
        for k in range(k_max + 1):
            tokens = sum(expected_tokens(a, k) for a in acceptances)
            if k and tokens < _MIN_GAIN * len(acceptances):
                break  # drafts all but certain to be rejected: not worth even a retry of an unmeasured k
            rate = tokens / self.estimate(len(acceptances) * (k + 1))
            if rate > best_rate * 1.02:  # a longer window must win clearly: it also costs drafting
                best, best_rate = k, rate
        return best
