"""The README and the docs stay true: their commands exist with the flags they show, and the main ones run.

Every ```bash block of the README and of every page of the documentation site (docs/*.md, mkdocs.yml) is checked
for commands and flags; a test that runs a command reads it from the page it lives on (``page_commands``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specguard.embedded.servers import SERVED_NAME

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))


def readme_commands(text: str = README) -> list[list[str]]:
    """The commands of every ```bash block of ``text``, the README by default, in order."""
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("#")[0].strip()
            if line:
                cmds.append(shlex.split(line))
    return cmds


def page_commands(page: str) -> list[list[str]]:
    """The commands of one page of the documentation site (``docs/PAGE``), where a command the README had now lives."""
    return readme_commands((ROOT / "docs" / page).read_text())


def every_command() -> list[tuple[str, list[str]]]:
    """(where, command) for the README's commands, then each docs page's."""
    return [("README.md", c) for c in readme_commands()] + [
        (f"docs/{p.name}", c) for p in DOC_PAGES for c in readme_commands(p.read_text())
    ]


def help_text(*sub: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "specguard", *sub, "--help"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")},  # this checkout, not an installed one
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    first = readme_commands()[:2]
    assert first == [["make", "demo"], ["make", "test"]]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nmake test\n" in ci
    make = (ROOT / "Makefile").read_text()
    assert ".venv/bin/specguard demo" in make and ".venv/bin/python -m pytest" in make
    # CI's set-up is the one `make test` runs (scripts/setup.sh --test), not a copy of its package list
    assert "\nscripts/setup.sh --test\n" in ci and "apt-get install" not in ci
    assert "\ntest: setup-test\n" in make and "\nsetup-test:\n\t@scripts/setup.sh --test\n" in make
    assert "\ndemo: setup\n" in make and "\nsetup:\n\t@scripts/setup.sh\n" in make
    # how to run specguard is said before the first example that runs it (the README's, else the first page's of the
    # docs, which are read after it), in the one form every example uses
    cmds = [c for _, c in every_command()]
    first_specguard = next(i for i, c in enumerate(cmds) if c[0] == "specguard")
    assert ["source", ".venv/bin/activate"] in cmds[:first_specguard]
    assert ".venv/bin/specguard" in README[: README.index("```bash\nsource .venv/bin/activate")]


def setup_on_a_bare_path(tmp_path: Path, commands: list[str], *args: str, pip_rc: int = 0) -> subprocess.CompletedProcess[str]:
    """scripts/setup.sh in a copy of the checkout's layout, on a PATH holding only stubs of ``commands``.

    apt-get is never on that PATH, so set-up can only name what is missing, whoever runs the test. ``.venv``
    is a stub whose ``python -m pip`` prints a warning and exits ``pip_rc``; every call is logged to calls.log.
    """
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    calls = tmp_path / "calls.log"
    stubs = {
        **{f"bin/{c}": "exit 0" for c in commands},
        ".venv/bin/python": f'echo "$*" >> {calls}; [ "$2" != pip ] && exit 0; echo "WARNING: pip noise" >&2; exit {pip_rc}',
        ".venv/bin/specguard": f'echo "specguard $*" >> {calls}',
    }
    for rel, body in stubs.items():
        path = (tmp_path / rel) if rel.startswith("bin/") else (root / rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    env = {"PATH": str(tmp_path / "bin"), "SPECGUARD_SBIN_DIRS": "", "SPECGUARD_HOME": str(tmp_path / "home")}
    return subprocess.run(
        ["/bin/bash", str(root / "scripts" / "setup.sh"), *args], env=env, capture_output=True, text=True, timeout=60
    )


TEST_PROGRAMS = ["haproxy", "promtool", "chromium", "systemd-analyze"]


def test_setup_names_the_missing_packages_and_their_command_and_stops_before_anything(tmp_path):
    r = setup_on_a_bare_path(tmp_path, [], "--test")
    assert r.returncode == 1 and r.stdout == "", r
    packages = "make g++ haproxy prometheus chromium systemd"
    assert r.stderr == (
        f"missing system packages that specguard and its tests need: {packages}; "
        f"install them with: sudo apt-get install -y {packages}\n"
    )
    assert not (tmp_path / "calls.log").exists(), "nothing may run after the packages are found missing"


def test_the_demo_set_up_needs_only_make_and_gxx_and_the_tests_need_their_programs(tmp_path):
    demo = setup_on_a_bare_path(tmp_path / "demo", ["make", "g++"], "--check")
    assert (demo.returncode, demo.stderr) == (0, "")
    tests = setup_on_a_bare_path(tmp_path / "tests", ["make", "g++", "haproxy"], "--check", "--test")
    assert tests.returncode == 1 and "need: prometheus chromium systemd;" in tests.stderr, tests.stderr
    everything = setup_on_a_bare_path(
        tmp_path / "all", ["make", "g++", *TEST_PROGRAMS[:2], "chromium-browser", "systemd-analyze"]
    )
    assert everything.returncode == 0, everything.stderr  # --check not given: set-up ran on (the stubs) to its end


def test_setup_keeps_pip_quiet_unless_it_fails_and_ends_saying_how_to_run_specguard(tmp_path):
    ok = setup_on_a_bare_path(tmp_path / "ok", ["make", "g++"])
    assert ok.returncode == 0 and "pip noise" not in ok.stderr, ok.stderr
    assert ok.stderr.splitlines()[-1] == (
        "Run it as .venv/bin/specguard, or put it on PATH for this shell: source .venv/bin/activate (then: specguard --help)"
    )
    calls = (tmp_path / "ok" / "calls.log").read_text().splitlines()
    assert calls == [
        "-m pip install -q --disable-pip-version-check -c constraints/ci.txt -e .[test,dev,parquet]",
        "specguard embedded install",
        "specguard embedded models",
        "-m specguard.embedded.arctic_suffix",
    ]
    failed = setup_on_a_bare_path(tmp_path / "failed", ["make", "g++"], pip_rc=1)
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr == "pip install failed; its log (.venv/setup-pip.log):\nWARNING: pip noise\n"


def test_every_specguard_command_in_the_readme_exists_with_its_flags():
    seen = 0
    for where, cmd in every_command():
        if cmd[0] != "specguard":
            continue
        words = [w for w in cmd[1:] if not w.startswith("-")]
        known = (
            "bench",
            "summary",
            "compare",
            "check",
            "report",
            "demo",
            "embedded",
            "install",
            "models",
            "serve",
            "preflight",
            "plan",
            "inventory",
            "diff",
            "assess",
            "canary",
            "run",
            "status",
            "events",
            "pause",
            "resume",
            "promote",
            "rollback",
            "units",
            "observability",
            "haproxy-config",
            "sim",
            "calibrate",
        )
        sub = [w for w in words[:2] if w in known]
        text = help_text(*sub)
        for flag in (w for w in cmd if w.startswith("--")):
            assert flag in text, f"{where}: {' '.join(cmd)}: {flag} is not an option of specguard {' '.join(sub)}"
        seen += 1
    assert seen >= 6


def test_exit_code_table_is_the_same_in_the_readme_every_help_and_the_code():
    from specguard.errors import EXIT_CODE_TABLE, ExitCode

    readme = README.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    page = (ROOT / "docs" / "exit-codes.md").read_text()  # the table again, beside what a failure prints
    for where, text in (("README.md", readme), ("docs/exit-codes.md", page)):
        rows = re.findall(r"^\| (\d+) \| (.+?) \|$", text, flags=re.M)
        assert [(int(c), t) for c, t in rows] == [(int(c), t) for c, t in EXIT_CODE_TABLE], where
    assert {int(c) for c, _ in EXIT_CODE_TABLE} == {int(c) for c in ExitCode} == {0, 1, 2, 3, 4, 130}
    commands = [
        (),
        ("bench",),
        ("summary",),
        ("compare",),
        ("check",),
        ("report",),
        ("demo",),
        ("preflight",),
        ("plan",),
        ("assess",),
        ("inventory",),
        ("inventory", "diff"),
        ("embedded",),
        ("embedded", "install"),
        ("embedded", "models"),
        ("embedded", "serve"),
        ("canary",),
        ("canary", "run"),
        ("canary", "status"),
        ("canary", "pause"),
        ("canary", "units"),
        ("canary", "report"),
        ("canary", "observability"),
        ("canary", "haproxy-config"),
    ]
    for sub in commands:
        text = " ".join(help_text(*sub).split())
        for code, meaning in EXIT_CODE_TABLE:
            assert f"{int(code)} {meaning}" in text, f"specguard {' '.join(sub)} --help lacks exit code {int(code)}"


@pytest.mark.vllm
def test_readme_bench_and_summary_commands_run(vllm_servers, tmp_path):
    """docs/measure.md's bench line, pointed at the embedded server and shortened to 10 requests."""
    bench = next(c for c in page_commands("measure.md") if c[:2] == ["specguard", "bench"])
    args = bench[2:]
    out = tmp_path / "steady"
    replace = {"--url": vllm_servers["baseline"].base_url, "--model": SERVED_NAME, "--out": str(out), "--num-requests": "10"}
    for i, a in enumerate(args):
        if a in replace:
            args[i + 1] = replace[a]
    r = subprocess.run(
        [sys.executable, "-m", "specguard", "bench", *args, "--quiet"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == 10 and summary["errors"] == 0
    assert set(summary["segments"]) <= {"extraction", "summarization", "chat", "code"}
    for cmd in (c for c in page_commands("measure.md") if c[:2] == ["specguard", "summary"]):
        r = subprocess.run(
            [sys.executable, "-m", "specguard", "summary", str(out), *cmd[3:]], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert "ITL" in r.stdout or json.loads(r.stdout)["requests"] == 10


@pytest.mark.vllm
def test_make_demo_runs_the_main_job(demo_run):
    """`make demo`, exactly as the README says (docs/demo.md says what it shows): the packaged check plan on two
    real servers, verdict and report."""
    r, out = demo_run.result, demo_run.out
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] in r.stdout and f"report: {out.relative_to(ROOT)}/report.html" in r.stdout
    assert (out / "report.html").stat().st_size > 1_000_000  # plotly inlined: opens offline
    # idle, steady and burst; temperature 0 and 1; an extraction and a chat segment, each with its line
    assert {(x["traffic"], x["sampling"], x["segment"]) for x in verdict["lines"]} == {
        (t, s, g) for t in ("idle", "steady", "burst") for s in ("greedy", "production") for g in ("extraction", "chat")
    }
    assert verdict["inventory"]["candidate"]["speculative_config"]["method"] == "ngram"
    assert verdict["inventory"]["baseline"]["vllm_version"] == "0.32.0"
    # blocks alternated over two repetitions, each on a freshly started server
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == ["baseline-rep1.log", "baseline-rep2.log", "candidate-rep1.log", "candidate-rep2.log"]
    # the demo names the exit code the verdict means, and exits 0 itself
    assert f"verdict exit code: {verdict['exit_code']}" in r.stdout
    # `specguard report DIR --force` (docs/check.md) rebuilds the same verdict from the stored runs and exits with its code
    again = subprocess.run(
        [sys.executable, "-m", "specguard", "report", str(out), "--force"], capture_output=True, text=True, timeout=600
    )
    assert again.returncode == verdict["exit_code"], again.stderr
    assert json.loads((out / "verdict.json").read_text())["reasons"] == verdict["reasons"]


@pytest.mark.vllm
def test_readme_canary_observability_runs_as_written(tmp_path):
    """The ``canary observability`` line of the docs (docs/canary.md), in a scratch copy of the repository's examples: the three
    files, and promtool accepts both rule files."""
    cmd = next(c for c in page_commands("canary.md") if c[:3] == ["specguard", "canary", "observability"])
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    r = subprocess.run([sys.executable, "-m", "specguard", *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / cmd[cmd.index("--out") + 1]
    assert sorted(p.name for p in out.iterdir()) == ["alerting-rules.yaml", "dashboard.json", "recording-rules.yaml"]
    check = subprocess.run(
        ["promtool", "check", "rules", str(out / "recording-rules.yaml"), str(out / "alerting-rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_readme_canary_haproxy_config_runs_as_written(tmp_path):
    """The ``canary haproxy-config`` line of the docs (docs/canary.md), in a scratch copy of the examples; the real
    HAProxy accepts it."""
    cmd = next(c for c in page_commands("canary.md") if c[:3] == ["specguard", "canary", "haproxy-config"])
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    r = subprocess.run([sys.executable, "-m", "specguard", *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    config = tmp_path / cmd[cmd.index("--out") + 1]
    check = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_readme_gate_commands_that_need_no_server_run_as_written():
    """preflight (against the embedded vLLM or offline rules) and plan (catalogs) run exactly as the docs show
    (docs/gates.md)."""
    ran = 0
    for cmd in page_commands("gates.md"):
        if cmd[0] != "specguard" or cmd[1] not in ("preflight", "plan") or any(w.startswith(("http", "/etc/", "~")) for w in cmd):
            continue
        r = subprocess.run([sys.executable, "-m", "specguard", *cmd[1:]], capture_output=True, text=True, timeout=600)
        assert r.returncode in (0, 1), f"{shlex.join(cmd)}: {r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr and r.stdout.strip()
        ran += 1
    assert ran >= 4


def test_readme_simulated_demo_runs_as_written(tmp_path):
    """``specguard demo --simulated`` exactly as the docs show it (docs/demo.md), in a scratch directory: two simulated servers in
    real time (about two minutes), every page labelled simulated, per-level lines and the crossover line."""
    from specguard.simulated import SIM_VERSION, SIMULATED_SERVER_BANNER

    cmd = next(c for c in page_commands("demo.md") if c[:3] == ["specguard", "demo", "--simulated"])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}  # the servers import this checkout
    r = subprocess.run(
        [sys.executable, "-m", "specguard", *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = tmp_path / cmd[cmd.index("--out") + 1]
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["simulated"] is True
    assert SIMULATED_SERVER_BANNER in r.stderr and SIMULATED_SERVER_BANNER in r.stdout
    assert SIMULATED_SERVER_BANNER in (out / "report.md").read_text().splitlines()[2]
    assert 'id="simulated"' in (out / "report.html").read_text()
    # one line per level, QPS 1 first, and the crossover read off them: helps at the low levels, hurts at the top
    assert [x["traffic"] for x in verdict["lines"]] == ["qps1", "qps8", "qps16", "qps32"]
    helps = [c for c in verdict["crossover"] if "speculation helps up to QPS" in c]
    assert helps and "hurts from QPS 32" in helps[0], verdict["crossover"]
    assert "speculation helps up to QPS" in r.stdout
    # the tail rule no longer hides the regression every percentile shows: P90 decides where P99 cannot yet (issue 25)
    assert verdict["verdict"] == "NO-GO", verdict["reasons"]
    assert any(d["level"] == "qps32" and d["code"] == "guardrail_regressed" for d in verdict["reason_details"]), verdict[
        "reasons"
    ]
    assert {inv["vllm_version"] for inv in verdict["inventory"].values()} == {SIM_VERSION}
