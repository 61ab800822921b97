"""A commit's file payload on a file system with less room than it needs: ``os.write`` on a
regular file that fills up returns a short count rather than raising, and
``write_payload`` (``agent/launcher.py``) used to install the partial file (65,536 of
200,000 bytes on a 64 KiB tmpfs) and run the job with it. Now every byte is written or
``OSError`` is raised, and the temporary file is removed. On a real tmpfs (root only).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from agent.launcher import write_payload
from pushjobs.protocol import messages as m
from tests.tmpfs import mounted


def test_a_payload_that_does_not_fit_is_never_installed_truncated(tmp_path: Path) -> None:
    data = os.urandom(200_000)
    with mounted(tmp_path, "payload", 64 * 1024) as mount:
        target = mount / "deploy.sh"
        try:
            write_payload(m.FilePayload(str(target), base64.b64encode(data).decode(), 0o600))
        except OSError:
            assert not target.exists()
            assert list(mount.iterdir()) == []  # no partial temp file left either
        else:
            assert target.read_bytes() == data
