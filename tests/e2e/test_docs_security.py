"""docs/security.md, run as written: "Keys and the registry", its one recipe.

The page says the recipe stands on its own (no client config: the registry file under
the home) and that with a client config the same commands ask the server: the first test
runs it alone, the second on the fleet of docs/fleet.md (``set_up_fleet``), where its
node's name must not collide with the fleet's. How the blocks run, and what is replaced
on a test machine, is in ``tests/e2e/doc_recipes.py``.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from tests.e2e.doc_recipes import DOCS, Walkthrough, blocks, online, pending, set_up_fleet

PAGE = DOCS / "security.md"
KEYS = "## Keys and the registry"


def run_the_keys_recipe(walk: Walkthrough) -> Path:
    """The section's one block, run as a reader's root shell would (no PUSHJOBS_HOME: the
    keys under ``~/.local/share/pushjobs``); that directory."""
    del walk.env["PUSHJOBS_HOME"]  # the section's default: ~/.local/share/pushjobs
    walk.waits["pushjobs key accept"] = pending("db-01")
    home = Path(walk.env["HOME"]) / ".local" / "share" / "pushjobs"
    found = blocks(PAGE, KEYS)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    walk.block(*found[0])
    assert stat.S_IMODE((home / "keys" / "db-01.key").stat().st_mode) == 0o600
    assert re.search(r"db-01\s+node\s+pending", walk.output("pushjobs key list --state"))
    assert "pending -> accepted" in walk.output("pushjobs key accept db-01")
    return home


def test_keys_and_the_registry_work_on_the_home_registry(walk: Walkthrough) -> None:
    home = run_the_keys_recipe(walk)
    keys = walk.json("pushjobs key list")
    assert isinstance(keys, list), keys
    assert [(k["name"], k["state"]) for k in keys] == [("db-01", "accepted")]
    # An empty listing says which registry it read: the file under the home.
    empty = walk.bash("pushjobs key list --state pending")
    assert f"(registry file {home / 'registry.json'})" in empty.stdout


def test_keys_and_the_registry_on_the_fleet_ask_its_server(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    run_the_keys_recipe(walk)
    keys = walk.json("pushjobs key list")
    assert isinstance(keys, list), keys
    states = {k["name"]: k["state"] for k in keys}
    assert states == {"alice": "accepted", "web-01": "accepted", "db-01": "accepted"}, states
    # The registry read is the server's, and the fleet's node is untouched by the recipe.
    empty = walk.bash("pushjobs key list --state pending")
    assert "(server tcp://127.0.0.1:" in empty.stdout, empty.stdout
    nodes = walk.json("pushjobs node list")
    assert isinstance(nodes, dict), nodes
    assert [n["online"] for n in nodes["nodes"] if n["name"] == "web-01"] == [True]
    assert not online(walk), "db-01 has no agent: it is accepted, not online"
