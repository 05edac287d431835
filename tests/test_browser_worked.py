"""Issue 59 in a real browser (Debian Chromium via Playwright, as tests/test_browser.py): after a Run at
the defaults (sampled), at 1366×768 and at 1024×768 in classroom mode, the Race tab shows the worked
round in words with the run's own numbers (checked against the downloaded trace), the line saying
what limited the run under the verdict, and a count per round in the timeline, readable (its font
enlarged in classroom mode); no player caption says "every guess passed" for a round that left a
guess unchecked; at T = 0 the worked round speaks of agreement. Screenshots: test-artifacts/worked-*.png
(README shows them from assets/screenshots/)."""
import json

import pytest

from specdec_core.trace import decisions
from app.teach.worked import pct, worked_round
from app.token_words import spoken

from tests.test_browser import ARTIFACTS, browser, fill_number  # noqa: F401 (fixtures)
from tests.test_browser_class import _open
from tests.test_browser_player import RUN_DONE, _traces

pytestmark = [pytest.mark.browser, pytest.mark.model]


def _run(page):
    page.locator("#sd-run").click()
    page.wait_for_function(RUN_DONE, timeout=600_000)
    page.wait_for_selector("#sd-worked .sd-worked-ex[data-round]")
    page.wait_for_selector("#sd-limit")


def _check_worked(page, spec):
    """The worked round's sentences name the trace's own guesses, their chances and draws."""
    worked = worked_round(spec)
    for kind, spot in (("kept", worked.kept), ("replaced", worked.replaced)):
        row = page.locator(f'#sd-worked .sd-worked-ex[data-kind="{kind}"]')
        text = row.inner_text()
        if spot is None:
            assert "no guess of this run" in text
            continue
        assert row.get_attribute("data-round") == str(spot.round)
        rnd = spec.rounds[spot.round]
        for t in spot.tries[:5]:
            node = next(n for n in (rnd.tree or rnd.drafted) if (n.u, n.p, n.q) == (t.u, t.p, t.q))   # the recorded guess
            assert spoken(t.text) in text
            if not worked.greedy:
                assert pct(node.keep_at) in text and decisions.test_numbers(node.u, node.keep_at, t.kept, 2)[0] in text
        if spot.written is not None:
            assert spoken(spot.written) in text
    return worked


def _check_race_tab(page, spec, classroom):
    # the limiting line, under the verdict, with the run's own count of kept guesses
    kept, n = sum(r.n_accepted for r in spec.rounds), len(spec.output_ids)
    line = page.locator("#sd-limit").inner_text()
    assert line.startswith("What limited this run:") and f"{kept} of {n} tokens came from kept guesses" in line
    verdict, limit = page.locator("#sd-verdict").bounding_box(), page.locator("#sd-limit").bounding_box()
    assert 0 <= limit["y"] - (verdict["y"] + verdict["height"]) < 40          # right under the verdict
    # a count per round in the timeline, the trace's, and the best round named
    counts = page.locator("#sd-timeline .sd-rcount").evaluate_all("els => els.map(e => Number(e.dataset.count))")
    assert counts == [len(r.committed) for r in spec.rounds]
    best = max(range(len(counts)), key=lambda i: (counts[i], -i))
    assert f"Most from one pass: {counts[best]} (round {best})" in page.locator("#sd-tl-sum").inner_text()
    size = page.locator("#sd-timeline .sd-rcount").first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    assert size >= (15 * 1.5 - 0.5 if classroom else 15), size
    legend = page.locator("#sd-legend").inner_text()
    assert "a new line" in legend and "end of answer" in legend and "tree of 12" in legend
    # the player's captions: "every guess passed" only where every guess of the round was kept
    data = json.loads(page.locator("#sd-player .sd-pl-data").text_content())
    for frame in data["frames"]:
        if frame["phase"] == "decide" and "every guess passed" in frame["caption"]:
            rnd = spec.rounds[frame["round"]]
            assert all(n.decision == "accepted" for n in rnd.tree or []) and rnd.n_accepted == len(rnd.drafted)


@pytest.mark.parametrize("width,height,classroom", ((1366, 768, False), (1024, 768, True)))
def test_after_a_run_the_race_tab_works_the_rule_on_its_numbers(browser, url, tmp_path, width, height, classroom):  # noqa: F811
    page = _open(browser, url, width, height, classroom=classroom)
    try:
        _run(page)
        if classroom:            # classroom mode folds the trace files (one click away)
            page.locator("#sd-files-box").get_by_text("Trace files", exact=False).first.click()
            page.wait_for_selector("#sd-files a.download-link", state="visible")
        spec, _ = _traces(page, tmp_path)
        assert not spec.config.greedy                      # the defaults sample
        worked = _check_worked(page, spec)
        assert worked.kept is not None and worked.replaced is not None
        assert "one guess kept, one replaced" in page.locator("#sd-worked h4").inner_text()
        _check_race_tab(page, spec, classroom)
        for name, selector in (("verdict", "#sd-verdict"), ("worked", "#sd-worked"), ("timeline", "#sd-legend")):
            page.locator(selector).evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(400)
            page.screenshot(path=str(ARTIFACTS / f"worked-{name}-{width}.png"), full_page=False)
    finally:
        page.close()


def test_at_temperature_0_the_worked_round_speaks_of_agreement(browser, url, tmp_path):  # noqa: F811
    page = _open(browser, url, 1366, 768)
    try:
        page.locator("#sd-greedy").click()
        page.wait_for_selector("text=Greedy sampling set")
        fill_number(page, "#sd-max-new", 32)
        _run(page)
        spec, _ = _traces(page, tmp_path)
        assert spec.config.greedy
        _check_worked(page, spec)
        box = page.locator("#sd-worked").inner_text()
        assert "one agreement, one disagreement" in box and "Agreement (round" in box and "they agree" in box
        assert "the draw was" not in box
    finally:
        page.close()
