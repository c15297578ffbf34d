"""The Conduit pages in chromium against Airflow's API server, over the state of real pipeline runs.

The fixtures (conftest.py) run ``orders`` with the CLI (eight batches, a DLQ of about two thousand
records with two error codes) and ``payments`` with ``dag.test()`` of a DAG whose operator recovered it
once. Every expected number is read back from that state (``batches.jsonl``, the audit log, the DLQ)
through the project's own readers, never written into the test. The tests that act (acknowledge,
replay) come after those that read the DLQ, which see it as the runs left it; the Airflow-side tests
after them read nothing the actions change. Screenshots of each view, light and dark, go to
tests/ui/artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from playwright.sync_api import expect

from airflow_conduit.batch_log import read_batches
from airflow_conduit.dlq_tools import DLQEntry, entry_id, read_dlq
from airflow_conduit.record import position_text
from airflow_conduit.state import PipelineState, parse_time
from tests.ui.runs import DAG_ID, TASK_ID, USER, World

pytestmark = pytest.mark.ui

RANGES = ("hour", "day", "run")
CHARTS = ("#chart-throughput", "#chart-dlq", "#chart-duration")
WAIT = 60_000  # ms: the pages fetch their data after load, on a machine that may be busy


# helpers ------------------------------------------------------------------------------------------
def state_of(world: World, pipeline: str) -> PipelineState:
    return PipelineState.of(world.state_dir, pipeline)


def page_url(world: World, pipeline: str) -> str:
    return f"{world.base}/conduit/pipelines/{pipeline}?state_dir={quote(str(world.state_dir), safe='')}"


def api_url(world: World, pipeline: str, tail: str = "") -> str:
    return f"{world.base}/conduit/api/pipelines/{pipeline}{tail}?state_dir={quote(str(world.state_dir), safe='')}"


def events(state: PipelineState, name: str) -> list[dict[str, Any]]:
    return [e for e in state.read_audit() if e["event"] == name]


def expected_points(state: PipelineState, range_: str) -> int:
    """Batches a range covers: those of the latest run, or those that ended in the last hour/day."""
    if range_ == "run":
        batches = read_batches(state)
        latest = max(parse_time(b.run_started_at) for b in batches)
        return sum(1 for b in batches if parse_time(b.run_started_at) == latest)
    since = datetime.now(UTC) - (timedelta(hours=1) if range_ == "hour" else timedelta(days=1))
    return len(read_batches(state, since=since))


def code_of(entry: DLQEntry) -> str | None:
    """The code the DLQ browser filters by: the engine's code metadata, else the (one-line) error."""
    return entry.error_code or entry.error


def read_at(entry: DLQEntry) -> datetime:
    """When the source read the failed record (its ``opencdc.readAt``, nanoseconds since the epoch)."""
    nanos = int(entry.record["metadata"]["opencdc.readAt"])
    return datetime.fromtimestamp(nanos / 1e9, UTC)


@dataclass(frozen=True)
class TimeSplit:
    moment: datetime
    """A whole second (a ``datetime-local`` input's precision) with entries on both sides."""
    before: int
    after: int


def time_split(entries: list[DLQEntry]) -> TimeSplit:
    """The whole second nearest the middle of the entries' read times that has entries on both sides."""
    moments = sorted(read_at(e) for e in entries)
    seconds = sorted({m.replace(microsecond=0) + timedelta(seconds=1) for m in moments[:-1]})
    splits = [
        TimeSplit(s, sum(1 for m in moments if m < s), sum(1 for m in moments if m >= s))
        for s in seconds
        if moments[0] < s <= moments[-1]
    ]
    assert splits, "the entries were all read within one second: no time filter to test"
    return min(splits, key=lambda t: abs(t.before - t.after))


def page_info_pattern(first: int, last: int, total: int) -> re.Pattern[str]:
    return re.compile(rf"^\s*{first:,}\D{{1,3}}{last:,} of {total:,}\s*$")


# The painted background (body's, else html's) as sRGB bytes: a canvas converts any CSS colour syntax.
BACKGROUND_JS = """() => {
  const ctx = document.createElement("canvas").getContext("2d");
  for (const el of [document.body, document.documentElement]) {
    const c = getComputedStyle(el).backgroundColor;
    ctx.clearRect(0, 0, 1, 1);
    ctx.fillStyle = c;
    ctx.fillRect(0, 0, 1, 1);
    const [r, g, b, a] = ctx.getImageData(0, 0, 1, 1).data;
    if (a > 0) return {css: c, rgb: [r, g, b]};
  }
  return {css: "transparent", rgb: [255, 255, 255]};
}"""


def background(target: Any) -> tuple[float, str]:
    """The page's background: its luminance (0 black to 1 white) and its CSS colour, for messages.

    :param target: a page or a frame
    """
    painted = target.evaluate(BACKGROUND_JS)
    r, g, b = (v / 255 for v in painted["rgb"])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b, painted["css"]


def shoot(page: Any, artifacts: Path, name: str, *, full_page: bool = True) -> Path:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def set_airflow_theme(context: Any, world: World, theme: str) -> None:
    """Airflow's own theme choice (next-themes' localStorage ``theme`` on the Airflow origin)."""
    page = context.new_page()
    page.goto(f"{world.base}/api/v2/version")
    page.evaluate("t => window.localStorage.setItem('theme', t)", theme)
    page.close()


def open_pipeline(context: Any, world: World, pipeline: str) -> Any:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    response = page.goto(page_url(world, pipeline))
    assert response is not None and response.status == 200
    page.wait_for_load_state("networkidle")
    page.js_errors = errors  # checked by the callers that care
    return page


def contains(haystack: Any, needle: Any) -> bool:
    """Whether ``needle`` equals ``haystack`` or a value nested anywhere in it."""
    if haystack == needle:
        return True
    if isinstance(haystack, dict):
        return any(contains(v, needle) for v in haystack.values())
    if isinstance(haystack, list):
        return any(contains(v, needle) for v in haystack)
    return False


def poll(check: Any, *, timeout: float, interval: float = 1.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# the runs the state comes from ---------------------------------------------------------------------
def test_the_state_comes_from_real_runs(world):
    orders, payments = state_of(world, "orders"), state_of(world, "payments")
    assert len(read_batches(orders)) >= 8
    assert len(read_dlq(orders.dlq_dir)) >= 1000
    assert len(events(payments, "recovering")) >= 1
    assert payments.read_status()["status"] == "stopped"
    (first, *_), last = events(payments, "started"), events(payments, "started")[-1]
    assert first["airflow"]["dag_id"] == DAG_ID and last["airflow"]["run_id"] == world.dag_run["run_id"]


# list page -----------------------------------------------------------------------------------------
def test_list_page_lists_both_pipelines_and_links_to_them(world, context, artifacts):
    page = context.new_page()
    response = page.goto(f"{world.base}/conduit/")
    assert response is not None and response.status == 200
    rows = page.locator("table#pipelines tr.pipeline-row")
    expect(rows).to_have_count(2)
    assert sorted(r.get_attribute("data-pipeline") for r in rows.all()) == ["orders", "payments"]
    shoot(page, artifacts, "list-light")
    rows.and_(page.locator('[data-pipeline="payments"]')).locator("a").first.click()
    page.wait_for_url(re.compile(r".*/conduit/pipelines/payments(\?.*)?$"))
    expect(page.locator("#timeline")).to_be_attached()


# charts --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pipeline", ["orders", "payments"])
def test_charts_have_a_point_per_batch_in_each_range(world, context, artifacts, pipeline):
    state = state_of(world, pipeline)
    page = open_pipeline(context, world, pipeline)
    counts = {}
    for range_ in RANGES:
        page.locator(f'button[data-range="{range_}"]').click()
        expect(page.locator(f'button[data-range="{range_}"]')).to_have_attribute("aria-pressed", "true")
        for other in set(RANGES) - {range_}:
            expect(page.locator(f'button[data-range="{other}"]')).to_have_attribute("aria-pressed", "false")
        counts[range_] = expected_points(state, range_)
        for chart in CHARTS:
            expect(page.locator(chart)).to_have_attribute("data-points", str(counts[range_]), timeout=WAIT)
            assert page.locator(f"{chart} canvas").count() >= 1, f"{chart} drew nothing"
        lag = page.locator("#chart-lag")
        if any(b.lag for b in read_batches(state)):
            expect(lag).to_have_attribute("data-points", str(counts[range_]))
        else:
            expect(lag).to_be_hidden()
    if pipeline == "payments":
        # Two runs, one batch committed in each: the last run's range is not the day's.
        assert counts["run"] < counts["day"]
    assert counts["day"] == len(read_batches(state))
    assert not page.js_errors
    shoot(page, artifacts, f"{pipeline}-light")


# timeline and audit log ----------------------------------------------------------------------------
def test_timeline_shows_the_recovery_and_the_end(world, context):
    state = state_of(world, "payments")
    started, recovering, faults = (events(state, n) for n in ("started", "recovering", "fault"))
    page = open_pipeline(context, world, "payments")
    runs = page.locator("#timeline .timeline-run")
    expect(runs).to_have_count(len(started), timeout=WAIT)
    backoffs = page.locator("#timeline .timeline-backoff")
    expect(backoffs).to_have_count(len(recovering))
    assert [b.get_attribute("data-attempt") for b in backoffs.all()] == [
        str(e["attempt"]) for e in recovering
    ]
    ends = [r.get_attribute("data-end") for r in runs.all()]
    assert ends[-1] == state.read_status()["status"] == "stopped"
    assert ends[:-1] == ["recovering"] * len(recovering)
    assert page.locator("#timeline .timeline-fault").count() == len(faults)
    fault_title = page.locator("#timeline .timeline-fault").first.get_attribute("title") or ""
    assert faults[0]["code"] in fault_title and faults[0]["node"] in fault_title
    backoff_title = backoffs.first.get_attribute("title") or ""
    assert re.search(rf"\b{recovering[0]['delay']:g}\s*s", backoff_title), backoff_title


@pytest.mark.parametrize("pipeline", ["orders", "payments"])
def test_events_are_rows_of_words(world, context, pipeline):
    audit = state_of(world, pipeline).read_audit()
    page = open_pipeline(context, world, pipeline)
    texts = page.locator("#events tr.event-row td.event-text")
    expect(texts).to_have_count(min(len(audit), 50), timeout=WAIT)
    for text in texts.all_inner_texts():
        assert re.search(r"[A-Za-z]{3,} [A-Za-z]{2,}", text), f"not words: {text!r}"
        assert not text.lstrip().startswith(("{", "[")) and '":' not in text, f"JSON, not words: {text!r}"
    if pipeline == "payments":
        (recovering, *_) = events(state_of(world, pipeline), "recovering")
        said = [t for t in texts.all_inner_texts() if recovering["error"]["code"] in t]
        assert said, "no row says which error the restart followed"


# DLQ browser ---------------------------------------------------------------------------------------
def test_dlq_browser_filters_by_code_and_time_and_pages(world, browser, storage_state):
    entries = read_dlq(state_of(world, "orders").dlq_dir)
    codes = Counter(code_of(e) for e in entries)
    assert len(codes) == 2
    # Times on the page are UTC: a browser in another zone must not shift the filter.
    context = browser.new_context(
        storage_state=storage_state, viewport={"width": 1400, "height": 1000}, timezone_id="Asia/Kolkata"
    )
    page = open_pipeline(context, world, "orders")
    info, rows = page.locator("#dlq-page-info"), page.locator("#dlq tr.dlq-row")
    expect(info).to_have_text(page_info_pattern(1, 50, len(entries)), timeout=WAIT)
    expect(rows).to_have_count(50)
    offered = [o for o in page.locator("#dlq-code option").evaluate_all("os => os.map(o => o.value)") if o]
    assert sorted(offered) == sorted(codes)

    code, count = min(codes.items(), key=lambda item: item[1])
    page.locator("#dlq-code").select_option(code)
    page.locator("#dlq-apply").click()
    expect(info).to_have_text(page_info_pattern(1, 50, count))
    first_page = [r.get_attribute("data-id") for r in rows.all()]
    by_id = {entry_id(e): e for e in entries}
    assert all(code_of(by_id[i]) == code for i in first_page)

    page.locator("#dlq-next").click()
    expect(info).to_have_text(page_info_pattern(51, 100, count))
    second_page = [r.get_attribute("data-id") for r in rows.all()]
    assert len(second_page) == 50 and not set(first_page) & set(second_page)
    page.locator("#dlq-prev").click()
    expect(info).to_have_text(page_info_pattern(1, 50, count))
    assert [r.get_attribute("data-id") for r in rows.all()] == first_page

    # Time, in UTC whatever the browser's zone: the entries the source read from a second on, and before it.
    split = time_split([e for e in entries if code_of(e) == code])
    page.locator("#dlq-since").fill(split.moment.strftime("%Y-%m-%dT%H:%M:%S"))
    page.locator("#dlq-apply").click()
    expect(info).to_have_text(page_info_pattern(1, min(50, split.after), split.after))
    page.locator("#dlq-since").fill("")
    page.locator("#dlq-until").fill(split.moment.strftime("%Y-%m-%dT%H:%M:%S"))
    page.locator("#dlq-apply").click()
    expect(info).to_have_text(page_info_pattern(1, min(50, split.before), split.before))
    page.locator("#dlq-until").fill("")
    page.locator("#dlq-code").select_option("")
    page.locator("#dlq-apply").click()
    expect(info).to_have_text(page_info_pattern(1, 50, len(entries)))
    assert not page.js_errors
    context.close()


def test_dlq_record_opens_in_full(world, context, artifacts):
    entries = {entry_id(e): e for e in read_dlq(state_of(world, "orders").dlq_dir)}
    page = open_pipeline(context, world, "orders")
    row = page.locator("#dlq tr.dlq-row").nth(3)
    expect(row).to_be_visible(timeout=WAIT)
    entry = entries[row.get_attribute("data-id")]
    row.locator(".dlq-position button, .dlq-position a").first.click()
    dialog = page.locator("dialog#dlq-record")
    expect(dialog).to_be_visible()
    expect(dialog.locator("pre")).to_contain_text(entry.error, timeout=WAIT)  # fetched after opening
    shown = json.loads(dialog.locator("pre").inner_text())
    assert contains(shown, entry.error)
    assert contains(shown, entry.record["payload"]["after"]), "the failed record's payload is not shown"
    assert contains(shown, position_text(entry.position)) or contains(shown, entry.position)
    shoot(page, artifacts, "orders-dlq-record-light", full_page=False)


def test_acknowledge_writes_the_audit_log_with_the_users_name(world, context):
    state = state_of(world, "orders")
    entries = {entry_id(e): e for e in read_dlq(state.dlq_dir)}
    acked_before = len(events(state, "acked"))
    page = open_pipeline(context, world, "orders")
    row = page.locator("#dlq tr.dlq-row").first
    expect(row).to_have_attribute("data-state", "pending", timeout=WAIT)
    entry = entries[row.get_attribute("data-id")]
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.type)
        dialog.accept()

    page.on("dialog", answer)
    row.locator("input.dlq-select").check()
    page.locator("#dlq-reason").fill("duplicate order, already booked by hand")
    page.locator("#dlq-acknowledge").click()
    expect(page.locator("#dlq-status")).to_contain_text("1", timeout=WAIT)
    assert asked == ["confirm"]
    acked = poll(lambda: events(state, "acked")[acked_before:], timeout=30, what="the acked audit event")
    assert len(acked) == 1
    assert acked[0]["user"] == USER
    assert acked[0]["reason"] == "duplicate order, already booked by hand"
    assert position_text(entry.position) in json.dumps(acked[0])
    page.reload()
    expect(page.locator(f'#dlq tr.dlq-row[data-id="{entry_id(entry)}"]')).to_have_attribute(
        "data-state", "acknowledged", timeout=WAIT
    )


def test_acknowledge_inside_airflows_frame_asks_with_the_pages_own_dialog(world, context):
    """Airflow frames external views without ``allow-modals``: ``window.confirm()`` would be ignored
    there, so the page asks with its own dialog; Cancel writes nothing, OK acknowledges."""
    state = state_of(world, "orders")
    acked_before = len(events(state, "acked"))
    page = context.new_page()
    native: list[str] = []
    page.on("dialog", lambda dialog: (native.append(dialog.type), dialog.dismiss()))
    page.goto(f"{world.base}/plugin/conduit")
    frame = page.frame_locator("iframe")
    frame.locator('table#pipelines tr.pipeline-row[data-pipeline="orders"] a').first.click(timeout=120_000)
    row = frame.locator('#dlq tr.dlq-row[data-state="pending"]').nth(1)
    expect(row).to_be_visible(timeout=WAIT)
    entry_key = row.get_attribute("data-id")
    row.locator("input.dlq-select").check()
    frame.locator("#dlq-reason").fill("test order")
    frame.locator("#dlq-acknowledge").click()
    expect(frame.locator("dialog#confirm")).to_be_visible()
    frame.locator("#confirm-cancel").click()
    expect(frame.locator("dialog#confirm")).to_be_hidden()
    page.wait_for_timeout(1000)
    assert len(events(state, "acked")) == acked_before, "Cancel acknowledged the record"
    frame.locator("#dlq-acknowledge").click()
    frame.locator("#confirm-ok").click()
    acked = poll(lambda: events(state, "acked")[acked_before:], timeout=30, what="the acked audit event")
    assert [e["user"] for e in acked] == [USER]
    expect(frame.locator(f'#dlq tr.dlq-row[data-id="{entry_key}"]')).to_have_attribute(
        "data-state", "acknowledged", timeout=WAIT
    )
    assert native == [], f"native dialogs in Airflow's frame: {native}"


def test_replay_after_the_fix_reaches_the_destination_and_says_who(world, context, artifacts):
    state = state_of(world, "payments")
    entries = read_dlq(state.dlq_dir)
    assert entries and world.reject_flag.exists()
    page = open_pipeline(context, world, "payments")
    rows = page.locator("#dlq tr.dlq-row")
    expect(rows).to_have_count(len(entries), timeout=WAIT)
    page.on("dialog", lambda dialog: dialog.accept())

    # One record is dropped on purpose first: an acknowledged record is never replayed.
    dropped = rows.last.get_attribute("data-id")
    rows.last.locator("input.dlq-select").check()
    page.locator("#dlq-reason").fill("test payment")
    page.locator("#dlq-acknowledge").click()
    expect(page.locator(f'#dlq tr.dlq-row[data-id="{dropped}"]')).to_have_attribute(
        "data-state", "acknowledged", timeout=WAIT
    )

    world.reject_flag.unlink()  # the cause is fixed: the processor passes these records now
    page.locator("#dlq-replay").click()
    # The status says "Starting the replay..." before the request is sent: wait for the audit event itself.
    (requested,) = poll(
        lambda: events(state, "replay_requested"), timeout=60, interval=0.5, what="replay_requested"
    )
    assert requested["user"] == USER

    def finished() -> dict[str, Any] | None:
        answer = page.request.get(api_url(world, "payments", "/dlq/replay")).json()
        return answer if not answer["running"] and answer["last"] else None

    status = poll(finished, timeout=300, interval=2, what="the replay to finish")
    (replayed,) = events(state, "replayed")
    assert replayed["user"] == USER and replayed["error"] is None
    assert status["last"]["user"] == USER

    wanted = {position_text(e.position) for e in entries if entry_id(e) != dropped}
    delivered = [
        json.loads(line)
        for path in sorted(world.payments_out.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    again = {r["metadata"].get("conduit.replay.of") for r in delivered} - {None}
    assert again == wanted
    assert replayed["delivered"] == len(wanted)

    page.reload()
    expect(rows).to_have_count(len(entries), timeout=WAIT)
    expect(page.locator('#dlq tr.dlq-row[data-state="replayed"]')).to_have_count(len(wanted), timeout=WAIT)
    shoot(page, artifacts, "payments-after-replay-light")


# Airflow's side ------------------------------------------------------------------------------------
def test_task_instance_view_redirects_to_the_pipeline_the_operator_ran(world, context):
    plugins = context.request.get(f"{world.base}/api/v2/plugins").json()["plugins"]
    (ours,) = [p for p in plugins if p["name"] == "conduit"]
    destinations = {v.get("destination") for v in ours["external_views"]}
    assert {"nav", "dag_run", "task_instance"} <= destinations

    page = context.new_page()
    query = {"dag_id": DAG_ID, "run_id": world.dag_run["run_id"], "task_id": TASK_ID, "map_index": -1}
    page.goto(f"{world.base}/conduit/airflow?{urlencode(query)}")
    page.wait_for_url(re.compile(r".*/conduit/pipelines/payments(\?.*)?$"))
    expect(page.locator("#timeline .timeline-run").first).to_be_attached(timeout=WAIT)
    # It links back to the Airflow run, out of any frame.
    back = page.locator(f'a[href*="/dags/{DAG_ID}/runs/"][target="_top"]')
    expect(back.first).to_be_attached(timeout=WAIT)
    assert quote(world.dag_run["run_id"], safe="") in (back.first.get_attribute("href") or "") or (
        world.dag_run["run_id"] in (back.first.get_attribute("href") or "")
    )

    response = page.goto(f"{world.base}/conduit/airflow?{urlencode({**query, 'run_id': 'no-such-run'})}")
    assert response is not None and response.status in (200, 404)
    assert "/conduit/pipelines/" not in page.url
    expect(page.locator("body")).to_contain_text(re.compile(r"no (conduit )?pipeline ran", re.I))


def test_inside_airflows_navigation_in_light_and_dark(world, browser, storage_state, artifacts):
    for theme in ("light", "dark"):
        context = browser.new_context(storage_state=storage_state, viewport={"width": 1400, "height": 1000})
        try:
            set_airflow_theme(context, world, theme)
            page = context.new_page()
            page.goto(f"{world.base}/plugin/conduit")
            frame = page.frame_locator("iframe")
            expect(frame.locator("table#pipelines tr.pipeline-row")).to_have_count(2, timeout=120_000)
            dark_html = page.evaluate("document.documentElement.classList.contains('dark')")
            assert dark_html == (theme == "dark"), "Airflow did not take the theme"
            inner = next(f for f in page.frames if "/conduit/" in f.url)
            shade, css = background(inner)
            assert shade < 0.25 if theme == "dark" else shade > 0.75, (theme, css)
            page.wait_for_timeout(500)
            shoot(page, artifacts, f"airflow-nav-{theme}")
        finally:
            context.close()


def test_pipeline_pages_follow_airflows_dark_theme(world, browser, storage_state, artifacts):
    context = browser.new_context(storage_state=storage_state, viewport={"width": 1400, "height": 1000})
    try:
        set_airflow_theme(context, world, "dark")
        page = context.new_page()
        page.goto(f"{world.base}/conduit/")
        expect(page.locator("table#pipelines tr.pipeline-row")).to_have_count(2, timeout=WAIT)
        assert background(page)[0] < 0.25, background(page)
        shoot(page, artifacts, "list-dark")
        for pipeline in ("orders", "payments"):
            page = open_pipeline(context, world, pipeline)
            expect(page.locator("#chart-throughput")).to_have_attribute("data-points", re.compile(r"\d+"))
            assert background(page)[0] < 0.25, background(page)
            shoot(page, artifacts, f"{pipeline}-dark")
        page.locator("#dlq tr.dlq-row .dlq-position button").first.click()
        expect(page.locator("dialog#dlq-record pre")).to_contain_text('"record"', timeout=WAIT)
        shoot(page, artifacts, "payments-dlq-record-dark", full_page=False)
        light = open_pipeline(context, world, "orders")
        light.evaluate("window.localStorage.setItem('theme', 'light')")
        light.reload()
        expect(light.locator("#chart-throughput")).to_have_attribute("data-points", re.compile(r"\d+"))
        assert background(light)[0] > 0.75, background(light)
    finally:
        context.close()


def test_the_task_instances_tab_in_airflow_frames_the_pipeline_page(world, browser, storage_state, artifacts):
    """Airflow's own task instance page, its "Conduit pipeline" tab (an external view): the pipeline."""
    run_id = world.dag_run["run_id"]
    for theme in ("light", "dark"):
        context = browser.new_context(storage_state=storage_state, viewport={"width": 1400, "height": 1000})
        try:
            set_airflow_theme(context, world, theme)
            page = context.new_page()
            page.goto(f"{world.base}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/{TASK_ID}")
            tab = page.get_by_role("link", name=re.compile("Conduit pipeline", re.I)).or_(
                page.get_by_role("tab", name=re.compile("Conduit pipeline", re.I))
            )
            tab.first.click(timeout=120_000)
            frame = page.frame_locator("iframe")
            expect(frame.locator("#timeline .timeline-run").first).to_be_attached(timeout=WAIT)
            inner = next(f for f in page.frames if "/conduit/" in f.url)
            assert "/conduit/pipelines/payments" in inner.url
            shade, css = background(inner)
            assert shade < 0.25 if theme == "dark" else shade > 0.75, (theme, css)
            page.wait_for_timeout(500)
            shoot(page, artifacts, f"airflow-task-instance-tab-{theme}")
        finally:
            context.close()
