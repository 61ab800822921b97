"""``pushjobs key`` through a real server: the admin manages the server's own registry.

The CLI is given only a client config (no registry path): what it lists and changes must
be the server's registry, which lives in the fleet's directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from keys import files
from keys.identity import generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import Exit
from pushjobs.testbed.tomlwrite import toml_text
from tests.e2e.conftest import Fleet, make_fleet
from tests.support import wait_until

pytestmark = pytest.mark.e2e
runner = CliRunner()


def cli(config: Path, *args: str) -> tuple[int, str, str]:
    env = {"PUSHJOBS_CONFIG": str(config), "PUSHJOBS_KEY_REGISTRY": ""}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def fleet(tmp_path: Path):
    fleet = make_fleet(tmp_path, accept_nodes=False, nodes=["web-1", "web-2", "db-1"])
    try:
        registry = KeyRegistry(fleet.sandbox.registry_path)
        wait_until(lambda: len(registry.list(KeyState.PENDING)) == 3, 20)
        yield fleet
    finally:
        fleet.close()


def test_an_admin_lists_and_accepts_through_the_server(fleet: Fleet) -> None:
    config = fleet.sandbox.client_config_path
    code, out, _ = cli(config, "key", "list", "--state", "pending", "--json")
    assert code == Exit.OK
    assert sorted(k["name"] for k in json.loads(out)) == ["db-1", "web-1", "web-2"]
    code, out, _ = cli(config, "key", "accept", "web-*")
    assert code == Exit.OK
    # In the registry's order: whichever agent asked first.
    assert sorted(out.splitlines()) == ["web-1: pending -> accepted", "web-2: pending -> accepted"]
    fleet.wait_online(["web-1", "web-2"])
    code, out, err = cli(config, "key", "accept", "mail-*")
    assert code == Exit.NOT_FOUND and "no key matches 'mail-*'" in err
    code, out, _ = cli(config, "key", "accept", "--all")
    assert code == Exit.OK and out.strip() == "db-1: pending -> accepted"
    fleet.wait_online(["db-1"])
    code, out, _ = cli(config, "key", "reject", "db-1")
    assert out.strip() == "db-1: accepted -> rejected"
    fleet.wait_offline("db-1")
    code, out, _ = cli(config, "key", "list", "--state", "pending")
    assert code == Exit.OK and out.startswith("no keys in state pending (server tcp://")


def test_a_reader_may_not_manage_keys(fleet: Fleet) -> None:
    reader = generate("rita", "user")
    files.save(reader, fleet.root / "rita")
    KeyRegistry(fleet.sandbox.registry_path).add(
        reader.public, state=KeyState.ACCEPTED, role="reader"
    )
    config = fleet.root / "rita.toml"
    config.write_text(
        toml_text(
            {
                "client": {
                    "server": fleet.sandbox.api,
                    "server_key": str(fleet.root / "keys" / "server.pub"),
                    "user_key": str(fleet.root / "rita" / "rita.key"),
                }
            }
        )
    )
    code, _, err = cli(config, "key", "accept", "--all")
    assert code == Exit.UNAUTHORIZED and "needs the admin role" in err
    assert len(KeyRegistry(fleet.sandbox.registry_path).list(KeyState.PENDING)) == 3


def test_a_left_over_registry_variable_gives_way_to_the_server(tmp_path: Path) -> None:
    """PUSHJOBS_KEY_REGISTRY still exported from bootstrapping the first admin names a
    file the server has imported into the log: with a client config, the key commands ask
    the server and say so (they used to fail, exit 10, "manage keys through the server")."""
    fleet = make_fleet(
        tmp_path, accept_nodes=False, nodes=["db-1"], server_extra={"server": {"key_store": "log"}}
    )
    try:
        sandbox = fleet.sandbox
        env = {
            "PUSHJOBS_CONFIG": str(sandbox.client_config_path),
            "PUSHJOBS_KEY_REGISTRY": str(sandbox.registry_path),
        }

        def pending() -> bool:
            result = runner.invoke(app, ["key", "list", "--state", "pending"], env=env)
            return result.exit_code == Exit.OK and "db-1" in result.stdout

        wait_until(pending, 20)
        result = runner.invoke(app, ["key", "reject", "db-1"], env=env)
        assert result.exit_code == Exit.OK, result.stderr
        assert result.stdout.strip() == "db-1: pending -> rejected"
        assert "asking the server instead" in result.stderr
        # Named on the command line, the file is still refused: that is an explicit wish.
        result = runner.invoke(
            app, ["key", "list", "--registry", str(sandbox.registry_path)], env=env
        )
        assert result.exit_code != Exit.OK
        assert "imported into the ordered log" in result.stderr
    finally:
        fleet.close()
