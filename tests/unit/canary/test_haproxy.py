"""The HAProxy engine's pure parts: shares to weights, ``show servers state`` parsing, the generated haproxy.cfg.

Parsing is checked on an answer captured from the real HAProxy 2.6 (tests/data/haproxy/README.md says how);
the real ``haproxy -c -f`` checks the generated configurations in tests/system/test_canary_haproxy_config.py.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specguard.canary.ops.haproxy_config import render_haproxy_config, server_address
from specguard.canary.routers.haproxy import (
    HAPROXY_MAX_WEIGHT,
    POOL_WEIGHT_TOTAL,
    HAProxyRuntime,
    haproxy_weights,
    parse_servers_state,
    realised_shares,
    server_weight,
)
from specguard.canary.spec.engine import HAProxyEngine
from specguard.canary.spec.rollout import DEFAULT_STEPS, Rollout
from specguard.cli.app import app
from specguard.errors import ExitCode, InputFileError, OptionError, RuntimeFailure

DATA = Path(__file__).resolve().parents[2] / "data" / "haproxy"
GRID = [k / 2000 for k in range(2001)]  # every 0.05 %


def engine(baseline: int = 1, candidate: int = 1, control: int = 0, **extra: Any) -> HAProxyEngine:
    return HAProxyEngine(
        type="haproxy",
        socket="/run/haproxy/admin.sock",
        backend="vllm",
        baseline_servers=[f"baseline-{i}" for i in range(baseline)],
        candidate_servers=[f"speculative-{i}" for i in range(candidate)],
        control_servers=[f"control-{i}" for i in range(control)],
        **extra,
    )


def candidate_share(e: HAProxyEngine, fraction: float) -> float:
    return realised_shares(e, haproxy_weights(e, fraction))["candidate"]


@pytest.mark.parametrize(("baseline", "candidate"), [(1, 1), (2, 1), (2, 2)])
def test_every_default_step_is_carried_exactly_with_one_or_two_servers_per_pool(baseline: int, candidate: int) -> None:
    e = engine(baseline, candidate)
    for percent in DEFAULT_STEPS:
        assert candidate_share(e, percent / 100) == pytest.approx(percent / 100, abs=1e-12), percent


def test_three_baseline_servers_carry_the_defaults_with_the_documented_errors() -> None:
    # The module docstring's table: 0, +0.03, 0, 0, +0.25 and 0 points.
    e = engine(3, 1)
    errors = [round((candidate_share(e, p / 100) - p / 100) * 100, 2) for p in DEFAULT_STEPS]
    assert errors == [0.0, 0.03, 0.0, 0.0, 0.25, 0.0]


@pytest.mark.parametrize(("baseline", "candidate"), [(1, 1), (2, 1), (3, 1), (2, 2), (4, 2)])
def test_a_share_is_carried_within_a_quarter_point_per_server_of_the_larger_pool(baseline: int, candidate: int) -> None:
    e = engine(baseline, candidate)
    bound = 0.0025 * max(baseline, candidate) + 1e-9
    for f in GRID:
        below_one_weight = 0 < f * POOL_WEIGHT_TOTAL / candidate < 1 or 0 < (1 - f) * POOL_WEIGHT_TOTAL / baseline < 1
        if not below_one_weight:
            assert abs(candidate_share(e, f) - f) <= bound, f


def test_a_positive_share_never_rounds_to_no_traffic_and_zero_is_zero() -> None:
    assert server_weight(1e-9, 1) == 1
    assert server_weight(0.0, 3) == 0
    assert haproxy_weights(engine(2, 1), 0.0) == {"baseline-0": 100, "baseline-1": 100, "speculative-0": 0}


def test_weights_fit_haproxy_and_move_monotonically_with_the_share() -> None:
    # Monotone weights: with consistent hashing a key only moves baseline -> candidate while the share rises.
    e = engine(2, 2, 1)
    previous: dict[str, int] | None = None
    for f in [k / 200 for k in range(101)]:  # candidate and control up to 50 % each
        weights = haproxy_weights(e, f, f)
        assert all(0 <= w <= HAPROXY_MAX_WEIGHT for w in weights.values())
        if previous is not None:
            assert all(weights[s] >= previous[s] for s in weights if not s.startswith("baseline"))
            assert all(weights[s] <= previous[s] for s in weights if s.startswith("baseline"))
        previous = weights


def test_a_control_share_goes_to_the_control_servers() -> None:
    shares = realised_shares(engine(1, 1, 1), haproxy_weights(engine(1, 1, 1), 0.1, 0.1))
    assert shares == pytest.approx({"baseline": 0.8, "candidate": 0.1, "control": 0.1})


@pytest.mark.parametrize(
    ("candidate", "control", "message"),
    [(1.5, 0.0, r"in \[0, 1\]"), (float("nan"), 0.0, r"in \[0, 1\]"), (0.6, 0.6, "sum past"), (0.1, -0.1, r"in \[0, 1\]")],
)
def test_impossible_shares_are_refused(candidate: float, control: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        haproxy_weights(engine(1, 1, 1), candidate, control)


def test_a_control_share_without_control_servers_is_refused() -> None:
    with pytest.raises(ValueError, match="without control servers"):
        haproxy_weights(engine(1, 1), 0.1, 0.1)


def test_the_captured_show_servers_state_parses() -> None:
    states = parse_servers_state((DATA / "show-servers-state-2.6.txt").read_text())
    assert [(s.backend, s.name, s.address, s.port) for s in states] == [
        ("vllm", "baseline-1", "127.0.0.1", 18932),
        ("vllm", "speculative-1", "127.0.0.1", 18933),
    ]
    baseline, speculative = states
    assert (baseline.up, baseline.draining, baseline.weight, baseline.initial_weight) == (False, False, 198, 198)
    assert (speculative.up, speculative.draining, speculative.weight, speculative.initial_weight) == (True, True, 7, 2)


@pytest.mark.parametrize(
    "answer",
    ["Can't find backend.\n\n", "No such backend.\n", "", "2\n# be_id be_name\n", "1\n# be_name srv_name\nvllm a\n"],
)
def test_an_answer_that_is_not_a_servers_state_is_refused(answer: str) -> None:
    with pytest.raises(ValueError):
        parse_servers_state(answer)


def test_columns_are_found_by_name_not_position() -> None:
    text = (DATA / "show-servers-state-2.6.txt").read_text().splitlines()
    # The same answer with a column HAProxy might append later, and the columns reordered.
    header = text[1].lstrip("# ").split()
    order = [*reversed(range(len(header)))]
    moved = ["1", "# " + " ".join([header[i] for i in order] + ["srv_future"])]
    moved += [" ".join([line.split()[i] for i in order] + ["x"]) for line in text[2:] if line.strip()]
    assert parse_servers_state("\n".join(moved)) == parse_servers_state("\n".join(text))


# --- the generated configuration ---------------------------------------------------------------------------


def rollout(*, control: bool = False, **engine_extra: Any) -> Rollout:
    pools: dict[str, Any] = {
        "baseline": {"servers": ["http://127.0.0.1:8000", "http://127.0.0.1:8002"]},
        "candidate": {"servers": ["http://127.0.0.1:8001"]},
    }
    eng: dict[str, Any] = {
        "type": "haproxy",
        "socket": "/run/haproxy/admin.sock",
        "backend": "vllm",
        "baseline_servers": ["baseline-1", "baseline-2"],
        "candidate_servers": ["speculative-1"],
    }
    if control:
        pools["control"] = {"servers": ["http://127.0.0.1:8003"]}
        eng["control_servers"] = ["control-1"]
    eng.update(engine_extra)
    return Rollout.model_validate({"engine": eng, "pools": pools, "admin": {"token_env": "CANARY_TOKEN"}})


def backend_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("backend vllm")
    return [line.strip() for line in lines[start + 1 :] if line.strip() and not line.strip().startswith("#")]


def test_the_backend_holds_every_pool_at_the_weights_of_a_canary_not_started() -> None:
    lines = backend_lines(render_haproxy_config(rollout(control=True)))
    servers = [line for line in lines if line.startswith("server ")]
    assert servers == [
        "server baseline-1 127.0.0.1:8000 weight 100",
        "server baseline-2 127.0.0.1:8002 weight 100",
        "server speculative-1 127.0.0.1:8001 weight 0",
        "server control-1 127.0.0.1:8003 weight 0",
    ]
    assert {"option httpchk GET /health", "http-check expect status 200", "balance roundrobin"} <= set(lines)


def test_a_sticky_header_hashes_consistently() -> None:
    lines = backend_lines(render_haproxy_config(rollout(sticky_header="X-User-Id")))
    assert "balance hdr(x-user-id)" in lines and "hash-type consistent" in lines
    assert "balance roundrobin" not in lines


def test_the_timeouts_outlast_the_longest_request() -> None:
    text = render_haproxy_config(rollout(), timeout_server_s=3600)
    assert "    timeout server 3600s" in text.splitlines() and "    timeout client 3600s" in text.splitlines()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", ("127.0.0.1:8000", False)),
        ("http://[::1]:8001/", ("[::1]:8001", False)),
        ("https://10.0.0.5", ("10.0.0.5:443", True)),
        ("http://vllm-0.internal", ("vllm-0.internal:80", False)),
    ],
)
def test_a_base_url_becomes_a_server_address(url: str, expected: tuple[str, bool]) -> None:
    assert server_address(url, "pools.baseline.servers[0]") == expected


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://u:p@127.0.0.1:8000", "http://127.0.0.1:8000/?a=1"])
def test_a_base_url_haproxy_cannot_address_is_refused(url: str) -> None:
    with pytest.raises(InputFileError, match=r"pools\.baseline\.servers\[1\]"):
        server_address(url, "pools.baseline.servers[1]")


def test_server_names_must_pair_with_the_pools_urls() -> None:
    with pytest.raises(InputFileError, match="engine.baseline_servers names 1 server"):
        render_haproxy_config(rollout(baseline_servers=["baseline-1"]))


def test_a_bad_bind_address_is_an_option_error() -> None:
    with pytest.raises(OptionError, match="--bind"):
        render_haproxy_config(rollout(), bind="8080")


# --- the command ------------------------------------------------------------------------------------------


ROLLOUT_YAML = """\
engine:
  type: haproxy
  socket: {socket}
  backend: vllm
  baseline_servers: [baseline-1]
  candidate_servers: [speculative-1]
  sticky_header: x-user-id
pools:
  baseline: {{servers: ["http://127.0.0.1:8000"]}}
  candidate: {{servers: ["http://127.0.0.1:8001"]}}
admin: {{token_env: CANARY_TOKEN}}
"""


def proxy_rollout(text: str) -> str:
    """The same pools without an engine section: the built-in proxy."""
    return text[text.index("pools:") :]


@pytest.mark.parametrize(
    ("edit", "extra", "message"),
    [
        (proxy_rollout, [], "engine is 'proxy'"),
        (lambda t: t.replace("[baseline-1]", "[baseline-1, baseline-2]"), [], "names 2 server"),
        (lambda t: t, ["--bind", "localhost"], "--bind"),
        (lambda t: t, ["--timeout-server-s", "inf"], "--timeout-server-s"),
    ],
    ids=["proxy-engine", "names-vs-urls", "bind", "timeout"],
)
def test_bad_input_exits_2_and_writes_nothing(edit: Any, extra: list[str], message: str, tmp_path: Path) -> None:
    path = tmp_path / "rollout.yaml"
    path.write_text(edit(ROLLOUT_YAML.format(socket=tmp_path / "admin.sock")))
    out = tmp_path / "haproxy.cfg"
    result = CliRunner().invoke(app, ["canary", "haproxy-config", str(path), "--out", str(out), *extra])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert message in result.output
    assert not out.exists()


# --- the engine's sticky header and the runtime client's bounds ----------------------------------------------


def test_the_sticky_header_is_a_plain_name_kept_lower_case() -> None:
    assert engine(sticky_header="X-User-Id").sticky_header == "x-user-id"
    for bad in ("x#id", "x id", "x:id", ""):
        with pytest.raises(ValueError, match="letters, digits, '-' and '_'"):
            engine(sticky_header=bad)


def test_a_socket_that_never_answers_is_a_runtime_failure_within_the_timeout(tmp_path: Path) -> None:
    # A fake: a UNIX socket that accepts and stays silent, as a wedged HAProxy would (fault injection).
    path = Path(tempfile.mkdtemp(prefix="sg-hap-")) / "silent.sock"

    async def main() -> str:
        held: list[asyncio.StreamWriter] = []

        async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)

        server = await asyncio.start_unix_server(accept, path=str(path))
        try:
            with pytest.raises(RuntimeFailure) as err:
                await HAProxyRuntime(str(path), timeout_s=0.2).command("show servers state vllm")
            return str(err.value)
        finally:
            for w in held:
                w.close()
            server.close()
            await server.wait_closed()

    try:
        message = asyncio.run(main())
    finally:
        path.unlink(missing_ok=True)
        path.parent.rmdir()
    assert str(path) in message and "no answer to 'show servers state vllm'" in message


def test_a_command_is_one_line() -> None:
    with pytest.raises(ValueError, match="one command"):
        asyncio.run(HAProxyRuntime("/run/haproxy/admin.sock").command("show info; shutdown sessions"))


def test_show_stat_is_read_by_column_name_and_a_reload_counts_from_zero() -> None:
    from specguard.canary.evidence.haproxy_stats import parse_show_stat, pool_in_flight, pool_responses

    engine = HAProxyEngine(
        type="haproxy", socket="/run/h.sock", backend="vllm", baseline_servers=["b1"], candidate_servers=["c1"]
    )
    # columns in another order than HAProxy's, and one it does not have: found by name, not position
    header = "# svname,pxname,hrsp_5xx,hrsp_2xx,scur,stot,hrsp_1xx,hrsp_3xx,hrsp_4xx,hrsp_other,new_column"

    def page(b: tuple[int, int, int], c: tuple[int, int, int]) -> str:
        rows = [f"{name},vllm,{e},{ok},{cur},9,0,0,0,0,x" for name, (e, ok, cur) in (("b1", b), ("c1", c))]
        return "\n".join([header, "FRONTEND,vllm,0,0,0,0,0,0,0,0,x", *rows, "c1,other,7,7,7,7,0,0,0,0,x"]) + "\n"

    before = parse_show_stat(page((0, 10, 0), (3, 5, 1)), "vllm")
    after = parse_show_stat(page((1, 14, 2), (4, 9, 0)), "vllm")
    assert set(before) == {"b1", "c1"}
    assert pool_in_flight(engine, after) == {"baseline": 2, "candidate": 0, "control": 0}
    assert pool_responses(engine, before, after) == {"baseline": (1, 5), "candidate": (1, 5), "control": (0, 0)}
    reloaded = parse_show_stat(page((0, 2, 0), (1, 1, 0)), "vllm")
    assert pool_responses(engine, after, reloaded) == {"baseline": (0, 2), "candidate": (1, 2), "control": (0, 0)}
    with pytest.raises(ValueError, match="no column"):
        parse_show_stat("# pxname,svname\n", "vllm")
