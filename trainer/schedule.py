"""Learning-rate schedule by tokens, and the sequence-length switch, scaled to a run (DeepSeek-V4.1
report §4.2.2).

The report's plan for its 45T-token run (fixed batch of 100.6M tokens, so 447,316 steps):

    warmup 2,000 steps (linear, by step) to the peak lr 2.6e-4
    constant                              until 28T tokens  (28/45 of the budget)
    cosine from 1.0x to 0.1x of the peak  between 28T and 40T (28/45 .. 40/45)
    constant 0.1x (2.6e-5)                until 45T
    sequence length 64K from the start, 1M from 34T (34/45): the trainer switches shard phase
    from "pretrain" to "long" there

`TokenSchedule` keeps every token mark as the same fraction of the run's own token budget. Warmup is
counted in steps: min(2000, max(1, ceil(1% of the run's steps))) when the run's step count is given,
i.e. 2,000 for any run of 200,000 steps or more, 2 for a 200-step run (the report's 2,000 of 447,316
steps is 0.45%; 1% is slightly more conservative for short runs).

`plan_tokens` sizes the budget of a run given by steps when the long phase has a different tokens
per step (see its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "SPEC_TOTAL_TOKENS",
    "SPEC_WARMUP_STEPS",
    "TokenSchedule",
    "plan_tokens",
    "scaled_warmup_steps",
]

# SPEC_*: the DeepSeek-V4.1 report's full-size run (§4.2.2)
SPEC_TOTAL_TOKENS = 45e12
SPEC_BATCH_TOKENS = 100.6e6
SPEC_WARMUP_STEPS = 2000
SPEC_PEAK_LR = 2.6e-4
DECAY_START = 28 / 45  # constant lr until here
DECAY_END = 40 / 45  # cosine to final_ratio × peak between DECAY_START and here, constant after
LONG_SWITCH = 34 / 45  # sequence length 64K → 1M: the "long" shard phase from here
FINAL_RATIO = 0.1  # 2.6e-5 / 2.6e-4


def scaled_warmup_steps(total_steps: int | None, warmup_steps: int = SPEC_WARMUP_STEPS,
                        fraction: float = 0.01) -> int:
    """min(warmup_steps, max(1, ceil(fraction · total_steps))); warmup_steps when total_steps is None."""
    if total_steps is None:
        return warmup_steps
    return min(warmup_steps, max(1, math.ceil(fraction * total_steps)))


def plan_tokens(steps: int, tokens_per_step: float, long_tokens_per_step: float | None = None,
                long_switch: float = LONG_SWITCH) -> float:
    """Token budget T of a run of `steps` steps: the budget its steps consume exactly.

    Without a long phase (or with equal tokens per step) T = steps · tokens_per_step. With a long
    phase taking long_tokens_per_step per step after the switch at long_switch·T:
        steps = long_switch·T / tokens_per_step + (1 − long_switch)·T / long_tokens_per_step
    solved for T, so that the run's last step is where the budget ends (a 1M-token sequence does
    not fit a small run's batch; a step there takes one whole long sequence, more tokens).
    """
    if not long_tokens_per_step or long_tokens_per_step == tokens_per_step:
        return steps * tokens_per_step
    return steps / (long_switch / tokens_per_step + (1 - long_switch) / long_tokens_per_step)


@dataclass
class TokenSchedule:
    """lr(step, tokens): warmup by step, then the report's token marks as fractions of total_tokens.

    `step` is the 0-based index of the update, `tokens` the tokens consumed before it. The warmup
    factor min(1, (step + 1) / warmup_steps) multiplies the token-based factor:
        f(x) = 1                                                   x < decay_start
             = r + (1 − r)·(1 + cos(π (x − decay_start)/(decay_end − decay_start)))/2
                                                                   decay_start ≤ x < decay_end
             = r                                                   x ≥ decay_end
    with x = tokens / total_tokens and r = final_ratio, so f is 1 at decay_start and r at decay_end.
    When total_steps is given, warmup_steps is scaled down by `scaled_warmup_steps`.
    """

    total_tokens: float
    peak_lr: float = SPEC_PEAK_LR
    warmup_steps: int = SPEC_WARMUP_STEPS
    total_steps: int | None = None
    final_ratio: float = FINAL_RATIO
    decay_start: float = DECAY_START
    decay_end: float = DECAY_END
    long_switch: float = LONG_SWITCH

    def __post_init__(self) -> None:
        if self.total_tokens <= 0:
            raise ValueError(f"total_tokens must be > 0, got {self.total_tokens}")
        if not 0 <= self.decay_start <= self.decay_end <= 1:
            raise ValueError("need 0 <= decay_start <= decay_end <= 1")
        self.warmup_steps = scaled_warmup_steps(self.total_steps, self.warmup_steps)

    @property
    def marks(self) -> dict[str, float]:
        """The token marks of this run: decay start/end and the long-phase switch, in tokens."""
        return {"decay_start": self.decay_start * self.total_tokens,
                "decay_end": self.decay_end * self.total_tokens,
                "long_switch": self.long_switch * self.total_tokens,
                "end": float(self.total_tokens)}

    def factor(self, tokens: float) -> float:
        """The token-based factor f(tokens / total_tokens) ∈ [final_ratio, 1]."""
        x = tokens / self.total_tokens
        if x < self.decay_start:
            return 1.0
        if x >= self.decay_end:
            return self.final_ratio
        progress = (x - self.decay_start) / (self.decay_end - self.decay_start)
        return self.final_ratio + (1 - self.final_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def warmup(self, step: int) -> float:
        return min(1.0, (step + 1) / self.warmup_steps) if self.warmup_steps > 0 else 1.0

    def lr(self, step: int, tokens: float) -> float:
        return self.peak_lr * self.warmup(step) * self.factor(tokens)

    __call__ = lr

    def phase(self, tokens: float) -> str:
        """'pretrain' before long_switch · total_tokens, 'long' from there."""
        return "long" if tokens >= self.long_switch * self.total_tokens else "pretrain"
