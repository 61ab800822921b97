from __future__ import annotations

import ast
import builtins
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pushjobs import errors
from pushjobs.clock import FakeClock, SystemClock
from pushjobs.config import LivenessSettings, ProtocolSettings, load_config


def _error_classes():
    return [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__ == errors.__name__
    ]


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pushjobs", "agent", "server", "keys", "bench")


def _drawn_parents() -> dict[str, str]:
    """Each name drawn in the docstring's tree -> the name drawn above it."""
    parents: dict[str, str] = {}
    stack = ["PushJobsError"]
    for line in errors.__doc__.splitlines():
        found = re.match(r"    ((?:│   |    )*)[├└]── (\w+)", line)
        if found:
            depth = len(found[1]) // 4 + 1
            del stack[depth:]
            parents[found[2]] = stack[-1]
            stack.append(found[2])
    return parents


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_is_a_pushjobs_error_and_drawn_in_the_tree(cls):
    assert issubclass(cls, errors.PushJobsError)
    if cls is not errors.PushJobsError:
        assert _drawn_parents()[cls.__name__] == cls.__bases__[0].__name__
        assert len(cls.__bases__) == 1


def test_the_tree_draws_no_class_that_is_not_there():
    assert set(_drawn_parents()) == {c.__name__ for c in _error_classes()} - {"PushJobsError"}


@pytest.mark.parametrize(
    ("name", "parent"),
    [
        ("NobodyListens", "Unreachable"),  # from pushjobs/api/client.py
        ("SandboxError", "PushJobsError"),  # from pushjobs/testbed/childproc.py
        ("ScheduleError", "PushJobsError"),  # from server/core/schedule.py
        ("Rejected", "MalformedMessage"),  # from pushjobs/pipeline/events.py (a ValueError)
    ],
)
def test_the_errors_once_defined_elsewhere_are_in_the_tree(name, parent):
    cls = getattr(errors, name)
    assert cls.__bases__ == (getattr(errors, parent),)


def test_no_exception_class_is_defined_outside_errors():
    """One tree: a class deriving from an exception anywhere but ``pushjobs/errors.py`` is
    one more root, or a branch that the tree does not draw."""
    bases = {c.__name__ for c in _error_classes()} | {
        name
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    }
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "pushjobs" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    names = {
                        b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                        for b in node.bases
                    }
                    if names & bases:
                        found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert found == []


def test_config_error_names_file_key_and_problem():
    exc = errors.ConfigError("must be positive", path="/etc/x.toml", key="liveness.interval_s")
    assert str(exc) == "/etc/x.toml: liveness.interval_s: must be positive"


def test_missing_extra_names_the_extra():
    assert "pip install 'pushjobs[kafka]'" in str(errors.MissingExtra("confluent-kafka", "kafka"))


def test_fake_clock_moves_forward_only():
    clock = FakeClock(monotonic=5.0, wall_ms=1000)
    clock.advance(1.5)
    assert (clock.monotonic(), clock.wall_ms()) == (6.5, 2500)
    with pytest.raises(errors.PushJobsError, match="backwards"):
        clock.advance(-0.1)
    assert clock.monotonic() == 6.5


def test_system_clock():
    clock = SystemClock()
    a = clock.monotonic()
    assert clock.monotonic() >= a
    assert clock.wall_ms() > 1_600_000_000_000


@dataclass(frozen=True)
class Section:
    name: str = "default"
    count: int = 1
    ratio: float = 0.5
    enabled: bool = False
    tags: list[str] = field(default_factory=list)
    path: Path | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppConfig:
    section: Section = field(default_factory=Section)
    liveness: LivenessSettings = field(default_factory=LivenessSettings)
    protocol: ProtocolSettings = field(default_factory=ProtocolSettings)


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file():
    cfg = load_config(AppConfig, env={})
    assert cfg == AppConfig()
    assert cfg.liveness.interval_s == 1.0


def test_file_values(tmp_path):
    path = write(
        tmp_path,
        """
[section]
name = "x"
count = 4
ratio = 2
enabled = true
tags = ["a", "b"]
path = "~/data"
labels = { k = "v" }
[liveness]
offline_threshold = 5
""",
    )
    cfg = load_config(AppConfig, path, env={})
    assert cfg.section == Section(
        "x", 4, 2.0, True, ["a", "b"], Path("~/data").expanduser(), {"k": "v"}
    )
    assert cfg.liveness == LivenessSettings(offline_threshold=5)


def test_environment_overrides_the_file(tmp_path):
    path = write(tmp_path, "[section]\ncount = 4\n")
    env = {
        "PUSHJOBS_SECTION__COUNT": "9",
        "PUSHJOBS_SECTION__ENABLED": "yes",
        "PUSHJOBS_SECTION__TAGS": "a, b",
        "PUSHJOBS_LIVENESS__INTERVAL_S": "0.25",
        "PUSHJOBS_UNRELATED": "ignored",
        "PUSHJOBS_OTHER__THING": "ignored",
    }
    cfg = load_config(AppConfig, path, env=env)
    assert (cfg.section.count, cfg.section.enabled, cfg.section.tags) == (9, True, ["a", "b"])
    assert cfg.liveness.interval_s == 0.25


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("[section]\ncount = 'four'\n", "section.count", "expected an integer"),
        ("[section]\ncount = true\n", "section.count", "expected an integer"),
        ("[section]\nenabled = 1\n", "section.enabled", "expected true or false"),
        ("[section]\ntags = [1]\n", "section.tags[0]", "expected a string"),
        ("[section]\ncolour = 'red'\n", "section.colour", "unknown key"),
        ("[nosuch]\n", "nosuch", "unknown key"),
        ("section = 3\n", "section", "expected a table"),
        ("[liveness]\ninterval_s = 0\n", "liveness.interval_s", "must be greater than 0"),
        ("[protocol]\nmax_header_bytes = 4096\n", "protocol.max_header_bytes", "between"),
    ],
)
def test_errors_name_file_key_and_problem(tmp_path, text, key, problem):
    path = write(tmp_path, text)
    with pytest.raises(errors.ConfigError) as info:
        load_config(AppConfig, path, env={})
    assert info.value.path == str(path)
    assert info.value.key == key
    assert problem in info.value.problem
    assert str(path) in str(info.value) and key in str(info.value)


def test_invalid_toml(tmp_path):
    path = write(tmp_path, "[section\n")
    with pytest.raises(errors.ConfigError, match="invalid TOML"):
        load_config(AppConfig, path, env={})


def test_missing_file(tmp_path):
    with pytest.raises(errors.ConfigError, match="file not found"):
        load_config(AppConfig, tmp_path / "nope.toml", env={})


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(errors.ConfigError, match="is a directory"):
        load_config(AppConfig, tmp_path, env={})


def test_binary_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(errors.ConfigError):
        load_config(AppConfig, path, env={})


def test_bad_environment_value_names_the_variable():
    with pytest.raises(errors.ConfigError, match=r"\$PUSHJOBS_SECTION__COUNT: cannot parse 'x'"):
        load_config(AppConfig, env={"PUSHJOBS_SECTION__COUNT": "x"})
    with pytest.raises(errors.ConfigError, match="PUSHJOBS_SECTION__ENABLED"):
        load_config(AppConfig, env={"PUSHJOBS_SECTION__ENABLED": "maybe"})
