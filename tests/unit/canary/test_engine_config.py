"""The rollout file's ``engine:`` key: proxy by default, haproxy and gateway-api validated, errors naming file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.canary.spec.engine import INFERENCE_POOL_GROUP, GatewayApiEngine, HAProxyEngine, ProxyEngine
from specguard.canary.spec.rollout import PROXY_ONLY_KEYS, RolloutError, load_rollout
from tests.canary_harness import MINIMAL_ROLLOUT

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

POOLS = MINIMAL_ROLLOUT

GATEWAY = """\
engine:
  type: gateway-api
  route: llama-canary
  namespace: inference
  gateway: {name: inference-gateway, namespace: gateways, sectionName: http}
  backends:
    baseline: {kind: Service, name: vllm-baseline, port: 8000}
    candidate: {kind: InferencePool, name: vllm-speculative}
  out_dir: routes
"""

HAPROXY = """\
engine:
  type: haproxy
  socket: /run/haproxy/admin.sock
  backend: vllm
  baseline_servers: [baseline-1, baseline-2]
  candidate_servers: [speculative-1]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rollout.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """The 1-based line of the ``nth`` line containing ``needle``: where the error must point."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return hits[nth - 1]


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(RolloutError) as err:
        load_rollout(write(tmp_path, text))
    return str(err.value)


@pytest.mark.parametrize("example", ["rollout-embedded.yaml", "rollout-gpu-fleet.yaml"])
def test_existing_rollout_files_still_load_and_use_the_proxy(example: str) -> None:
    assert "engine" not in (EXAMPLES / example).read_text()  # so the default is what they get
    assert isinstance(load_rollout(EXAMPLES / example).engine, ProxyEngine)


def test_the_haproxy_example_names_its_engine() -> None:
    engine = load_rollout(EXAMPLES / "rollout-haproxy.yaml").engine
    assert engine.type == "haproxy" and engine.drain and engine.sticky_header == "x-user-id"


@pytest.mark.parametrize("engine", ["", "engine: proxy\n", "engine: {type: proxy}\n"])
def test_the_proxy_is_the_default_and_may_be_named(tmp_path: Path, engine: str) -> None:
    r = load_rollout(write(tmp_path, POOLS + engine + "listen: 127.0.0.1:9000\n"))
    assert r.engine.type == "proxy" and r.listen == "127.0.0.1:9000"


def test_a_gateway_api_engine_loads_with_its_refs(tmp_path: Path) -> None:
    engine = load_rollout(write(tmp_path, POOLS + GATEWAY)).engine
    assert isinstance(engine, GatewayApiEngine)
    assert (engine.route, engine.namespace, engine.out_dir, engine.apply) == ("llama-canary", "inference", "routes", False)
    assert (engine.gateway.name, engine.gateway.namespace, engine.gateway.section_name) == (
        "inference-gateway",
        "gateways",
        "http",
    )
    base, cand = engine.backends.baseline, engine.backends.candidate
    assert (base.kind, base.group, base.port) == ("Service", "", 8000)
    assert (cand.kind, cand.group, cand.port) == ("InferencePool", INFERENCE_POOL_GROUP, None)


def test_section_name_is_also_taken_in_the_rollout_files_spelling(tmp_path: Path) -> None:
    text = POOLS + GATEWAY.replace("sectionName: http", "section_name: https")
    engine = load_rollout(write(tmp_path, text)).engine
    assert isinstance(engine, GatewayApiEngine) and engine.gateway.section_name == "https"


def test_an_haproxy_engine_loads_with_its_names(tmp_path: Path) -> None:
    engine = load_rollout(write(tmp_path, POOLS + HAPROXY)).engine
    assert isinstance(engine, HAProxyEngine)
    assert (engine.socket, engine.backend) == ("/run/haproxy/admin.sock", "vllm")
    assert (engine.baseline_servers, engine.candidate_servers, engine.control_servers) == (
        ["baseline-1", "baseline-2"],
        ["speculative-1"],
        [],
    )
    assert engine.drain is False


# (engine text, the text of the line the error must point at, the key it must name, what it must say)
GATEWAY_ERRORS = [
    (GATEWAY.replace("route: llama-canary", "route: Llama_Canary"), "route:", "engine.route", "not a Kubernetes HTTPRoute name"),
    (GATEWAY.replace("namespace: inference", "namespace: -bad"), "namespace: -bad", "engine.namespace", "namespace name"),
    (
        GATEWAY.replace("name: vllm-baseline, port: 8000", "name: vllm-baseline"),
        "baseline: {",
        "engine.backends.baseline",
        "needs 'port'",
    ),
    (
        GATEWAY.replace("name: vllm-speculative}", "name: vllm-speculative, port: 8000}"),
        "candidate: {",
        "engine.backends.candidate",
        "takes no 'port'",
    ),
    (
        GATEWAY.replace("kind: InferencePool,", "kind: InferencePool, group: '',"),
        "candidate: {",
        "engine.backends.candidate",
        "is in the group 'inference.networking.k8s.io'",
    ),
    (GATEWAY.replace("kind: InferencePool", "kind: Deployment"), "candidate: {", "engine.backends.candidate.kind", "'Service'"),
    (GATEWAY.replace("name: vllm-baseline", "name: 8000-baseline"), "baseline: {", "engine.backends.baseline", "Service name"),
    (GATEWAY.replace("sectionName: http", "sectionName: HTTP"), "gateway:", "engine.gateway.sectionName", "listener"),
    (GATEWAY.replace("  out_dir: routes\n", "  out_dir: routes\n  aply: true\n"), "aply:", "engine.aply", "unknown key"),
    (GATEWAY.replace("  route: llama-canary\n", ""), "engine:", "engine.route", "Field required"),
    (
        GATEWAY.replace("name: vllm-speculative}", "name: vllm-baseline, kind: Service, port: 8000}").replace(
            "kind: InferencePool, ", ""
        ),
        "backends:",
        "engine.backends",
        "must be distinct",
    ),
]

HAPROXY_ERRORS = [
    (HAPROXY.replace("/run/haproxy/admin.sock", "admin.sock"), "socket:", "engine.socket", "an absolute path"),
    (HAPROXY.replace("/run/haproxy/admin.sock", "/" + "s" * 120), "socket:", "engine.socket", "at most 107 bytes"),
    (HAPROXY.replace("backend: vllm", "backend: 'vllm pool'"), "backend:", "engine.backend", "not an HAProxy name"),
    (HAPROXY.replace("[speculative-1]", "[spec/1]"), "candidate_servers:", "engine.candidate_servers", "not an HAProxy name"),
    (HAPROXY.replace("[speculative-1]", "[baseline-2]"), "engine:", "engine", "in both the baseline and the candidate"),
    (HAPROXY.replace("[baseline-1, baseline-2]", "[b, b]"), "engine:", "engine", "listed twice"),
    (HAPROXY.replace("  candidate_servers: [speculative-1]\n", ""), "engine:", "engine.candidate_servers", "Field required"),
]


@pytest.mark.parametrize(("engine", "at", "key", "message"), GATEWAY_ERRORS + HAPROXY_ERRORS)
def test_engine_errors_name_the_file_line_and_key(tmp_path: Path, engine: str, at: str, key: str, message: str) -> None:
    text = POOLS + engine
    error = refused(tmp_path, text)
    assert f"{tmp_path / 'rollout.yaml'}:{line_of(text, at)}: key '{key}': " in error
    assert message in error
    assert "gateway-api." not in error and "haproxy." not in error  # the union's tag is no key of the file


def test_an_unknown_engine_names_the_engines_there_are(tmp_path: Path) -> None:
    text = POOLS + "engine: envoy\n"
    error = refused(tmp_path, text)
    assert f":{line_of(text, 'engine:')}: key 'engine': " in error
    assert all(name in error for name in ("'proxy'", "'haproxy'", "'gateway-api'"))


@pytest.mark.parametrize("engine", [GATEWAY, HAPROXY], ids=["gateway-api", "haproxy"])
@pytest.mark.parametrize("key", PROXY_ONLY_KEYS)
def test_the_proxys_own_keys_are_refused_with_another_engine(tmp_path: Path, engine: str, key: str) -> None:
    value = {"listen": "127.0.0.1:9000", "split": "{sticky: {source: none}}", "workers": "2"}[key]
    text = POOLS + f"{key}: {value}\n" + engine
    error = refused(tmp_path, text)
    assert f":{line_of(text, key + ':')}: key '{key}': only the built-in proxy has '{key}'" in error


def test_gateway_steps_must_be_whole_millionths(tmp_path: Path) -> None:
    text = POOLS + "steps: [0.5, 12.3456, 33.33333, 100]\n" + GATEWAY
    error = refused(tmp_path, text)
    assert f":{line_of(text, 'steps:')}: key 'steps.2.percent': " in error and "33.33333" in error
    assert "steps.0" not in error and "steps.1" not in error  # four decimals are exact
    # The proxy splits by a continuous hash: it takes the same steps.
    assert load_rollout(write(tmp_path, POOLS + "steps: [0.5, 12.3456, 33.33333, 100]\n")).steps[2].percent == 33.33333


CONTROL_POOL = "  control:\n    servers: ['http://127.0.0.1:8002']\nadmin:"


def test_a_control_pool_needs_a_control_backend_and_the_other_way_round(tmp_path: Path) -> None:
    with_control = POOLS.replace("admin:", CONTROL_POOL) + "steps: [1, 50, 100]\n"
    text = with_control + GATEWAY
    assert f":{line_of(text, 'backends:')}: key 'engine.backends.control': " in refused(tmp_path, text)
    text = with_control + HAPROXY
    assert f":{line_of(text, 'engine:')}: key 'engine.control_servers': " in refused(tmp_path, text)
    text = POOLS + HAPROXY + "  control_servers: [baseline-3]\n"
    assert f":{line_of(text, 'control_servers:')}: key 'engine.control_servers': " in refused(tmp_path, text)
    candidate = "    candidate: {kind: InferencePool, name: vllm-speculative}\n"
    both = with_control + GATEWAY.replace(candidate, candidate + "    control: {name: vllm-control, port: 8000}\n")
    engine = load_rollout(write(tmp_path, both)).engine
    assert isinstance(engine, GatewayApiEngine) and engine.backends.control is not None
