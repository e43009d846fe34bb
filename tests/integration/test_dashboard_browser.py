"""The dashboard in a real browser: runs added with ``cudaperf history ingest``, the site written
by ``cudaperf dashboard``, its pages opened in headless Chromium (or Chrome) driven through the
DevTools protocol over a pipe (``--remote-debugging-pipe``: no dependency, no port). The pages load
from files with no console error and fetch nothing from elsewhere, each plot draws its points and
its change points, hovering a point shows its run, clicking a change point shows its kernel diff.

Skipped only where no Chromium or Chrome is installed (CI installs one: .ci/run, ci.yml)."""

from __future__ import annotations

import fcntl
import json
import os
import random
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf.breakdown.model import Breakdown, Kernel
from pytest_cudaperf.cli import main
from pytest_cudaperf.history.pages import page_name
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, write_report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.verdict import Kind, Verdict

#: where a browser is looked for: $CUDAPERF_TEST_BROWSER, then these names on PATH
BROWSERS = ("chromium", "google-chrome", "google-chrome-stable", "chromium-browser")
#: as root, and on a machine with no network, Chromium needs all of these to start and not hang
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 30.0
#: fds argv[1] and argv[2] become 3 and 4, then argv[3:] is executed
SHIM = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
    "os.close(int(sys.argv[1])); os.close(int(sys.argv[2])); os.execv(sys.argv[3], sys.argv[3:])"
)


def find_browser() -> str | None:
    given = os.environ.get("CUDAPERF_TEST_BROWSER")
    if given:
        return given
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


class Browser:
    """One headless browser and one page, through the DevTools protocol: JSON messages ending
    in a NUL byte, read by the browser on fd 3 and written on fd 4."""

    def __init__(self, executable: str, profile: Path) -> None:
        theirs_in, self._out = os.pipe()
        self._in, theirs_out = os.pipe()
        # their ends as fds 10 and up, made 3 and 4 by a Python that then execs the browser (no
        # preexec_fn: an xdist worker runs threads)
        read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (theirs_in, theirs_out))
        os.close(theirs_in)
        os.close(theirs_out)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SHIM,
                str(read),
                str(write),
                executable,
                *FLAGS,
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(read, write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(read)
        os.close(write)
        self._buffer = b""
        self._id = 0
        self._session = ""
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self._session:
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._receive(time.monotonic() + TIMEOUT_S)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            self.events.append(answer)

    def wait_for(self, event: str) -> dict[str, Any]:
        for i, seen in enumerate(self.events):
            if seen.get("method") == event:
                return self.events.pop(i)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._receive(deadline)
            if message.get("method") == event:
                return message
            self.events.append(message)

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._in], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise EOFError("the browser closed its pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def open_page(self) -> None:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=1200,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )

    def load(self, path: Path) -> None:
        self.events.clear()
        self.send("Page.navigate", url=path.as_uri())
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        found = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in found:
            raise AssertionError(f"{expression}: {found['exceptionDetails']}")
        return found["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, failed loads since the page
        loaded."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning"):
                found.append(json.dumps(params["args"])[:300])
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(params["entry"]["text"])
        return found

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def centre(self, selector: str, index: int = 0) -> tuple[float, float]:
        box = self.js(
            f"(() => {{ const r = document.querySelectorAll({json.dumps(selector)})[{index}]"
            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        return box[0], box[1]

    def mouse(self, kind: str, at: tuple[float, float]) -> None:
        extra = {"button": "left", "clickCount": 1} if kind != "mouseMoved" else {}
        self.send("Input.dispatchMouseEvent", type=kind, x=at[0], y=at[1], **extra)

    def click(self, at: tuple[float, float]) -> None:
        self.mouse("mousePressed", at)
        self.mouse("mouseReleased", at)

    def close(self) -> None:
        try:
            self._session = ""
            self.send("Browser.close")
            self.process.wait(TIMEOUT_S)
        except (OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._in)
            os.close(self._out)


GEMM_FAST = "sm90_xmma_gemm_bf16_128x128"
GEMM_SLOW = "ampere_sgemm_64x64_nn"
#: the first run of the slower code
STEP_AT = 12


def judged(nodeid: str, device_class: str, median: float, gemm: str | None) -> JudgedRecord:
    """A device time of ``median`` ms (its CI ±1%), with a breakdown of a GEMM kernel and a
    softmax where ``gemm`` names the GEMM."""
    stored = None
    if gemm is not None:
        gemm_us = 250.0 if gemm == GEMM_FAST else 290.0
        stored = Breakdown(
            backend="cuda",
            calls=10,
            total_us=gemm_us + 40,
            host_us=12.0,
            entries=(
                Kernel(gemm, gemm, 1, gemm_us),
                Kernel("softmax_kernel", "softmax_kernel", 1, 40),
            ),
        ).to_json()
    recording = Recording("2026-11-01", median, 0.004, 40, ci=(median * 0.99, median * 1.01))
    record = Record(
        SeriesKey(nodeid), "time:device/cold", device_class, "ms", recording, {}, stored
    )
    return JudgedRecord(record, Verdict(Kind.PASS, ratio=1.0))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 runs' reports, ingested: ``t.py::fwd`` 12% slower from run 12 on GPU A (its GEMM kernel
    replaced) and on GPU B (no breakdown; from run 4 on), ``t.py::flat`` unchanged; the site."""
    root = tmp_path_factory.mktemp("dashboard")
    rng = random.Random(5)
    reports = []
    for i in range(20):
        slow = 1.12 if i >= STEP_AT else 1.0
        records = [
            (
                "t.py::fwd",
                judged(
                    "t.py::fwd",
                    "GPU A",
                    rng.gauss(2.0, 0.005) * slow,
                    GEMM_SLOW if slow > 1 else GEMM_FAST,
                ),
            ),
            ("t.py::flat", judged("t.py::flat", "GPU A", rng.gauss(1.0, 0.005), None)),
        ]
        if i >= 4:
            records.append(
                ("t.py::fwd", judged("t.py::fwd", "GPU B", rng.gauss(3.0, 0.008) * slow, None))
            )
        env = {
            "source": {
                "commit": f"c{i:02d}" + "0123456789abcdef" * 2,
                "dirty": False,
                "branch": "main",
            },
            "recorded_at": f"2026-11-{i + 1:02d}T06:00",
        }
        outcomes = tuple(TestOutcome(n, (r,)) for n, r in records)
        reports.append(root / f"r{i:02d}.json")
        write_report(reports[-1], Report(tests=outcomes, run_id=f"run-{i}", environment=env))
    db = root / "h.sqlite"
    assert main(["history", "ingest", str(db), *map(str, reports)]) == 0
    assert main(["dashboard", str(db), str(root / "site")]) == 0
    return root / "site"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    executable = find_browser()
    if executable is None:
        pytest.skip(
            "no Chromium or Chrome to test the dashboard in (apt-get install chromium, or set "
            "CUDAPERF_TEST_BROWSER)"
        )
    opened = Browser(executable, tmp_path_factory.mktemp("profile"))
    try:
        opened.open_page()
        yield opened
    finally:
        opened.close()


def test_every_page_loads_from_files_with_no_console_error(browser: Browser, site: Path) -> None:
    pages = [site / "index.html", *sorted((site / "tests").iterdir())]
    assert len(pages) == 3
    for page in pages:
        browser.load(page)
        assert browser.problems() == [], page.name
        assert browser.requests(), page.name
        assert all(url.startswith(site.as_uri()) for url in browser.requests()), page.name
    browser.load(site / "index.html")
    assert browser.js("document.querySelectorAll('tbody[data-test] svg.spark').length") == 3
    browser.send("Runtime.evaluate", expression="document.getElementById('filter').focus()")
    browser.send("Input.insertText", text="flat")
    shown = "[...document.querySelectorAll('tbody[data-test]')].filter(b => !b.hidden)"
    assert browser.js(f"{shown}.map(b => b.dataset.test)") == ["t.py::flat"]


def test_each_plot_draws_its_points_and_its_change_points(browser: Browser, site: Path) -> None:
    browser.load(site / "tests" / page_name("t.py::fwd"))
    lines = browser.js(
        "[...document.querySelectorAll('svg.plot-svg g.line')].map(g => "
        "[g.dataset.deviceClass, g.querySelectorAll('circle.pt').length])"
    )
    assert lines == [["GPU A", 20], ["GPU B", 16]]
    assert browser.js("document.querySelector('.plot').dataset.drawn") == "36"
    # each change point's line lies between its last good and first bad runs, on both classes
    drawn = browser.js(
        "[...document.querySelectorAll('g.cp')].map(g => [g.dataset.change, "
        "+g.querySelector('.cp-line').getAttribute('x1'), "
        "g.querySelector('.cp-label').textContent])"
    )
    assert [d[0] for d in drawn] == ["cp-0-0-0", "cp-0-1-0"]
    xs = browser.js(
        "[...document.querySelectorAll('g.line')[0].querySelectorAll('circle.pt')]"
        ".map(c => +c.getAttribute('cx'))"
    )
    for _, x, label in drawn:
        assert xs[STEP_AT - 1] < x < xs[STEP_AT]
        assert label.startswith("+1")  # +11…+13%
    browser.load(site / "tests" / page_name("t.py::flat"))
    assert browser.js("document.querySelectorAll('circle.pt').length") == 20
    assert browser.js("document.querySelectorAll('g.cp').length") == 0
    assert browser.problems() == []


def test_hovering_a_point_shows_its_run_and_clicking_a_change_point_its_kernels(
    browser: Browser, site: Path
) -> None:
    browser.load(site / "tests" / page_name("t.py::fwd"))
    assert browser.js("document.getElementById('tooltip').hidden") is True
    browser.mouse("mouseMoved", browser.centre("g.line circle.pt", STEP_AT))
    assert browser.js("document.getElementById('tooltip').hidden") is False
    text = browser.js("document.getElementById('tooltip').innerText").splitlines()
    assert text[0] == "GPU A"
    assert text[1] == f"commit c{STEP_AT}012345678"
    assert text[2] == f"date 2026-11-{STEP_AT + 1}T06:00".replace("T", " ")
    assert text[3].startswith("value 2.2")
    assert text[3].endswith(" ms)")  # the interval
    assert text[4] == "verdict PASS"

    panel = "document.getElementById('{}')"
    assert browser.js(panel.format("cp-0-0-0") + ".hidden") is True
    browser.click(browser.centre("g.cp .cp-marker", 0))
    assert browser.js(panel.format("cp-0-0-0") + ".hidden") is False
    kernels = browser.js(panel.format("cp-0-0-0") + ".innerText")
    assert f"gemm: {GEMM_FAST} -> {GEMM_SLOW}" in kernels
    assert browser.js("location.hash") == "#cp-0-0-0"
    browser.click(browser.centre("g.cp .cp-marker", 1))
    assert browser.js(panel.format("cp-0-0-0") + ".hidden") is True
    assert "no breakdown recorded for the last good run" in browser.js(
        panel.format("cp-0-1-0") + ".innerText"
    )
    assert browser.problems() == []
