"""Every canary decision posted to Grafana as an annotation on the canary's dashboard (rollout key ``grafana:``).

The request follows the "Create Annotation" section of Grafana's Annotations HTTP API as documented for
Grafana 12.4 (grafana.com/docs/grafana/v12.4/developer-resources/api-reference/http-api/annotations; the
same text as grafana/grafana ``docs/sources/developers/http_api/annotations.md``, the ``/api`` API that
Grafana 11 serves too and Grafana 13 keeps as "legacy" beside ``/apis``): ``POST /api/annotations`` with
``Authorization: Bearer <service-account token>`` and the JSON body ``{"dashboardUID", "time" (epoch ms),
"tags", "text"}``; the numeric ``dashboardId``, which ``dashboardUID`` replaces, is not sent. Grafana
answers 200 ``{"message": "Annotation added", "id": N}``.

What is posted: start (or resume after a restart), advance, promote, rollback (automatic, critical or
manual), pause and resume; a hold, one per window, is not (it would paint every window). ``time`` is the
decision's time as committed in the state file, so the mark on the graph and the event log agree to the
millisecond. The text names the rollout, the move ("rollback at 5 % -> 0 %"), the reasons, the pools'
pinned inventories and the dashboard's pin (``dashboard.dashboard_pin``).

How, so that Grafana can never hold a rollback back: the controller commits the decision and acts on it
(for a rollback the weight is already 0 before the commit), then hands the event to ``submit``, which only
queues it. One background task posts the queue in order, ONE try per annotation with a short timeout
(``grafana.timeout_s``, 5 s by default) and no retry: decisions are minutes apart, the event log is the
record and an annotation a convenience, and a retry loop against a Grafana that is down is load on a
service that is already in trouble. A post that fails (an HTTP status other than 2xx, a refused connection,
a timeout) becomes an ``annotation`` event in the canary's event log and a warning line; so does a
decision still queued when the canary stops and the queue's last ``timeout_s`` ran out. The token is read
once, at start, from the environment variable the rollout names; it is sent in the header and nowhere
else: not in the event, the warning, the state file or a hook's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from specguard.canary.observability.dashboard import DashboardPin, dashboard_uid
from specguard.canary.spec.grafana import GrafanaConfig
from specguard.canary.spec.rollout import Rollout
from specguard.canary.state.records import CanaryEvent
from specguard.errors import OptionError
from specguard.vllm.knowledge import VersionParseError, parse_version, version_text

__all__ = [
    "ANNOTATIONS_PATH",
    "DASHBOARD_INVENTORY",
    "BASE_TAGS",
    "FailedPost",
    "GrafanaAnnotations",
    "annotation_body",
    "annotation_kind",
    "dashboard_record",
    "inventory_text",
    "move_text",
    "pin_text",
    "read_grafana_token",
]

ANNOTATIONS_PATH = "/api/annotations"
BASE_TAGS: tuple[str, ...] = ("specguard", "canary")
# The name under which the dashboard's pin is recorded beside the pools' inventories in the state file.
DASHBOARD_INVENTORY = "grafana_dashboard"
_ANNOTATED = ("advance", "promote", "rollback", "pause", "resume")
_BODY_EXCERPT = 200  # characters of Grafana's error answer kept in the event: its message, not a page


# ---- pure: what is posted ---------------------------------------------------------------------------------


def annotation_kind(event: CanaryEvent) -> str | None:
    """The annotation's kind tag for an event, None for events that are not annotated (holds, windows, hooks...)."""
    if event.kind == "started":
        return "start"
    if event.kind == "decision" and event.decision in _ANNOTATED:
        return event.decision
    return None


def move_text(event: CanaryEvent, from_percent: float) -> str:
    """The move in words: ``rollback at 5 % -> 0 %``, ``advance 1 % -> 5 % (step 2)``, ``started at 1 % (step 1)``."""
    if event.kind == "started":
        how = "resumed" if event.details.get("resumed") else "started"
        return f"{how} at {event.percent:g} % (step {event.step + 1}), {event.details.get('status', 'running')}"
    kind = event.decision or event.kind
    if event.percent != from_percent:
        step = f" (step {event.step + 1})" if kind == "advance" else ""
        return f"{kind} at {from_percent:g} % -> {event.percent:g} %{step}"
    return f"{kind} at {event.percent:g} %"


def _model(m: Any) -> str:
    if not isinstance(m, Mapping):
        return "none"
    out = str(m.get("name"))
    if m.get("revision"):
        out += f"@{m['revision']}"
    if m.get("content_hash"):
        out += f" {str(m['content_hash'])[:19]}"
    return out


def inventory_text(inventories: Mapping[str, Mapping[str, Any]]) -> str:
    """The pools' pinned inventories in one line each: vLLM version, model and draft with their hashes, the
    speculative config as vLLM takes it. The dashboard's record is left out (the text gives it apart)."""
    lines = []
    for pool, inv in inventories.items():
        if pool == DASHBOARD_INVENTORY:
            continue
        if "error" in inv:
            lines.append(f"{pool}: no inventory ({inv['error']})")
            continue
        spec = inv.get("speculative_config")
        spec_text = json.dumps(spec, sort_keys=True, separators=(",", ":")) if spec else "none"
        lines.append(
            f"{pool}: vLLM {inv.get('vllm_version')}, model {_model(inv.get('model'))}, "
            f"draft {_model(inv.get('draft'))}, speculative {spec_text}"
        )
    return "\n".join(lines) or "no inventory recorded"


def annotation_body(
    event: CanaryEvent,
    *,
    rollout_id: str,
    dashboard: str,
    tags: list[str],
    from_percent: float,
    inventory: str,
    pin: str,
) -> dict[str, Any]:
    """The JSON body of ``POST /api/annotations`` for one decision (``annotation_kind`` must not be None)."""
    kind = annotation_kind(event)
    assert kind is not None, f"event {event.seq} ({event.kind}) is not annotated"
    reasons = "; ".join(event.reasons) or "none given"
    text = "\n".join([f"specguard canary {rollout_id}: {move_text(event, from_percent)}", f"why: {reasons}", inventory, pin])
    extra = [t for t in tags if t not in (*BASE_TAGS, rollout_id, kind)]
    return {
        "dashboardUID": dashboard,
        "time": round(event.time * 1000),
        "tags": [*BASE_TAGS, rollout_id, kind, *extra],
        "text": text,
    }


def dashboard_record(rollout: Rollout, inventories: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The dashboard the annotations go to, pinned: uid, specguard's layout version and the sha256 of the JSON
    that ``canary observability --vllm-version V`` writes for the pools' vLLM release (the candidate's, else
    the baseline's, as their inventories report it). Without a release to read, or for a dashboard of the
    operator's own (``grafana.dashboard_uid`` another uid), the record says so instead of guessing."""
    from specguard.canary.observability.dashboard import DASHBOARD_VERSION
    from specguard.canary.observability.write import dashboard_pin_for

    assert rollout.grafana is not None
    generated = dashboard_uid(rollout.name)
    uid = rollout.grafana.dashboard_uid or generated
    if uid != generated:
        return {"uid": uid, "generated_by_specguard": False, "note": f"not specguard's dashboard ({generated}): no pin"}
    versions = [str(inventories.get(p, {}).get("vllm_version") or "") for p in ("candidate", "baseline")]
    for text in versions:
        try:
            release = parse_version(text)
        except VersionParseError:
            continue
        pin = dashboard_pin_for(rollout, release)
        return {"uid": pin.uid, "version": pin.version, "sha256": pin.sha256, "vllm_version": version_text(release)}
    return {
        "uid": uid,
        "version": DASHBOARD_VERSION,
        "sha256": None,
        "note": f"no vLLM release in the pools' inventories ({', '.join(repr(v) for v in versions)}): not pinned",
    }


def pin_text(record: Mapping[str, Any]) -> str:
    """The dashboard record in the annotation's last line."""
    if record.get("sha256"):
        pin = DashboardPin(uid=str(record["uid"]), version=int(record["version"]), sha256=str(record["sha256"]))
        return f"{pin.text()} (vLLM {record.get('vllm_version')})"
    return f"dashboard {record.get('uid')}: {record.get('note', 'not pinned')}"


# ---- I/O: posting ------------------------------------------------------------------------------------------


def read_grafana_token(config: GrafanaConfig) -> str:
    """The service-account token from ``grafana.token_env``; an OptionError naming the variable (never a value)."""
    token = os.environ.get(config.token_env, "").strip()
    if not token:
        raise OptionError(f"grafana.token_env: the environment variable {config.token_env} is not set or empty")
    return token


@dataclass(frozen=True)
class FailedPost:
    """An annotation Grafana did not take: the decision it was for and why (no header, no token)."""

    event: CanaryEvent
    kind: str
    why: str
    status: int | None


class GrafanaAnnotations:
    """Posts decisions to Grafana from one background task, in the order they were committed.

    ``submit`` never waits (it queues); ``close`` gives what is queued ``timeout_s`` to go out, then reports
    the rest as not posted. ``on_failure`` is called on the event loop for each post that failed.
    """

    def __init__(
        self,
        config: GrafanaConfig,
        *,
        token: str,
        rollout_id: str,
        dashboard: str,
        on_failure: Callable[[FailedPost], None] | None = None,
    ) -> None:
        self.config = config
        self.url = config.url.rstrip("/") + ANNOTATIONS_PATH
        self.rollout_id = rollout_id
        self.dashboard = dashboard
        self.on_failure: Callable[[FailedPost], None] = on_failure or (lambda failed: None)
        self.inventory = "no inventory recorded"
        self.pin = f"dashboard {dashboard}: not pinned"
        self.posted = 0
        self._token = token
        self._queue: asyncio.Queue[tuple[CanaryEvent, float]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._current: CanaryEvent | None = None  # the one being posted
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # the token stays out of any repr a log or a traceback might print
        return f"GrafanaAnnotations(url={self.url!r}, dashboard={self.dashboard!r})"

    def pin_inventories(self, inventories: Mapping[str, Mapping[str, Any]]) -> None:
        """The pools' inventories and the dashboard's pin, as every annotation's text gives them."""
        self.inventory = inventory_text(inventories)
        record = inventories.get(DASHBOARD_INVENTORY)
        if record is not None:
            self.pin = pin_text(record)

    def submit(self, event: CanaryEvent, from_percent: float) -> None:
        """Queue a committed decision's annotation (events that are not annotated are ignored). Never blocks."""
        if annotation_kind(event) is None:
            return
        self._queue.put_nowait((event, from_percent))
        with contextlib.suppress(RuntimeError):  # no running loop yet: the queue waits for the first one
            loop = asyncio.get_running_loop()
            if self._worker is None or self._worker.done():
                self._worker = loop.create_task(self._drain(), name="grafana-annotations")

    async def _drain(self) -> None:
        while not self._queue.empty():
            event, from_percent = self._queue.get_nowait()
            self._current = event
            try:
                await self._post(event, from_percent)
            finally:
                self._current = None
                self._queue.task_done()

    async def _post(self, event: CanaryEvent, from_percent: float) -> None:
        kind = annotation_kind(event) or event.kind
        body = annotation_body(
            event,
            rollout_id=self.rollout_id,
            dashboard=self.dashboard,
            tags=self.config.tags,
            from_percent=from_percent,
            inventory=self.inventory,
            pin=self.pin,
        )
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        status: int | None = None
        try:
            async with self._session.post(self.url, json=body, headers=headers) as resp:
                status = resp.status
                if 200 <= resp.status < 300:
                    self.posted += 1
                    return
                answer = (await resp.text(errors="replace"))[:_BODY_EXCERPT].strip()
                why = f"HTTP {resp.status} from {self.url}" + (f": {answer}" if answer else "")
        except TimeoutError:
            why = f"no answer from {self.url} within {self.config.timeout_s:g} s"
        except aiohttp.ClientError as exc:
            # aiohttp's connection errors name the host and the OS error; none carries the request's headers.
            why = f"{type(exc).__name__} posting to {self.url}: {exc}"
        self.on_failure(FailedPost(event=event, kind=kind, why=why, status=status))

    def _not_posted(self, event: CanaryEvent) -> None:
        why = f"not posted: the canary stopped before Grafana ({self.url}) had taken it"
        self.on_failure(FailedPost(event=event, kind=annotation_kind(event) or event.kind, why=why, status=None))

    async def close(self) -> None:
        """Give the queue ``timeout_s`` to go out, report what is left as not posted, close the session."""
        worker = self._worker
        if worker is None and not self._queue.empty():
            self._worker = worker = asyncio.get_running_loop().create_task(self._drain())
        if worker is not None and not worker.done():
            done, _ = await asyncio.wait({worker}, timeout=self.config.timeout_s)
            if not done:
                cut = self._current
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
                if cut is not None:
                    self._not_posted(cut)
        while not self._queue.empty():
            event, _ = self._queue.get_nowait()
            self._queue.task_done()
            self._not_posted(event)
        if self._session is not None:
            await self._session.close()
            self._session = None
