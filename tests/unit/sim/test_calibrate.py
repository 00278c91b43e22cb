"""sim calibrate: the linear step-time profile recovered from run directories simulated with a known one."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specguard.errors import InputFileError, OutputExistsError, UsageError
from specguard.results.models import RequestRecord
from specguard.results.run_dir import RunDir
from specguard.results.store import read_jsonl
from specguard.sim.calibrate import CalibrationReport, calibrate, load_profile, save_profile, sim_profile
from specguard.sim.step_time import LinearProfile

from .synthetic_runs import TRUE, write_run


def ratios(p: LinearProfile) -> tuple[float, float, float]:
    return (p.fixed_s / TRUE.fixed_s, p.per_kv_token_s / TRUE.per_kv_token_s, p.per_batched_token_s / TRUE.per_batched_token_s)


def fit(tmp: Path, **kw: object) -> CalibrationReport:
    return calibrate([write_run(tmp / "base", seed=1, **kw), write_run(tmp / "spec", k=3, seed=2, **kw)])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def exact(tmp_path_factory: pytest.TempPathFactory) -> CalibrationReport:
    return fit(tmp_path_factory.mktemp("exact"))


def test_exact_runs_give_back_the_coefficients(exact: CalibrationReport) -> None:
    # Measured: 1.000 / 1.000 / 1.000 of the truth (median APE below 1e-4).
    assert ratios(exact.profile) == pytest.approx((1, 1, 1), abs=0.01)
    assert exact.error.median_ape < 0.001
    assert exact.error.p90_ape < 0.001
    assert exact.r2 > 0.99


def test_runs_are_told_apart_by_their_counters(exact: CalibrationReport) -> None:
    base, spec = exact.runs
    assert (base.kind, spec.kind) == ("baseline", "speculative")
    assert base.draft_tokens_per_step == 0.0
    assert spec.draft_tokens_per_step == pytest.approx(3.0)
    assert base.steps_used > 1000 and spec.steps_used > 1000
    assert exact.error.gaps == base.steps_used + spec.steps_used
    assert (exact.served_model, exact.server_version) == ("org/target", "0.32.0")


def test_one_baseline_run_alone_is_enough(tmp_path: Path) -> None:
    report = calibrate([write_run(tmp_path / "b", seed=3)])
    assert ratios(report.profile) == pytest.approx((1, 1, 1), abs=0.05)


def test_client_jitter_raises_the_fit_error_but_not_the_coefficients(tmp_path: Path, exact: CalibrationReport) -> None:
    noisy = fit(tmp_path, jitter_s=0.0005)  # up to ~1 ms late per chunk, on steps of 8-30 ms
    # Measured 0.998 / 0.990 / 0.999, median APE 1.8 %.
    assert ratios(noisy.profile) == pytest.approx((1, 1, 1), abs=0.10)
    assert noisy.error.median_ape > 5 * exact.error.median_ape
    assert noisy.error.median_ape > 0.01
    assert noisy.r2 < exact.r2


def test_gaps_spanning_two_steps_are_dropped(tmp_path: Path) -> None:
    merged = fit(tmp_path, merge=0.1)  # the server grouped 10 % of the chunks with the next one
    # Measured 1.000 / 1.000 / 1.000; without the filters 1.10 / 0.84 / 1.08.
    assert ratios(merged.profile) == pytest.approx((1, 1, 1), abs=0.02)
    assert all(r.steps_dropped > 0 for r in merged.runs)
    assert merged.error.median_ape < 0.01


def test_a_run_where_every_request_failed_is_named(tmp_path: Path, exact: CalibrationReport) -> None:
    good, bad = write_run(tmp_path / "good", seed=1), write_run(tmp_path / "failed", fail_all=True)
    with pytest.raises(InputFileError, match=rf"{bad}: no usable chunk timelines \(120 requests, 0 succeeded"):
        calibrate([good, bad])


def test_a_run_without_streamed_tokens_is_named(tmp_path: Path) -> None:
    run = write_run(tmp_path / "nostream", seed=1)
    path = run / RunDir.REQUESTS
    records = read_jsonl(path, RequestRecord)
    # a non-streaming response: one chunk carrying every token
    lines = [r.model_copy(update={"chunk_times_s": r.chunk_times_s[-1:], "chunk_tokens": [sum(r.chunk_tokens)]}) for r in records]
    path.write_text("".join(r.model_dump_json() + "\n" for r in lines))
    with pytest.raises(InputFileError, match=str(run)):
        calibrate([run])


def test_too_few_gaps_say_how_many(tmp_path: Path) -> None:
    run = write_run(tmp_path / "short", requests=2, output_range=(4, 5), seed=1)
    with pytest.raises(UsageError, match=r"only 6 usable gaps .* needs 20"):
        calibrate([run])


def test_runs_of_different_models_are_refused(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", seed=1)
    b = write_run(tmp_path / "b", seed=2)
    info = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps({**info, "model": "org/other"}))
    with pytest.raises(UsageError, match="differ in model"):
        calibrate([a, b])


def test_profile_file_round_trips_and_is_not_overwritten(tmp_path: Path, exact: CalibrationReport) -> None:
    created = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    profile = sim_profile(exact, created)
    path = tmp_path / "profile.json"
    save_profile(path, profile)
    loaded = load_profile(path)
    assert loaded == profile
    assert loaded.schema_version == "specguard.sim_profile/1"
    assert loaded.source_runs == [r.path for r in exact.runs]
    assert (loaded.served_model, loaded.server_version) == ("org/target", "0.32.0")
    with pytest.raises(OutputExistsError, match=str(path)):
        save_profile(path, profile)
    later = profile.model_copy(update={"r2": 0.5})
    save_profile(path, later, force=True)
    assert load_profile(path).r2 == 0.5


def test_a_bad_profile_file_names_the_file_and_key(tmp_path: Path, exact: CalibrationReport) -> None:
    path = tmp_path / "profile.json"
    data = json.loads(sim_profile(exact).model_dump_json())
    data["profile"]["fixed_s"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(InputFileError, match=rf"{path}: .*key 'profile.fixed_s'"):
        load_profile(path)
    path.write_text(json.dumps({**data, "schema_version": "specguard.sim_profile/9"}))
    with pytest.raises(InputFileError, match=r"key 'schema_version'"):
        load_profile(path)
    with pytest.raises(InputFileError, match="not found"):
        load_profile(tmp_path / "missing.json")
