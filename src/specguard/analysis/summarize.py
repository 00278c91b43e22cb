"""A run's summary from its records and scrapes. Pure: the caller reads and writes the files."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from specguard.analysis.client_stalls import client_stalls
from specguard.analysis.definitions import METRIC_DEFINITIONS
from specguard.analysis.gpu_usage import gpu_usage
from specguard.analysis.percentiles import percentiles
from specguard.analysis.proportions import wilson_interval
from specguard.analysis.request_metrics import inter_chunk_gaps, measured_window, per_token_itl, tpot
from specguard.analysis.slo import slo_attainment
from specguard.results.models import (
    Acceptance,
    ClientStalls,
    GaugeSeries,
    GpuSample,
    GpuUsage,
    MetricsSample,
    Percentiles,
    RequestRecord,
    Slo,
    Summary,
    TokenSource,
    WarningNote,
)
from specguard.server_metrics.parse import acceptance, counter_delta, has_spec_decode


class ClientLagLimits(BaseModel):
    """Above these the client, not the server, may be shaping the results."""

    send_lag_p99_ms: float = 10.0
    event_loop_lag_p99_ms: float = 10.0
    # Half the TTFT error the client is allowed (2 ms at p99) would already be spent at 1 ms; 5 ms is late by any reading.
    read_lag_p99_ms: float = 5.0
    # "p99 above the limit" is "more than 1 % of reads late": the warning asks that share to be shown at this
    # one-sided confidence (Wilson), not read off the two largest of a 1-second run's ~100 probe samples. An idle
    # client on a 2-core CI machine had 2 such samples of 5.1 and 6 ms in 100 (p99 5.1 ms); a loop busy 80 ms in
    # every 100 has ~80 in 100.
    read_lag_late_share: float = 0.01
    read_lag_z: float = 2.326


def _gauge(samples: Sequence[MetricsSample], name: str) -> GaugeSeries | None:
    vals = [s.gauges[name] for s in samples if s.ok and name in s.gauges]
    if not vals:
        return None
    return GaugeSeries(samples=len(vals), mean=sum(vals) / len(vals), max=max(vals))


@dataclass
class _ClientTiming:
    """What the client measured on the successful requests."""

    itl: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    tokens_per_chunk: list[int] = field(default_factory=list)
    tpots: list[float] = field(default_factory=list)


@dataclass
class _ServerWindow:
    """What the server's counters say between the run's first and last scrape."""

    acceptance: Acceptance | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    finished: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[WarningNote] = field(default_factory=list)


def summarize(
    records: Sequence[RequestRecord],
    samples: Sequence[MetricsSample],
    *,
    interrupted: bool = False,
    incomplete: bool = False,
    loop_lags_s: Sequence[float] = (),
    read_lags_s: Sequence[float] | None = None,
    stalls_s: Sequence[tuple[float, float]] | None = None,
    limits: ClientLagLimits | None = None,
    slo: Slo | None = None,
    gpu_samples: Sequence[GpuSample] = (),
) -> Summary:
    """``read_lags_s``: the read probe's lags (loadgen/read_probe; None when it did not run).

    ``stalls_s``: the client's stalls as the run saw them (None when unknown: a summary recomputed from disk).

    ``slo``: count goodput and SLO attainment against these, over the same window as the throughputs.

    ``gpu_samples``: the run's gpu_metrics.jsonl (none: the GPUs were not sampled, ``gpu`` is None).
    """
    limits = limits or ClientLagLimits()
    ok = [r for r in records if r.ok]
    errors = len(records) - len(ok)
    timing = _client_timing(ok)
    duration = measured_window(records)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    server = _server_window(records, samples)
    scrape_gaps = sum(1 for s in samples if not s.ok)
    sources = Counter(r.token_source for r in ok)
    send_lag = percentiles([r.send_lag_s for r in records], 1000.0)
    loop_lag = percentiles(loop_lags_s, 1000.0)
    read_lag = percentiles(read_lags_s, 1000.0) if read_lags_s else None
    kinds = error_kinds(records)
    stalls = client_stalls(records, stalls_s) if stalls_s is not None else None
    gpu = gpu_usage(gpu_samples)
    notes = [
        *server.warnings,
        *_scrape_warnings(scrape_gaps),
        *_token_source_warnings(sources),
        *_lag_warnings(send_lag, loop_lag, limits),
        *_read_lag_warnings(read_lag, read_lags_s or (), limits),
        *_stall_warnings(stalls, len(records)),
        *_run_warnings(interrupted, incomplete),
        *_error_warnings(len(records), errors, kinds),
    ]
    return Summary(
        requests=len(records),
        errors=errors,
        error_rate=errors / len(records) if records else 0.0,
        interrupted=interrupted,
        incomplete=incomplete,
        error_kinds=kinds,
        duration_s=duration,
        request_rate=len(records) / duration if records else 0.0,
        output_tokens=out_tokens,
        output_tokens_per_s=out_tokens / duration if records else 0.0,
        slo=slo_attainment(records, slo, duration) if slo is not None else None,
        ttft_ms=percentiles([r.ttft_s for r in ok if r.ttft_s is not None], 1000.0),
        itl_ms=percentiles(timing.itl, 1000.0),
        tpot_ms=percentiles(timing.tpots, 1000.0),
        e2e_ms=percentiles([r.e2e_s for r in ok if r.e2e_s is not None], 1000.0),
        inter_chunk_ms=percentiles(timing.gaps, 1000.0),
        tokens_per_chunk=percentiles(timing.tokens_per_chunk),
        send_lag_ms=send_lag,
        event_loop_lag_ms=loop_lag,
        read_lag_ms=read_lag,
        client_stalls=stalls,
        acceptance=server.acceptance,
        kv_cache_usage=_gauge(samples, "kv_cache_usage"),
        requests_running=_gauge(samples, "requests_running"),
        requests_waiting=_gauge(samples, "requests_waiting"),
        preemptions=server.preemptions,
        gpu=gpu,
        finished_by_reason=server.finished,
        server_generation_tokens=server.generation_tokens,
        token_sources={str(k): v for k, v in sources.items()},
        segments=dict(Counter(r.segment for r in records)),
        scrape_gaps=scrape_gaps,
        notes=server.notes + _gpu_notes(gpu),
        warnings=[n.text for n in notes],
        warning_notes=notes,
        definitions=METRIC_DEFINITIONS,
    )


def _client_timing(ok: Sequence[RequestRecord]) -> _ClientTiming:
    timing = _ClientTiming()
    for r in ok:
        timing.itl.extend(per_token_itl(r.chunk_times_s, r.chunk_tokens))
        timing.gaps.extend(inter_chunk_gaps(r.chunk_times_s))
        timing.tokens_per_chunk.extend(r.chunk_tokens)
        v = tpot(r.ttft_s, r.e2e_s, r.output_tokens)
        if v is not None:
            timing.tpots.append(v)
    return timing


def _server_window(records: Sequence[RequestRecord], samples: Sequence[MetricsSample]) -> _ServerWindow:
    """Counter deltas between the "before" and "after" scrapes (the first and last good ones if those are missing)."""
    window = _ServerWindow()
    good = [s for s in samples if s.ok]
    before = next((s for s in good if s.phase == "before"), good[0] if good else None)
    after = next((s for s in reversed(good) if s.phase == "after"), good[-1] if good else None)
    pair = (before, after) if before is not None and after is not None and before is not after else None
    acc = window.acceptance = acceptance(*pair) if pair else None
    if not good:
        window.notes.append("no /metrics scrape succeeded: no server-side figures (acceptance, KV usage, queue)")
    elif after is not None and not has_spec_decode(after):  # never None here (good is not empty): says so to mypy
        window.notes.append("the server exposes no spec-decode counters: speculative decoding is off on this server")
    elif acc is not None and acc.drafts == 0:
        window.notes.append("spec-decode counters present but no drafts were made in this run window")
    if acc is not None and acc.rate is not None and acc.rate < 0.5:
        text = f"acceptance rate {acc.rate:.2f} is below 0.5: speculation is likely net-negative here"
        window.warnings.append(WarningNote(kind="low_acceptance", text=text, value=round(acc.rate, 2), limit=0.5))
    if pair:
        before, after = pair
        window.generation_tokens = counter_delta(before, after, "generation_tokens")
        window.preemptions = counter_delta(before, after, "preemptions")
        for reason, v in after.finished_by_reason.items():
            window.finished[reason] = v - before.finished_by_reason.get(reason, 0.0)
        _foreign_traffic(records, window.finished, window.generation_tokens, window.warnings)
    return window


def _gpu_notes(gpu: GpuUsage | None) -> list[str]:
    if gpu is not None and not gpu.available:
        return [f"GPU figures not available: {gpu.reason}"]
    if gpu is not None and gpu.gaps:
        return [f"{gpu.gaps} GPU sample(s) failed ({gpu.reason}): gaps in the GPU series"]
    return []


def _scrape_warnings(gaps: int) -> list[WarningNote]:
    text = f"{gaps} /metrics scrape(s) failed or were unparsable: gaps in the server series"
    return [WarningNote(kind="scrape_gaps", text=text, value=gaps)] if gaps else []


def _token_source_warnings(sources: Counter[TokenSource | None]) -> list[WarningNote]:
    if any(src != "server_usage" for src in sources):
        text = "some token counts are not the server's (token_sources): per-token ITL and TPOT are approximate"
        return [WarningNote(kind="approximate_tokens", text=text)]
    return []


def _lag_warnings(send_lag: Percentiles, loop_lag: Percentiles, limits: ClientLagLimits) -> list[WarningNote]:
    warnings = []
    if send_lag.p99 is not None and send_lag.p99 > limits.send_lag_p99_ms:
        text = (
            f"client send lag p99 {send_lag.p99:.1f} ms exceeds {limits.send_lag_p99_ms:g} ms: "
            "the client did not release requests on time; the offered load was lower than planned"
        )
        value, limit = round(send_lag.p99, 1), limits.send_lag_p99_ms
        warnings.append(WarningNote(kind="client_send_lag", text=text, value=value, limit=limit))
    if loop_lag.p99 is not None and loop_lag.p99 > limits.event_loop_lag_p99_ms:
        text = (
            f"client event-loop lag p99 {loop_lag.p99:.1f} ms exceeds {limits.event_loop_lag_p99_ms:g} ms: "
            "the client may be the bottleneck and its timestamps late"
        )
        value, limit = round(loop_lag.p99, 1), limits.event_loop_lag_p99_ms
        warnings.append(WarningNote(kind="client_event_loop_lag", text=text, value=value, limit=limit))
    return warnings


def _read_lag_warnings(read_lag: Percentiles | None, lags_s: Sequence[float], limits: ClientLagLimits) -> list[WarningNote]:
    if read_lag is None or read_lag.p99 is None or read_lag.p99 <= limits.read_lag_p99_ms:
        return []
    late = sum(1 for lag in lags_s if lag * 1000.0 > limits.read_lag_p99_ms)
    low, _ = wilson_interval(late, len(lags_s), limits.read_lag_z)
    if low <= limits.read_lag_late_share:
        return []
    text = (
        f"client read-stamp lag p99 {read_lag.p99:.1f} ms exceeds {limits.read_lag_p99_ms:g} ms ({late} of {len(lags_s)} "
        f"probe reads late, worst {read_lag.max or read_lag.p99:.0f} ms): reads were stamped late, so TTFT and ITL carry "
        "the client's delay; the client may be the bottleneck (give it its own core, or fewer streams)"
    )
    return [WarningNote(kind="client_read_lag", text=text, value=round(read_lag.p99, 1), limit=limits.read_lag_p99_ms)]


def _stall_warnings(stalls: ClientStalls | None, requests: int) -> list[WarningNote]:
    if stalls is None or stalls.requests_affected == 0:
        return []
    text = (
        f"{stalls.requests_affected} of {requests} requests were streaming while the client stalled "
        f"(the event loop woke {stalls.threshold_ms:g} ms or more late, {stalls.count} times, longest "
        f"{stalls.longest_ms:.0f} ms): their chunks were read together, so their TTFT and ITL carry the client's delay"
    )
    longest = round(stalls.longest_ms) if stalls.longest_ms is not None else None
    return [WarningNote(kind="client_stalls", text=text, value=longest, limit=stalls.threshold_ms)]


def _run_warnings(interrupted: bool, incomplete: bool) -> list[WarningNote]:
    warnings = []
    if interrupted:
        text = "the run was interrupted: figures cover the requests finished before it stopped"
        warnings.append(WarningNote(kind="interrupted", text=text))
    if incomplete:
        text = "incomplete run: no summary.json was written (the run was killed); recomputed from requests.jsonl"
        warnings.append(WarningNote(kind="incomplete", text=text))
    return warnings


def _error_warnings(requests: int, errors: int, kinds: dict[str, int]) -> list[WarningNote]:
    if requests and errors == requests:
        return [WarningNote(kind="all_failed", text=f"every request failed: {format_error_kinds(kinds)}", value=errors)]
    if errors:
        text = f"{errors} of {requests} requests failed: {format_error_kinds(kinds)}"
        return [WarningNote(kind="requests_failed", text=text, value=errors)]
    return []


def error_kinds(records: Sequence[RequestRecord]) -> dict[str, int]:
    """Failed requests per distinct error message, most frequent first."""
    counts = Counter(r.error or "failed without a message" for r in records if not r.ok)
    return dict(counts.most_common())


def format_error_kinds(kinds: dict[str, int], most: int = 3) -> str:
    shown = [f"{n} x {message}" for message, n in list(kinds.items())[:most]]
    more = len(kinds) - most
    return "; ".join(shown) + (f"; and {more} other distinct error(s)" if more > 0 else "")


def _foreign_traffic(
    records: Sequence[RequestRecord],
    finished: dict[str, float],
    gen_tokens: float | None,
    warnings: list[WarningNote],
) -> None:
    """Warn when the server's counters moved more than this run's own requests explain."""
    server_finished = sum(finished.values())
    ours = len(records)
    if server_finished > ours:
        text = (
            f"foreign traffic: the server finished {server_finished:.0f} requests in the run window but this run "
            f"sent {ours}; server-side figures (acceptance, KV usage, queue) are contaminated"
        )
        warnings.append(WarningNote(kind="foreign_traffic", text=text))
        return
    if gen_tokens is not None and all(r.ok and r.token_source == "server_usage" for r in records):
        ours_tokens = sum(r.output_tokens or 0 for r in records)
        if gen_tokens > ours_tokens:
            text = (
                f"foreign traffic: the server generated {gen_tokens:.0f} tokens in the run window but this run "
                f"received {ours_tokens}; server-side figures are contaminated"
            )
            warnings.append(WarningNote(kind="foreign_traffic", text=text))
