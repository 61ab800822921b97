"""The HTML page in a real browser (headless Chromium): it draws, and its script works.

Needs a ``chromium`` binary (Debian package ``chromium``); skipped, saying so, without one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pushjobs.pipeline import charts, demo, metrics, page

BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no chromium binary (Debian: apt-get install -y chromium)"
)
Image = pytest.importorskip("PIL.Image", reason="Pillow comes with matplotlib")


def browse(*args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    argv = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page")
    report = metrics.compute(demo.history(nodes=40, days=3, jobs_per_day=100, seed=7))
    return page.write_html(report, out, charts.charts(report, out))


def test_the_page_draws_charts_and_tables(html, tmp_path):
    shot = tmp_path / "page.png"
    browse("--window-size=1300,2400", f"--screenshot={shot}", html.as_uri())
    image = Image.open(shot).convert("RGB").resize((130, 240))
    pixels = [image.getpixel((x, y)) for x in range(130) for y in range(240)]
    inked = sum(1 for p in pixels if sum(p) < 600)  # not white
    reds = sum(1 for r, g, b in pixels if r > 150 and g < 110 and b < 110)
    assert inked > len(pixels) // 30, "the page is (nearly) blank"  # a blank one has 0
    assert reds > 50, "no downtime bars or heatmap drawn"


def rows_of(dom: str, table: str) -> list[list[str]]:
    body = dom.split(f'<table id="{table}">', 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr(?: style=\"([^\"]*)\")?>(.*?)</tr>", body)
    shown = [re.findall(r"<td[^>]*>(.*?)</td>", c) for style, c in rows if "none" not in style]
    return [cells for cells in shown if cells]  # not the heading


def test_its_script_sorts_and_filters_offline(html):
    plain = browse("--dump-dom", html.as_uri()).stdout
    assert 'data-ready="yes"' in plain  # the inline script ran to its end
    first = rows_of(plain, "availability")
    assert float(first[0][4]) <= float(first[-1][4])  # worst availability first
    link = html.as_uri() + "#sort=availability:node&filter=outcomes:backup"
    dom = browse("--dump-dom", link).stdout
    nodes = [r[0] for r in rows_of(dom, "availability")]
    assert nodes == sorted(nodes) and len(nodes) == 40
    kept = rows_of(dom, "outcomes")
    assert kept and {r[0] for r in kept} == {"backup"}
