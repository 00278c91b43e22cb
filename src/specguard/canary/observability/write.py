"""The three files of ``specguard canary observability``: rendered together (pure), then written.

Nothing is written until all three are rendered; an existing file is replaced only with ``force``, each
through a temporary file and a rename, so Prometheus reloading the directory never reads half a file.
``dashboard_pin_for`` is the dashboard's pin (uid, version, sha256 of its JSON), which the command prints
and a canary with ``grafana:`` records: both render the dashboard through ``observability_files``' path.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from specguard import __version__
from specguard.canary.observability.alerts import DEFAULT_RUNBOOK, alerting_rules
from specguard.canary.observability.conventions import POOL_LABEL, scrape_config_lines
from specguard.canary.observability.dashboard import DashboardPin, dashboard, dashboard_pin
from specguard.canary.observability.recording import RecordingPlan, recording_rules
from specguard.canary.observability.rule_tests import TEST_FILE, rule_tests
from specguard.canary.observability.rulefile import RuleFile, render_rule_file
from specguard.canary.spec.rollout import Rollout
from specguard.results.store import refuse_overwrite, write_text_files
from specguard.vllm.knowledge import Version, version_text

__all__ = [
    "ALERTING_FILE",
    "DASHBOARD_FILE",
    "RECORDING_FILE",
    "dashboard_pin_for",
    "observability_files",
    "write_observability",
]

RECORDING_FILE = "recording-rules.yaml"
ALERTING_FILE = "alerting-rules.yaml"
DASHBOARD_FILE = "dashboard.json"


def _header(rollout: Rollout, plan: RecordingPlan, what: str) -> list[str]:
    lines = [
        f"{what} for the canary {rollout.name!r}, vLLM {version_text(plan.release)}: written by specguard {__version__}",
        "(`specguard canary observability`); regenerate rather than edit.",
        "",
        f"Pools: every vLLM series needs the target label {POOL_LABEL} (baseline, candidate or control), added by",
        "the scrape configuration; the proxy's own series carry `pool`, copied into it. Behind HAProxy or a Gateway",
        "no proxy runs: the error ratio is the engine's counters', and the admin API exports the controller's series.",
        "For this rollout:",
        *(f"  {line}" for line in scrape_config_lines(rollout)),
        "",
        f"Rates over {plan.windows.rate} (the analysis window, at least 60 s); budget alerts hold for {plan.windows.hold}",
        f"({rollout.analysis.rollback_windows} windows, as the controller rolls back). Aggregated by {', '.join(plan.group)}.",
    ]
    if plan.omitted:
        lines.append(f"Left out (not exposed by this release): {'; '.join(plan.omitted)}.")
    return lines


def _tests_text(rollout: Rollout, plan: RecordingPlan, alerting: RuleFile) -> str:
    doc, not_driven = rule_tests(rollout, plan, alerting, [RECORDING_FILE, ALERTING_FILE])
    header = [
        f"promtool unit tests for the canary {rollout.name!r}'s alerts: written by specguard {__version__}.",
        "Each alert fires on series past its budget and stays quiet on series within it. Rerun after editing the rules:",
        f"  promtool test rules {TEST_FILE}",
    ]
    if not_driven:
        header.append(f"Not driven here: {'; '.join(not_driven)}.")
    body = str(yaml.safe_dump(doc, sort_keys=False, width=1_000_000, allow_unicode=True))
    return "\n".join(f"# {line}".rstrip() for line in header) + "\n" + body


def observability_files(
    rollout: Rollout, release: Version, *, runbook: str = DEFAULT_RUNBOOK, with_tests: bool = False
) -> dict[str, str]:
    """Each file's name and text, pure. ``runbook``: where each alert's runbook_url points (RUNBOOK.md and a
    section); ``with_tests``: also ``rules-test.yaml``, promtool tests that drive each alert."""
    recording, plan = recording_rules(rollout, release)
    alerting = alerting_rules(rollout, plan, runbook)
    tests = {TEST_FILE: _tests_text(rollout, plan, alerting)} if with_tests else {}
    return {
        RECORDING_FILE: render_rule_file(_header(rollout, plan, "Recording rules"), recording),
        ALERTING_FILE: render_rule_file(
            [*_header(rollout, plan, "Alerting rules"), f"Load with {RECORDING_FILE}: the alerts read its series."], alerting
        ),
        DASHBOARD_FILE: json.dumps(dashboard(rollout, plan), indent=2) + "\n",
        **tests,
    }


def dashboard_pin_for(rollout: Rollout, release: Version) -> DashboardPin:
    """The pin of the dashboard ``observability_files`` writes for this rollout and release, pure."""
    _, plan = recording_rules(rollout, release)
    return dashboard_pin(dashboard(rollout, plan))


def write_observability(
    rollout: Rollout,
    release: Version,
    out_dir: Path,
    force: bool = False,
    *,
    runbook: str = DEFAULT_RUNBOOK,
    with_tests: bool = False,
) -> list[Path]:
    """Write the recording rules, the alerting rules, the dashboard (and the rule tests) into ``out_dir``; the paths."""
    files = observability_files(rollout, release, runbook=runbook, with_tests=with_tests)
    out_dir = out_dir.absolute()
    refuse_overwrite(out_dir, list(files), force)
    return write_text_files(out_dir, files)
