"""SLOs and goodput: which requests met every objective, how many per second, and the candidate/baseline ratio. Pure.

Goodput is what an operator sells: requests served within their SLOs per second
(the goodput of ``vllm bench serve``, AIPerf and inference-perf). A faster mean
that lets more requests miss their TTFT bound is not a win; goodput shows it.

Per request, ITL is judged at the request's own p95 of its per-token ITL, not its
maximum: with per-token ITL a request's maximum is one chunk gap, so a single
scheduler hiccup, a preemption or a client stall (one gap, tens of ms) fails a
request whose other 63 tokens were on time, and a speculative candidate, whose
gaps are fewer and longer, would be penalised for the shape of its stream rather
than for its pace. The p95 lets about one token in twenty run late; TPOT bounds
the average pace and E2E the whole.

The ratio's interval: within each repetition the SLO-met indicator is
resampled over requests (as the percentile bootstrap resamples requests within
repetitions), each repetition's window held fixed; an arm's goodput is all its
met requests over all its windows. When two or more repetitions per arm
disagree beyond that request-level noise (Cochran's Q, as for percentiles), the
interval is widened to cover a t-interval over the per-repetition ratios too,
which is where a closed-loop window that moves with the arm's speed shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ValidationError
from scipy import stats

from specguard.analysis.ab_statistics import RatioResult, repetitions_disagree, undefined_ratio
from specguard.analysis.defaults import DEFAULT_RESAMPLES, DEFAULT_TARGET_CHANGE, MIN_TAIL_SAMPLES
from specguard.analysis.request_metrics import measured_window, per_token_itl, tpot
from specguard.errors import OptionError
from specguard.results.models import RequestRecord, Slo, SloAttainment

__all__ = [
    "ITL_QUANTILE",
    "SLO_KEYS",
    "GoodputGuardrail",
    "compare_goodput",
    "goodput_guardrail",
    "meets_slo",
    "parse_slo",
    "request_itl_ms",
    "slo_attainment",
    "slo_misses",
]

SLO_KEYS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
ITL_QUANTILE = 0.95


def parse_slo(text: str, option: str = "--slo") -> Slo:
    """``ttft_ms=500,itl_ms=50``: any subset of SLO_KEYS, each a positive number of milliseconds."""
    values: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep:
            raise OptionError(f"{option} {text}: expected KEY=MILLISECONDS, got {part!r}")
        if key not in SLO_KEYS:
            raise OptionError(f"{option} {text}: unknown key {key!r}; expected any of {', '.join(SLO_KEYS)}")
        if key in values:
            raise OptionError(f"{option} {text}: {key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise OptionError(f"{option} {text}: {key}={raw.strip()!r} is not a number of milliseconds") from None
        if not math.isfinite(value) or value <= 0:
            raise OptionError(f"{option} {text}: {key} must be a positive number of milliseconds, got {raw.strip()}")
        values[key] = value
    try:
        return Slo.model_validate(values)
    except ValidationError:
        raise OptionError(f"{option} {text!r}: give at least one of {', '.join(SLO_KEYS)}") from None


def request_itl_ms(record: RequestRecord) -> float | None:
    """The request's p95 per-token ITL in ms (numpy's linear interpolation); None with one token-bearing chunk."""
    itl = per_token_itl(record.chunk_times_s, record.chunk_tokens)
    return float(np.percentile(itl, 100 * ITL_QUANTILE)) * 1000 if itl else None


def slo_misses(record: RequestRecord, slo: Slo) -> list[str]:
    """The SLOs a successful request exceeded. A value that is undefined for the request (no ITL after a single
    chunk, no TPOT under two tokens) cannot be exceeded; a missing TTFT or E2E on a successful request counts as a miss.
    """
    ms = {
        "ttft_ms": record.ttft_s * 1000 if record.ttft_s is not None else math.inf,
        "e2e_ms": record.e2e_s * 1000 if record.e2e_s is not None else math.inf,
        "tpot_ms": None,
        "itl_ms": None,
    }
    if slo.tpot_ms is not None:
        v = tpot(record.ttft_s, record.e2e_s, record.output_tokens)
        ms["tpot_ms"] = v * 1000 if v is not None else None
    if slo.itl_ms is not None:
        ms["itl_ms"] = request_itl_ms(record)
    return [key for key, bound in slo.given().items() if (value := ms[key]) is not None and value > bound]


def meets_slo(record: RequestRecord, slo: Slo) -> bool:
    """At or under every SLO given; a failed request never meets them."""
    return record.ok and not slo_misses(record, slo)


def slo_attainment(records: Sequence[RequestRecord], slo: Slo, window_s: float | None = None) -> SloAttainment:
    """Goodput over ``window_s`` (default: the records' measured window, as request_rate and output_tokens_per_s)."""
    window = measured_window(records) if window_s is None else window_s
    missed: dict[str, int] = {}
    met = 0
    for r in records:
        if not r.ok:
            continue
        misses = slo_misses(r, slo)
        met += not misses
        for key in misses:
            missed[key] = missed.get(key, 0) + 1
    return SloAttainment(
        slo=slo,
        met=met,
        attainment=met / len(records) if records else 0.0,
        goodput=met / window if records and window > 0 else 0.0,
        missed_by={k: missed[k] for k in SLO_KEYS if k in missed},
    )


def _arm(reps: Sequence[Sequence[RequestRecord]], slo: Slo, segment: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per repetition: measured requests, met requests (of ``segment`` when given) and the run's whole window."""
    n, met, window = [], [], []
    for rep in reps:
        mine = [r for r in rep if segment is None or r.segment == segment]
        n.append(len(mine))
        met.append(sum(meets_slo(r, slo) for r in mine))
        window.append(measured_window(rep))  # segments share their run's window, as they share its time
    return np.asarray(n, dtype=np.int64), np.asarray(met, dtype=np.int64), np.asarray(window, dtype=float)


def _replicates(n: np.ndarray, met: np.ndarray, window: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Goodput of each bootstrap replicate: n draws with replacement of a 0/1 indicator are Binomial(n, met / n)."""
    total = np.zeros(resamples)
    for ni, mi in zip(n, met):
        if ni > 0:
            total += rng.binomial(int(ni), mi / ni, size=resamples)
    out: np.ndarray = total / window.sum()
    return out


def _widen(
    b: tuple[np.ndarray, np.ndarray, np.ndarray], c: tuple[np.ndarray, np.ndarray, np.ndarray], se_log: float
) -> tuple[float, float] | None:
    """A t-interval over paired per-repetition goodput ratios, when the repetitions disagree; else None."""
    pairs = min(len(b[0]), len(c[0]))
    if pairs < 2:
        return None
    gb = b[1][:pairs] / b[2][:pairs]
    gc = c[1][:pairs] / c[2][:pairs]
    if np.any(gb <= 0) or np.any(gc <= 0):
        return None
    logs = np.log(gc / gb)
    if not repetitions_disagree(list(logs), se_log):
        return None
    half = float(stats.t.ppf(0.975, pairs - 1) * np.std(logs, ddof=1) / math.sqrt(pairs))
    mean = float(np.mean(logs))
    return math.exp(mean - half), math.exp(mean + half)


def compare_goodput(
    base: Sequence[Sequence[RequestRecord]],
    cand: Sequence[Sequence[RequestRecord]],
    slo: Slo,
    *,
    segment: str | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    min_tail: int = MIN_TAIL_SAMPLES,
    target_change: float = DEFAULT_TARGET_CHANGE,
) -> RatioResult:
    """candidate / baseline goodput (higher is better) with a 95 % interval; one list of records per repetition.

    ``segment``: count that segment's requests over each run's whole window. ``enough_samples`` needs
    ``min_tail`` met requests per arm; ``more_requests_needed`` is then the requests per arm that would narrow
    the interval's log half-width to ``target_change``, else those that would bring ``min_tail`` met requests.
    """
    rng = np.random.default_rng(seed)
    b, c = _arm(base, slo, segment), _arm(cand, slo, segment)
    nb, nc = int(b[0].sum()), int(c[0].sum())
    gb = float(b[1].sum() / b[2].sum()) if nb else math.nan
    gc = float(c[1].sum() / c[2].sum()) if nc else math.nan
    if nb == 0 or nc == 0 or not gb > 0:
        return undefined_ratio(gb, gc, nb, nc)
    rb, rc = _replicates(*b, resamples, rng), _replicates(*c, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rc / rb
    ratios = ratios[np.isfinite(ratios)]
    lo, hi = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    positive = ratios[ratios > 0]
    wide = _widen(b, c, float(np.std(np.log(positive)))) if positive.size > 1 else None
    if wide is not None:
        lo, hi = min(lo, wide[0]), max(hi, wide[1])
    met_b, met_c = int(b[1].sum()), int(c[1].sum())
    enough = min(met_b, met_c) >= min_tail
    return RatioResult(
        baseline=gb,
        candidate=gc,
        baseline_ci=(float(np.percentile(rb, 2.5)), float(np.percentile(rb, 97.5))),
        candidate_ci=(float(np.percentile(rc, 2.5)), float(np.percentile(rc, 97.5))),
        ratio=gc / gb,
        ci_low=lo,
        ci_high=hi,
        n_baseline=nb,
        n_candidate=nc,
        enough_samples=enough,
        more_requests_needed=_more_requests(nb, nc, met_b, met_c, min_tail, enough, lo, hi, target_change),
        mann_whitney_p=None,
        prob_candidate_lower=None,
        repetition_spread_widened=wide is not None,
    )


def _more_requests(
    nb: int, nc: int, met_b: int, met_c: int, min_tail: int, enough: bool, lo: float, hi: float, target_change: float
) -> int:
    if not enough:
        # the arm with fewer met requests, at its attainment; none met at all: the tail rule's count, as a floor
        need = [math.ceil((min_tail - m) * n / m) if m else min_tail for n, m in ((nb, met_b), (nc, met_c)) if m < min_tail]
        return max(need)
    if not (lo > 0 and hi > 0 and math.isfinite(hi)):
        return 0
    half_log = (math.log(hi) - math.log(lo)) / 2
    target_log = math.log(1 + (target_change if target_change > 0 else DEFAULT_TARGET_CHANGE))
    n = min(nb, nc)
    return max(math.ceil(n * (half_log / target_log) ** 2) - n, 0)


class GoodputGuardrail(BaseModel):
    """A goodput drop judged as a non-inferiority test: the whole interval must stay above ``1 - max_drop``."""

    status: Literal["within", "straddles", "beyond", "undersampled"]
    bound: float
    text: str


def goodput_guardrail(ratio: RatioResult, max_drop: float) -> GoodputGuardrail:
    """``within``: the interval lies at or above the bound (a GO may pass); ``beyond``: it lies wholly below it
    (NO-GO); ``straddles``: it crosses it (INCONCLUSIVE, ``ratio.more_requests_needed`` would resolve it);
    ``undersampled``: too few met requests, or no ratio at all, to say anything.
    """
    bound = 1.0 - max_drop
    shown = f"goodput x{ratio.ratio:.2f} (95% CI x{ratio.ci_low:.2f} to x{ratio.ci_high:.2f}), budget x{bound:.2f}"
    if not ratio.enough_samples or not all(math.isfinite(x) for x in (ratio.ratio, ratio.ci_low, ratio.ci_high)):
        need = ratio.more_requests_needed
        return GoodputGuardrail(status="undersampled", bound=bound, text=f"goodput undersampled ({need} more requests per arm)")
    if ratio.ci_low >= bound:
        return GoodputGuardrail(status="within", bound=bound, text=f"{shown}: within the budget")
    if ratio.ci_high < bound:
        return GoodputGuardrail(status="beyond", bound=bound, text=f"{shown}: dropped beyond the budget")
    return GoodputGuardrail(
        status="straddles",
        bound=bound,
        text=f"{shown}: the interval straddles the budget ({ratio.more_requests_needed} more requests per arm)",
    )
