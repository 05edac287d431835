"""What a new user hits, in a real browser (issue 27): a refused run or upload leaves the previous
results and a message that stays until the next action (no "Error" badges); a stopped race is
labelled stopped everywhere with the numbers it has; one new token is not called a speedup; every
settings field shows its range and a bad value gets one line naming it; classroom mode makes what a
student reads (lanes, verdict, timeline, chart text) at least 1.5× larger. Screenshots go to
test-artifacts/."""
import re

import pytest

from tests.test_browser import ARTIFACTS, _set_number, browser, open_advanced, page, run_then_stop  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]

RUN_DONE = ("document.querySelector('#sd-banner [data-testid=\"markdown\"]').innerText.trim()"
            ".startsWith('▶ Your run')")


def _banner(page) -> str:
    return page.locator('#sd-banner [data-testid="markdown"]').inner_text()


def _count(page, lane: str) -> int:
    return int(page.locator(f"#sd-lane-{lane} .sd-count").inner_text())


def _no_error_badges(page) -> bool:
    """Gradio marks the outputs of an event that raised with an "Error" status: none may remain."""
    return page.get_by_text("Error", exact=True).count() == 0


def _race(page, prompt: str, max_new: int):
    page.locator("#sd-prompt textarea").fill(prompt)
    _set_number(page, "#sd-max-new", max_new)
    page.locator("#sd-run").click()
    page.wait_for_function(RUN_DONE, timeout=300_000)


def test_a_refused_run_or_upload_keeps_the_results_and_says_why(page, tmp_path):
    page.wait_for_selector("#sd-timeline .sd-tok")
    open_advanced(page)
    # every settings field shows its allowed range, from the one table of ranges
    controls = page.locator("#sd-temperature").inner_text() + page.locator("#sd-max-new").inner_text()
    assert "from 0 to 10 (0 = greedy)" in controls and "from 1 to 256" in controls
    _race(page, "Name three rivers in Europe.", 8)
    shown = (_count(page, "plain"), _count(page, "spec"), page.locator("#sd-verdict").inner_text())
    # the timeline as the race drew it (the round player's highlight of its round aside)
    drawn = lambda: page.locator("#sd-timeline").inner_html().replace(" sd-pl-current", "")
    timeline = drawn()

    def refused(message: str):
        try:
            page.wait_for_function(f"document.querySelector('#sd-banner').innerText.includes({message!r})",
                                   timeout=120_000)
        except Exception:
            raise AssertionError(f"banner: {_banner(page)!r}") from None
        page.wait_for_timeout(500)
        assert (_count(page, "plain"), _count(page, "spec"), page.locator("#sd-verdict").inner_text()) == shown
        assert drawn() == timeline
        assert "The views below are unchanged: ▶ Your run" in _banner(page)
        assert _no_error_badges(page)

    _set_number(page, "#sd-temperature", "1e9")
    page.locator("#sd-run").click()
    refused("temperature must be a number from 0 to 10 (0 = greedy); got 1,000,000,000")
    page.wait_for_timeout(6000)                       # the message stays (a toast would be gone by now)
    assert "Not run: temperature must be" in _banner(page)
    _set_number(page, "#sd-temperature", 0)
    k = page.locator("#sd-k input")
    k.fill("3.5")
    k.press("Enter")
    page.locator("#sd-run").click()
    refused('k must be an integer from 1 to 32 (or "auto"); got \'3.5\'')
    k.fill("auto")
    k.press("Enter")
    page.locator("#sd-target textarea").fill("r" * 300)
    page.locator("#sd-run").click()
    refused("the model name is 300 characters long")
    page.locator("#sd-run").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "newuser-refused-run.png"), full_page=False)
    page.locator("#sd-target textarea").fill("smollm2-135m")
    bad = tmp_path / "not-a-trace.json"
    bad.write_text('{"rows": [1, 2]}')
    with page.expect_file_chooser() as chooser:
        page.locator("#sd-upload").click()
    chooser.value.set_files(str(bad))
    refused("Not loaded: could not load the trace: not-a-trace.json: not a trace file")
    # the next action replaces the message, and nothing of the refusals is left behind
    _race(page, "Name three rivers in Asia.", 6)
    assert "⚠" not in _banner(page) and _count(page, "spec") == 6 and _no_error_badges(page)


def test_a_stopped_race_is_labelled_stopped_with_its_numbers(page):
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.locator("#sd-prompt textarea").fill("Write a long story about a lighthouse keeper and a storm.")
    run_then_stop(page, min_tokens=3)
    page.wait_for_timeout(1500)
    lanes = {lane: page.locator(f"#sd-lane-{lane} h4").inner_text() for lane in ("plain", "spec")}
    assert not any("running" in text for text in lanes.values()), lanes
    stopped = [lane for lane, text in lanes.items() if "stopped after" in text]
    assert stopped, lanes
    for lane in stopped:     # the label, the lane's count and the stats table agree
        n = int(re.search(r"stopped after (\d+) tokens", lanes[lane]).group(1))
        assert _count(page, lane) == n and 0 < n < 200
        assert f"{'plain' if lane == 'plain' else 'speculative'} stopped after {n} tokens" in _banner(page)
    stats = page.locator("#sd-stats").inner_text()
    assert "None" not in stats
    verdict = page.locator("#sd-verdict").inner_text()
    assert "×" not in verdict or "speedup" not in verdict           # no speedup claimed
    page.locator("#sd-verdict").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "newuser-stopped.png"), full_page=False)


def test_one_new_token_is_not_called_a_speedup(page):
    page.wait_for_selector("#sd-timeline .sd-tok")
    _race(page, "Say hello.", 1)
    verdict = page.locator("#sd-verdict").inner_text()
    assert "No speculation in this run" in verdict and not re.search(r"\d×\s*speedup", verdict)
    page.locator("#sd-verdict").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "newuser-no-speculation.png"), full_page=False)


SIZES = """() => { const px = s => { const e = document.querySelector(s);
    return e ? parseFloat(e.style.fontSize || getComputedStyle(e).fontSize) : null; };
  return {lane: px('#sd-lane-spec .sd-lane-text'), count: px('#sd-lane-spec .sd-count'),
          verdict: px('#sd-verdict'), speedup: px('#sd-verdict .sd-speedup'), timeline: px('#sd-timeline .sd-tok'),
          chart_ticks: px('.js-plotly-plot .xtick text'), inspector_ticks: px('#sd-round-plot .xtick text'),
          chart_title: px('.js-plotly-plot .gtitle')}; }"""


def test_classroom_mode_enlarges_lanes_verdict_timeline_and_charts(page):
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .xtick text').length > 0")
    before = page.evaluate(SIZES)
    page.locator("#sd-classroom input").check()
    page.wait_for_function("document.body.classList.contains('sd-classroom')")
    page.wait_for_selector("#sd-wt-strip")                 # classroom mode opens the walkthrough first
    page.get_by_role("tab", name="Race").click()
    page.wait_for_selector("#sd-plain", state="visible")
    # classroom mode folds the round inspector (the round player shows the round): open it to measure it
    page.locator("#sd-inspector-box").get_by_text("One round in detail", exact=False).first.click()
    page.wait_for_selector("#sd-round-plot .xtick text", state="visible")
    page.wait_for_function(f"parseFloat(document.querySelector('#sd-round-plot .xtick text').style.fontSize) >= "
                           f"{1.5 * before['inspector_ticks'] - 0.01}")
    after = page.evaluate(SIZES)
    small = {k: (before[k], after[k]) for k in before if not after[k] >= 1.5 * before[k] - 0.01}
    assert not small, small
    page.locator("#sd-plain").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "newuser-classroom-race.png"), full_page=False)
    # the settings' labels are whole at 1.5× (none cut off with an ellipsis)
    open_advanced(page)
    clipped = page.evaluate("""() => ['#sd-k', '#sd-max-new', '#sd-temperature', '#sd-seed', '#sd-top-k', '#sd-top-p']
        .flatMap(s => [...document.querySelector(s).querySelectorAll('*')])
        .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'auto')
        .map(e => e.innerText.slice(0, 40))""")
    assert clipped == [], clipped
    page.locator("#sd-max-new").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "newuser-classroom-controls.png"), full_page=False)
    # a run in classroom mode keeps the charts large
    _race(page, "Name two oceans.", 4)
    page.wait_for_selector("#sd-round-plot .xtick text")
    assert page.evaluate(SIZES)["inspector_ticks"] >= 1.5 * before["inspector_ticks"] - 0.01
