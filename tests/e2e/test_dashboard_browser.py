"""The dashboard in a real headless Chromium: a real collector, two agents replaying H200 traces.

``trainsentry serve`` runs with its live verdicts; ``trainsentry replay`` sends a DDP training trace
and a one-way-send (prefill → decode hand-off, i.e. disaggregated inference) trace, both built
from the readings taken on the real H200s (``tests/detect/probe_traces.py``), as two nodes. The
browser logs in with an inspector token, must see both nodes with their verdicts on the overview,
and the node view must draw the samples (each canvas records how many points it drew). Screenshots
go to ``tests/artifacts/`` (or ``$TRAINSENTRY_ARTIFACTS``).

Chromium is the distribution's (``apt-get install chromium``; ``make test`` installs it under CI),
driven by the Python ``playwright`` package with ``executable_path`` (no browser download).
Without either, the test skips locally with the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from detect.probe_traces import GIB, IDLE_MEM_BYTES, write_probe_trace  # noqa: E402

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
# Each replay streams this long at real time; the checks run while it streams. Long enough that the
# verdict wait (up to 45 s), Chromium's start on a loaded 2-core machine and the page checks all end
# before the replays do: a node that stops sending reads "unmonitored" after 3 s, not its verdict.
WORKLOAD_S = 180.0
ARTIFACTS = Path(os.environ.get("TRAINSENTRY_ARTIFACTS", TESTS / "artifacts"))


def _browser_or_reason() -> tuple[str | None, str | None]:
    exe = os.environ.get("TRAINSENTRY_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return None, "no system Chromium (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "the Python package playwright is not installed (pip install playwright; no browser download)"
    return exe, None


@pytest.fixture(scope="module")
def chromium() -> str:
    exe, reason = _browser_or_reason()
    if exe is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"browser test cannot run under CI: {reason}")
        pytest.skip(reason)
    return exe


def _get(url: str, token: str) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def _collector_and_replays(tmp_path: Path, traces: dict[str, Path], models: Path):
    """A real ``trainsentry serve`` loading the artifacts under ``models`` and one ``trainsentry replay``
    per node of ``traces``; yields (url, inspector token); stops them all afterwards."""
    from trainsentry.collector.auth import enroll_inspector_in
    from trainsentry.collector.store import Store

    db = tmp_path / "collector.db"
    store = Store(db)
    for node in traces:
        (tmp_path / f"{node}.key").write_text(store.enroll(node) + "\n")
    store.close()
    token = enroll_inspector_in(db, "e2e-inspector")
    env = {**os.environ, "TRAINSENTRY_MODELS": str(models), "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "trainsentry.cli", "serve", "--db", str(db), "--port", "0"],
                              stdout=subprocess.PIPE, text=True, env=env)]
    try:
        line = procs[0].stdout.readline()
        assert "listening on" in line, line
        url = line.strip().rsplit(" ", 1)[-1]
        for node, trace in traces.items():
            procs.append(subprocess.Popen([sys.executable, "-m", "trainsentry.cli", "replay", str(trace), "--collector",
                                           url, "--node", node, "--key-file", str(tmp_path / f"{node}.key"),
                                           "--spool", str(tmp_path / f"{node}.spool.db")],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        yield url, token
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def fleet(tmp_path):
    """A collector and two replaying agents; yields (url, token)."""
    traces = {"h200-train": write_probe_trace(tmp_path / "traces", "ddp", [("idle", 3.0, IDLE_MEM_BYTES),
                                              ("ddp", WORKLOAD_S, 20 * GIB)], "training", "ddp", "ddp-180"),
              "h200-infer": write_probe_trace(tmp_path / "traces", "disagg", [("idle", 3.0, IDLE_MEM_BYTES),
                                              ("send", WORKLOAD_S, 30 * GIB)], "inference", "disagg", "disagg-180")}
    # untrained comm-rules: the verdicts must not depend on whatever models/ holds on this machine
    with _collector_and_replays(tmp_path, traces, tmp_path / "no-models") as (url, token):
        yield url, token


@contextlib.contextmanager
def _browser_page(chromium: str):
    """A headless Chromium page and the list its page errors land in; the browser closes afterwards."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            browser.close()


def _wait_for_verdicts(url: str, token: str, want: dict[str, str], timeout_s: float = 45.0) -> dict:
    deadline, doc = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        doc = _get(f"{url}/v1/overview", token)
        states = {n["node"]: n["state"] for n in doc["nodes"]}
        if all(states.get(k) == v for k, v in want.items()):
            return doc
        time.sleep(1.0)
    raise AssertionError(f"verdicts never reached {want}: {json.dumps(doc)[:2000]}")


def test_dashboard_shows_both_nodes_with_their_verdicts_and_plots_their_data(chromium, fleet):
    url, token = fleet
    want = {"h200-train": "training", "h200-infer": "inference"}
    _wait_for_verdicts(url, token, want)  # the server side first: a browser failure then means the page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _browser_page(chromium) as (page, errors):
        # without a session the dashboard sends the browser to the login form
        page.goto(f"{url}/dashboard")
        assert "/login" in page.url
        page.goto(f"{url}/login#token={token}")   # what `make demo` prints: the fragment logs in
        page.wait_for_url(f"{url}/dashboard")
        page.wait_for_selector("body[data-loaded='1']")
        for node, state in want.items():
            row = page.locator(f"#nodes tr[data-node='{node}']")
            assert row.get_attribute("data-state") == state, (node, row.inner_text())
            assert state in row.inner_text()
        page.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"), full_page=True)

        page.goto(f"{url}/dashboard/nodes/h200-train")
        page.wait_for_selector("body[data-loaded='1']")
        assert page.locator("#state").get_attribute("data-state") == "training"
        assert "P(training)" in page.locator("#evidence").inner_text()
        plots = page.eval_on_selector_all("canvas[data-plot]", "cs => cs.map(c => [c.closest('[data-device]')"
                                          ".dataset.device, c.dataset.plot, Number(c.dataset.points)])")
        drawn = {(dev, plot): n for dev, plot, n in plots}
        assert drawn[("gpu0", "nvlink")] > 10 and drawn[("gpu1", "power")] > 10, drawn
        assert int(page.locator("#timeline").get_attribute("data-spans")) > 0
        # the canvas really holds ink, not only a counter: some non-background pixels in the plot
        inked = page.evaluate("""() => { const c = document.querySelector("[data-device='gpu0'] canvas[data-plot='nvlink']");
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
            for (let i = 0; i < d.length; i += 4)
              if (d[i + 3] > 0 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 80) n++;
            return n; }""")  # the TX/RX lines are the only saturated colour (grid, marks, shading are grey)
        assert inked > 50, inked
        page.screenshot(path=str(ARTIFACTS / "dashboard-node.png"), full_page=True)

        page.goto(f"{url}/dashboard/nodes/h200-infer")
        page.wait_for_selector("body[data-loaded='1']")
        assert page.locator("#state").get_attribute("data-state") == "inference"
    assert errors == [], errors


REPO = TESTS.parent
LOW_DUTY = REPO / "data" / "redteam-x1" / "adv.throttle.dit-b-lowutil-5022a8-r0"   # DiT trainer, 2.8 % busy


@pytest.fixture
def floor_node(tmp_path):
    """A collector with the committed artifacts (models/) and one agent replaying the red team's DiT-B/2
    trainer held to a 10 % duty cycle, recorded on the H200: below the single-device check's busy floor
    in every window. Yields (url, token, node)."""
    node = "h200-floor"
    with _collector_and_replays(tmp_path, {node: LOW_DUTY}, REPO / "models") as (url, token):
        yield url, token, node


def test_a_node_under_the_busy_floor_shows_its_bound_not_silence(chromium, floor_node):
    """The overview marks the node whose latest window lay under the floor with that window's bound, and
    the node view sums the bound over the last hour, as the verdict API does (never a lead, never a P)."""
    url, token, node = floor_node
    deadline, doc = time.monotonic() + 60.0, {}
    while time.monotonic() < deadline:
        doc = _get(f"{url}/v1/nodes/{node}/verdict", token)
        if (doc.get("below_floor") or {}).get("windows", 0) >= 3 and doc.get("floor_flop"):
            break
        time.sleep(1.0)
    else:
        raise AssertionError(f"no bound below the floor: {json.dumps(doc)[:2000]}")
    assert doc["state"] != "training" and doc["single_device_lead"]["windows_spoken"] == 0, doc
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _browser_page(chromium) as (page, errors):
        page.goto(f"{url}/login#token={token}")
        page.wait_for_url(f"{url}/dashboard")
        marker = page.wait_for_selector(f"#nodes tr[data-node='{node}'] span.floor", timeout=20000)
        assert float(marker.get_attribute("data-floor-flop")) > 1e12 and "under floor" in marker.inner_text()
        page.screenshot(path=str(ARTIFACTS / "dashboard-overview-floor.png"), full_page=True)

        page.goto(f"{url}/dashboard/nodes/{node}")
        page.wait_for_selector("body[data-loaded='1']")
        line = page.wait_for_selector("#below-floor", timeout=10000)
        text = line.inner_text()
        assert "below the busy floor" in text and "at most" in text and "FLOP" in text, text
        assert float(line.get_attribute("data-floor-flop")) >= doc["below_floor"]["tensor_flop_max"] > 0
        assert "single-device check, in the hour" not in page.locator("#alerts").inner_text()
        page.screenshot(path=str(ARTIFACTS / "dashboard-node-floor.png"), full_page=True)
        # the job its windows formed: the bound summed over the job's range, on the job view
        job = _get(f"{url}/v1/nodes/{node}/verdict", token)["job"]
        assert job, "the replayed trainer formed no job"
        page.goto(f"{url}/dashboard/jobs/{job}")
        page.wait_for_selector("body[data-loaded='1']")
        fact = page.wait_for_selector("#job-facts #below-floor", timeout=10000)
        assert "at most" in fact.inner_text() and float(fact.get_attribute("data-floor-flop")) > 1e12, fact.inner_text()
        # beside the saved estimator's FLOPs, the ceiling in any precision (the trace has GPM)
        ceiling = page.wait_for_selector("#flops-ceiling", timeout=10000)
        assert float(ceiling.get_attribute("data-flops")) > 1e12 and "any precision" in ceiling.inner_text()
    assert errors == [], errors
