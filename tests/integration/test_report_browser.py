"""report.html in a real browser: headless Chromium loads the report a real
``gpuscale evaluate`` run wrote, every plot decodes, the verdict comes first, and
each section is screenshotted (into ``out/report-screenshots/``, ignored by git, or
the directory ``GPUSCALE_SCREENSHOTS`` names; the test prints each path).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

ROOT = Path(__file__).resolve().parents[2]

SECTIONS = ("verdict", "comparison", "tradeoff", "parameters", "timelines")

# Run in the loaded page: how many images decoded, and the verdict's text.
PROBE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const decoded = images.filter((i) => i.complete && i.naturalWidth > 0).length;
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({
    images: images.length,
    decoded: decoded,
    verdict: document.querySelector("#verdict p.verdict").textContent,
    first: document.querySelector("section").id,
  });
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: run ./scripts/test, which installs it")
    return path


def browse(*args: str) -> subprocess.CompletedProcess[str]:
    # --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start.
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def gpuscale() -> list[str]:
    script = Path(sys.executable).parent / "gpuscale"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpuscale"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    subprocess.run(
        [
            *gpuscale(),
            "evaluate",
            "--trace",
            "ramp",
            "--duration",
            "600",
            "--warmup",
            "60",
            "--seeds",
            "2",
            "--knob-values",
            "2",
            "--policy",
            "static",
            "--policy",
            "hpa",
            "--policy",
            "oracle",
            "--jobs",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out / "report.html"


def test_every_plot_decodes_and_the_verdict_comes_first(report, tmp_path):
    page = report.read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"))
    dom = browse("--virtual-time-budget=10000", "--dump-dom", probed.as_uri()).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the page's load handler did not run"

    probe = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    # the cost curve and one timeline per policy
    assert probe["images"] == 1 + 3
    assert probe["decoded"] == probe["images"]
    assert probe["first"] == "verdict"
    assert re.match(
        r"At 99 % of requests within SLO \(2 seeds\), (static|hpa) is the cheapest policy: "
        r"[\d.]+ GPU-h",
        probe["verdict"],
    ), probe["verdict"]
    assert "x the oracle" in probe["verdict"]


def test_each_section_is_screenshotted(report, tmp_path):
    shots = Path(os.environ.get("GPUSCALE_SCREENSHOTS", ROOT / "out" / "report-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    page = report.read_text()
    head = page[: page.index("<body>") + len("<body>")]
    for section in SECTIONS:
        body = re.search(rf'<section id="{section}">.*?</section>', page, re.S)
        assert body, f"no section {section}"
        alone = tmp_path / f"{section}.html"
        alone.write_text(head + body.group(0) + "</body></html>")
        shot = shots / f"{section}.png"
        browse("--window-size=1600,1200", f"--screenshot={shot}", alone.as_uri())
        pixels = imread(shot)
        assert pixels.shape[:2] == (1200, 1600)
        # something was drawn: not one flat colour
        assert float(np.std(pixels[..., :3])) > 0.01, section
        print(f"screenshot of {section}: {shot}")
