"""What a decision's Grafana annotation says (pure), and the dashboard's pin that it and the command give."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from specguard.canary.notify.grafana import (
    DASHBOARD_INVENTORY,
    annotation_body,
    annotation_kind,
    dashboard_record,
    inventory_text,
    move_text,
    pin_text,
)
from specguard.canary.observability import dashboard_pin_for, observability_files
from specguard.canary.observability.dashboard import dashboard_pin
from specguard.canary.spec.rollout import Rollout
from specguard.canary.state.records import CanaryEvent
from specguard.cli.app import app
from specguard.inventory.model import Inventory, ModelIdentity

V032 = (0, 32, 0)


def event(kind: str, decision: str | None = None, *, percent: float = 5.0, step: int = 1, **details: Any) -> CanaryEvent:
    fields = {"seq": 7, "time": 1_700_000_123.4567, "kind": kind, "decision": decision, "step": step, "percent": percent}
    return CanaryEvent.model_validate(fields | {"reasons": ["r1", "r2"], "details": details})


def rollout(**grafana: Any) -> Rollout:
    return Rollout.model_validate(
        {
            "name": "fleet",
            "pools": {"baseline": {"servers": ["http://a:1"]}, "candidate": {"servers": ["http://b:1"]}},
            "admin": {"token_env": "T"},
            "grafana": {"url": "http://grafana:3000", "token_env": "G"} | grafana,
        }
    )


def inventory(spec: dict[str, Any] | None) -> dict[str, Any]:
    return Inventory(
        specguard_version="test",
        recorded_at="2026-01-01T00:00:00Z",
        source="test",
        vllm_version="0.32.0",
        model=ModelIdentity(name="/models/target", revision="abc123", content_hash="sha256:" + "f" * 64),
        draft=ModelIdentity(name="/models/draft") if spec else None,
        speculative_config=spec,
    ).model_dump(mode="json")


def test_decisions_that_move_the_rollout_are_annotated_and_holds_are_not() -> None:
    assert annotation_kind(event("started")) == "start"
    for d in ("advance", "promote", "rollback", "pause", "resume"):
        assert annotation_kind(event("decision", d)) == d
    assert annotation_kind(event("decision", "hold")) is None
    for kind in ("window", "critical", "manual", "hook", "stopped", "annotation"):
        assert annotation_kind(event(kind)) is None


def test_the_move_says_from_and_to() -> None:
    assert move_text(event("decision", "rollback", percent=0.0), 5.0) == "rollback at 5 % -> 0 %"
    assert move_text(event("decision", "advance", percent=10.0, step=2), 5.0) == "advance at 5 % -> 10 % (step 3)"
    assert move_text(event("decision", "promote", percent=100.0), 100.0) == "promote at 100 %"
    assert move_text(event("started", percent=1.0, step=0, resumed=False, status="running"), 1.0).startswith("started at 1 %")
    assert move_text(event("started", resumed=True, status="paused"), 5.0) == "resumed at 5 % (step 2), paused"


def test_the_body_is_grafanas_create_annotation_with_the_committed_time() -> None:
    e = event("decision", "rollback", percent=0.0)
    body = annotation_body(
        e, rollout_id="fleet", dashboard="specguard-fleet", tags=["prod", "canary"], from_percent=5.0, inventory="INV", pin="PIN"
    )
    assert set(body) == {"dashboardUID", "time", "tags", "text"}
    assert body["dashboardUID"] == "specguard-fleet"
    assert body["time"] == round(e.time * 1000) and isinstance(body["time"], int)
    assert body["tags"] == ["specguard", "canary", "fleet", "rollback", "prod"], "the extra tags follow, once each"
    assert body["text"].splitlines() == ["specguard canary fleet: rollback at 5 % -> 0 %", "why: r1; r2", "INV", "PIN"]


def test_the_inventory_line_names_versions_hashes_and_the_speculative_config() -> None:
    spec = {"method": "eagle", "model": "/models/draft", "num_speculative_tokens": 3}
    text = inventory_text({"baseline": inventory(None), "candidate": inventory(spec), "control": {"error": "no answer"}})
    base, cand, control = text.splitlines()
    assert base.startswith("baseline: vLLM 0.32.0, model /models/target@abc123 sha256:ffff") and "speculative none" in base
    assert cand.startswith("candidate: vLLM 0.32.0") and json.dumps(spec, sort_keys=True, separators=(",", ":")) in cand
    assert control == "control: no inventory (no answer)"
    assert inventory_text({DASHBOARD_INVENTORY: {"uid": "x"}}) == "no inventory recorded"


def test_the_pin_is_the_sha256_of_the_canonical_dashboard_json() -> None:
    text = observability_files(rollout(), V032)["dashboard.json"]
    doc = json.loads(text)
    pin = dashboard_pin(doc)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert pin.sha256 == hashlib.sha256(canonical).hexdigest()
    assert (pin.uid, pin.version) == (doc["uid"], doc["version"])
    assert dashboard_pin(json.loads(json.dumps(doc, indent=None))) == pin, "indentation does not change the pin"
    assert dashboard_pin_for(rollout(), V032) == pin
    assert dashboard_pin_for(rollout(), (0, 9, 0)).sha256 != pin.sha256, "another release, another dashboard"


def test_the_canary_records_the_pin_of_the_dashboard_for_the_pools_release() -> None:
    pin = dashboard_pin_for(rollout(), V032)
    record = dashboard_record(rollout(), {"baseline": inventory(None), "candidate": {"vllm_version": "0.32.0+cpu"}})
    assert record == {"uid": pin.uid, "version": pin.version, "sha256": pin.sha256, "vllm_version": "0.32.0"}
    assert pin_text(record) == f"dashboard {pin.uid} v{pin.version} sha256:{pin.sha256[:12]} (vLLM 0.32.0)"
    unknown = dashboard_record(rollout(), {"baseline": {"vllm_version": "scripted"}, "candidate": {"error": "x"}})
    assert unknown["uid"] == pin.uid and unknown["sha256"] is None and "not pinned" in unknown["note"]
    own = dashboard_record(rollout(dashboard_uid="ops-board"), {"candidate": {"vllm_version": "0.32.0"}})
    assert own["uid"] == "ops-board" and "sha256" not in own and "no pin" in pin_text(own)


def test_the_command_prints_the_pin_of_the_file_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "rollout.yaml"
    path.write_text(yaml.safe_dump(rollout().model_dump(mode="json", exclude_defaults=True) | {"admin": {"token_env": "T"}}))
    out = tmp_path / "obs"
    r = CliRunner().invoke(app, ["canary", "observability", str(path), "--vllm-version", "0.32.0", "--out", str(out)])
    assert r.exit_code == 0, r.output
    written = dashboard_pin(json.loads((out / "dashboard.json").read_text()))
    assert f"dashboard uid {written.uid}, version {written.version}, sha256 {written.sha256}" in r.stderr
    assert written.sha256 not in r.stdout, "stdout stays one written path per line"
