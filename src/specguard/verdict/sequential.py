"""The alpha-spending plan of a sequential check (``check --until-decided``): how much error each look may spend. Pure.

Why this shape. Looking at the evidence again after every further repetition,
and stopping at the first GO or NO-GO, inflates both error rates if every look
is tested at the fixed-design levels (2.5 % one-sided per GO-side bound, 5 %
family-wise for NO-GO): five looks at 2.5 % can give a false GO in up to 12 %
of identical-arm checks. So the plan's looks, fixed before any data (the
planned repetitions, then one look every ``look_every`` repetitions until
``max_requests_per_arm``), share the two alphas by a spending function of the
planned information fraction t (requests per arm so far over the budget):
Lan & DeMets (1983, "Discrete sequential boundaries for clinical trials",
Biometrika 70:659-663), with the Pocock-type function
``alpha(t) = alpha * ln(1 + (e - 1) t)``, which spends more early than
O'Brien-Fleming's (an operator wants a clear win or a clear breakage
recognised at the first look, not held back for the last). Look k is tested
at ``alpha(t_k) - alpha(t_k-1)``.

The looks' statistics are positively correlated, and no boundary is computed
from their joint distribution: the increments are used as they are, which by
the union bound keeps the total error at most alpha over all looks, for the
GO side's intersection-union tests and for Holm's family alike, whatever the
correlation (conservative: the simulation in tests/unit/verdict/
test_operating_characteristics.py measures how much). A look that is not
taken (the check decided earlier, or nothing was left undecided) spends
nothing.
"""

from __future__ import annotations

import math

from specguard.verdict.model import SINGLE_LOOK, Look

__all__ = ["GO_ALPHA", "NOGO_ALPHA", "SPENDING_REFERENCE", "look_schedule", "planned_looks", "spent"]

GO_ALPHA = SINGLE_LOOK.alpha_go
NOGO_ALPHA = SINGLE_LOOK.alpha_nogo
SPENDING_REFERENCE = (
    "Lan-DeMets alpha spending (Biometrika 1983), Pocock-type alpha*ln(1+(e-1)t), each look at its increment "
    "(union bound over looks)"
)


def spent(alpha: float, t: float) -> float:
    """Alpha spent by information fraction ``t`` (0 to 1), Pocock-type."""
    t = min(max(t, 0.0), 1.0)
    return alpha * math.log(1 + (math.e - 1) * t)


def planned_looks(planned_per_arm: int, per_repetition_per_arm: int, look_every: int, max_per_arm: int) -> list[int]:
    """Requests per arm at each planned look: the planned repetitions, then every ``look_every`` more, within the budget."""
    if planned_per_arm <= 0 or per_repetition_per_arm <= 0:
        return [max(planned_per_arm, 0)]
    sizes = [planned_per_arm]
    step = per_repetition_per_arm * look_every
    while sizes[-1] + step <= max_per_arm:
        sizes.append(sizes[-1] + step)
    return sizes


def look_schedule(sizes: list[int]) -> list[Look]:
    """Each planned look's levels, from its requests per arm (``planned_looks``); the last look spends what is left."""
    total = sizes[-1] if sizes and sizes[-1] > 0 else 1
    out: list[Look] = []
    before = 0.0
    for k, n in enumerate(sizes, start=1):
        t = 1.0 if k == len(sizes) else n / total
        out.append(
            Look(
                index=k,
                of=len(sizes),
                alpha_go=spent(GO_ALPHA, t) - spent(GO_ALPHA, before),
                alpha_nogo=spent(NOGO_ALPHA, t) - spent(NOGO_ALPHA, before),
            )
        )
        before = t
    return out
