"""The documentation site builds as `make docs` builds it, strictly, and each page names tests that exist.

`mkdocs build --strict` turns every warning into a failure: a link to a page or anchor that is not there, a page in
docs/ that the navigation leaves out. The build takes about 3 s here (2 cores); the broken copy below about as long.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
HELD_BY = "## Which tests hold this"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """The Makefile's `docs` target: the same command, the same environment variable (no end-of-life banner)."""
    make = (ROOT / "Makefile").read_text()
    assert "\tNO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site\n" in make
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_docs_build_strictly_without_a_warning(tmp_path: Path) -> None:
    r = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stdout + r.stderr, r.stderr
    built = sorted(p.stem for p in (tmp_path / "site").glob("*.html") if p.stem != "404")
    assert built == sorted(p.stem for p in PAGES)
    # use_directory_urls: false, so that site/index.html opens from the file system and its links work there
    assert 'href="check.html' in (tmp_path / "site" / "index.html").read_text()


def test_a_broken_link_or_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "check.md"
    page.write_text(page.read_text() + "\nSee [the missing page](missing.md) and [an anchor](sim.md#no-such-anchor).\n")
    (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n")
    r = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "missing.md" in out and "no-such-anchor" in out and "orphan.md" in out, out


def defines(path: Path, name: str) -> bool:
    return re.search(rf"^(?:async )?def {name}\(|^class {name}\b", path.read_text(), flags=re.M) is not None


def test_every_page_names_the_tests_that_hold_it_and_they_exist() -> None:
    """A bullet names ``tests/FILE.py::test`` (or a whole file); a further ```test_...``` in it is of the same file."""
    missing: list[str] = []
    for page in PAGES:
        text = page.read_text()
        assert HELD_BY in text, f"{page.name} has no '{HELD_BY}' section"
        bullets = [line for line in text.split(HELD_BY, 1)[1].splitlines() if line.startswith("- ")]
        assert bullets and all(TEST_REF.search(b) for b in bullets), f"{page.name}: a '{HELD_BY}' bullet names no test"
        for bullet in bullets:
            refs = TEST_REF.findall(bullet)
            for file, name in refs:
                path = ROOT / file
                if not path.is_file():
                    missing.append(f"{page.name}: {file} does not exist")
                elif name and not defines(path, name):
                    missing.append(f"{page.name}: {file} has no test {name}")
            same_file = ROOT / refs[0][0]
            for name in re.findall(r"`(test_\w+)`", bullet):
                if same_file.is_file() and not defines(same_file, name):
                    missing.append(f"{page.name}: {refs[0][0]} has no test {name}")
    assert missing == []


def test_the_readme_links_every_page_it_names_and_they_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme)
    assert links and all((ROOT / link).is_file() for link in links), links
    assert "make docs" in readme


def test_the_request_log_example_is_one_line_that_assess_reads() -> None:
    """docs/assess.md's example line, pasted into a file, is one JSON object per line and valid for the log's model
    (it used to span four lines: pasted, it was not a log line at all; issue 29)."""
    from specguard.workload.logformat import RequestLogEntry

    blocks = re.findall(r"```json\n(.*?)```", (ROOT / "docs" / "assess.md").read_text(), flags=re.S)
    lines = [x for b in blocks for x in b.splitlines() if '"specguard.request_log/1"' in x]
    assert len(lines) == 1 and all(b.count("\n") == 1 for b in blocks if '"specguard.request_log/1"' in b)
    entry = RequestLogEntry.model_validate_json(lines[0])
    assert entry.response is not None and entry.response.token_ids == [12, 99]
