"""One local Spark session for the whole test run (about 6 s to start, once)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from pushjobs.pipeline.session import spark_session
    from pushjobs.pipeline.settings import ReportSettings

    session = spark_session(ReportSettings(master="local[2]", shuffle_partitions=2), for_tests=True)
    yield session
    session.stop()
