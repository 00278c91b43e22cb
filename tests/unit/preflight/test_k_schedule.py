"""num_speculative_tokens_per_batch_size as vLLM's dynamic-SD validator reads it (v1/spec_decode/dynamic/utils.py)."""

from __future__ import annotations

import pytest

from specguard.preflight.k_schedule import FIELD, check_schedule
from specguard.preflight.rules import RuleContext, check_config, schedule_findings
from specguard.vllm import knowledge as K
from specguard.vllm.findings import Finding, errors

V32 = K.parse_version("0.32.0")
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _messages(findings: list[Finding], severity: str) -> list[str]:
    return [f.message for f in findings if f.severity == severity and f.key == FIELD]


def _run(schedule: list[tuple[int, int, int]], k: int = 4, method: str = "eagle3", version: str = "0.32.0") -> list[Finding]:
    return schedule_findings(schedule, k, method, version, model=EAGLE3)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([(0, 8, 4)], "Batch-size range (0, 8) must be positive."),
        ([(1, 8, 4), (9, -3, 2)], "Batch-size range (9, -3) must be positive."),
        ([(1, 8, 4), (64, 9, 2)], "Batch-size range start must be <= end for (64, 9, 2)."),
        ([(1, 8, -1)], "num_speculative_tokens_per_batch_size values must be >= 0."),
        ([(1, 8, 4), (8, 64, 2)], "Batch-size ranges must be non-overlapping and sorted."),
        ([(1, 64, 4), (9, 16, 2)], "Batch-size ranges must be non-overlapping and sorted."),
        (
            [(2, 8, 4), (9, 64, 2)],
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule.",
        ),
        ([], "num_speculative_tokens_per_batch_size must not be empty."),
    ],
)
def test_vllm_refusals_carry_vllms_text(schedule: list[tuple[int, int, int]], message: str) -> None:
    findings = _run(schedule)
    assert _messages(findings, "error") == [message]
    assert all(f.fix and f.rule for f in errors(findings))


@pytest.mark.parametrize(
    "schedule",
    [
        [(1, 16, 4), (17, 64, 2), (65, 512, 0)],  # the k=0 band means no drafts there, which vLLM allows
        [(9, 64, 2), (1, 8, 4)],  # vLLM sorts by start before its overlap test
        [(1, 1, 4)],  # one-size bands: the range is inclusive
        [(1, 1, 4), (2, 2, 3)],  # adjacent inclusive bands do not overlap
    ],
)
def test_schedules_vllm_takes_have_no_findings(schedule: list[tuple[int, int, int]]) -> None:
    assert _run(schedule) == []


def test_k_above_num_speculative_tokens_is_capped_with_a_warning() -> None:
    findings = _run([(1, 8, 6), (9, 64, 2)], k=4)
    assert not errors(findings)
    [warning] = _messages(findings, "warning")
    assert "[1, 8, 6]" in warning and "vLLM drafts 4" in warning


def test_a_gap_warns_with_the_k_carried_into_it() -> None:
    [warning] = _messages(_run([(1, 8, 6), (17, 64, 2)], k=4), "warning")[1:]
    assert warning.startswith("batch sizes 9-16 are in no band") and "k=4" in warning  # min(4, 6), as vLLM fills it


def test_every_band_zero_warns() -> None:
    assert any("no batch size speculates" in m for m in _messages(_run([(1, 8, 0), (9, 64, 0)]), "warning"))


@pytest.mark.parametrize(("method", "warned"), [("eagle", False), ("eagle3", False), ("ngram", True), ("mtp", True)])
def test_methods_outside_the_documented_ones_warn(method: str, warned: bool) -> None:
    findings = check_schedule([(1, 8, 2)], 4, method, V32)
    assert bool(_messages(findings, "warning")) is warned


def test_field_is_unknown_before_0_25() -> None:
    findings = _run([(1, 8, 2)], method="ngram", version="0.20.0")
    assert [f.key for f in errors(findings)] == [FIELD] and "unknown key" in errors(findings)[0].message


def test_0_25_checks_the_untyped_value_itself() -> None:
    ctx = RuleContext(version=K.parse_version("0.25.0"))
    cfg = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 4}
    four = check_config({**cfg, FIELD: [[1, 8, 1, 4]]}, ctx)
    assert _messages(four, "error") == [
        "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
        "(range_start, range_end, num_speculative_tokens)."
    ]
    assert _messages(check_config({**cfg, FIELD: [[3, 8, 2]]}, ctx), "error")[0].startswith("The first batch-size")


def test_0_32_leaves_ill_typed_schedules_to_the_type_rule() -> None:
    findings = _run([(1, 8, 1, 4)])  # type: ignore[list-item]
    assert len(errors(findings)) == 1 and "list of [start, end, k] triples" in errors(findings)[0].message


def test_schedule_findings_is_check_config_on_the_whole_config() -> None:
    schedule = [(0, 8, 4)]
    cfg = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 4, FIELD: [[0, 8, 4]]}
    assert _run(schedule) == check_config(cfg, RuleContext(version=V32))
    without_model = schedule_findings([(1, 8, 4)], 4, "eagle3", "0.32.0")
    assert [f.key for f in errors(without_model)] == ["model"]


def test_a_one_size_gap_warns() -> None:
    assert any(m.startswith("batch sizes 9-9 ") for m in _messages(_run([(1, 8, 4), (10, 64, 2)]), "warning"))
