"""``pushjobs job start``'s --env, --secret-env and --env-file, before any request."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from pushjobs.cli.job_commands import job_env, read_env_file


def test_plain_and_secret_env_go_to_their_own_params(tmp_path: Path) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text("# deploy secrets\n\nDB_PASSWORD=a=b c\nAPI_TOKEN=t0k\n")
    params = job_env(["MODE=blue"], ["EXTRA=x"], [env_file])
    assert params == {
        "env": {"MODE": "blue"},
        "secret_env": {"DB_PASSWORD": "a=b c", "API_TOKEN": "t0k", "EXTRA": "x"},
    }
    assert job_env(["MODE=blue"], [], []) == {"env": {"MODE": "blue"}}


def test_a_secret_named_alone_is_read_from_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", "from-my-env")
    assert job_env([], ["DB_PASSWORD"], [])["secret_env"] == {"DB_PASSWORD": "from-my-env"}
    monkeypatch.delenv("DB_PASSWORD")
    with pytest.raises(typer.Exit):
        job_env([], ["DB_PASSWORD"], [])


@pytest.mark.parametrize(
    ("env", "secret"),
    [(["=x"], []), (["A-B=x"], []), (["NOVALUE"], []), ([], ["=x"]), ([], ["1A=x"]),
     (["A=1"], ["A=2"])],
)  # fmt: skip
def test_bad_names_are_usage_errors(
    env: list[str], secret: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as info:
        job_env(env, secret, [])
    assert info.value.exit_code == 2
    assert "error:" in capsys.readouterr().err


def test_a_bad_env_file_line_is_named_by_number_not_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text("GOOD=1\nnot a line with the s3cret in it\n")
    with pytest.raises(typer.Exit):
        read_env_file(env_file)
    err = capsys.readouterr().err
    assert f"{env_file}:2" in err and "s3cret" not in err
    with pytest.raises(typer.Exit):
        read_env_file(tmp_path / "missing.env")


@pytest.mark.parametrize("make", ["missing", "directory", "binary"])
def test_an_env_file_that_cannot_be_read_says_why_in_words(
    make: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.env"
    if make == "directory":
        path.mkdir()
    elif make == "binary":
        path.write_bytes(b"A=\xff\xfe\n")
    with pytest.raises(typer.Exit) as info:
        read_env_file(path)
    # A missing file is a missing input (8, as the table says); one that is there but
    # cannot be read as an env file is a bad argument (2).
    assert info.value.exit_code == (8 if make == "missing" else 2)
    err = capsys.readouterr().err
    assert err.startswith(f"error: --env-file {path}: ")
    assert "Errno" not in err and "[" not in err  # no raw OSError text
    wanted = {"missing": "No such file", "directory": "Is a directory", "binary": "not UTF-8"}
    assert wanted[make] in err
