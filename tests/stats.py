"""Statistics helpers shared by the distribution tests."""

from __future__ import annotations

import numpy as np
import torch


def chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Goodness-of-fit over the tokens with probability > 0 (the others are checked to be 0)."""
    support = probs > 0
    expected = probs[support] * counts.sum()
    stat = float(((counts[support] - expected) ** 2 / expected).sum())
    dof = int(support.sum()) - 1
    # chi2 survival function = regularized upper incomplete gamma Q(dof / 2, stat / 2).
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                         torch.tensor(stat / 2.0, dtype=torch.float64)))
