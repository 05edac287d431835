"""A real browser (Debian Chromium via Playwright, as tests/test_browser.py) runs a race on a machine
whose clock cannot be trusted: the decoder's clock is replaced by one that ticks at random, so the
verdict must say the timings are too unstable to explain the speedup instead of explaining it.
Screenshot: test-artifacts/honest-unstable.png."""
import random
from types import SimpleNamespace

import pytest

from tests.test_browser import ARTIFACTS, _choose, _set_number, browser, page, url  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]


@pytest.fixture
def unstable_clock(monkeypatch):
    """The decoder's clock (plain decoding runs the same loop: decoding.speculative's `time`) moves
    1 to 100 ms between two readings, log-uniformly at random: every round's timings are noise."""
    from specdec_core.decoding import speculative
    rng, now = random.Random(27), [0.0]

    def perf_counter():
        now[0] += 0.001 * 10 ** rng.uniform(0, 2)
        return now[0]
    monkeypatch.setattr(speculative, "time", SimpleNamespace(perf_counter=perf_counter, time=speculative.time.time))


def test_a_race_on_an_unstable_clock_says_its_timings_cannot_explain_the_speedup(page, unstable_clock):
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.locator("#sd-prompt textarea").fill("Name three rivers in Europe and one fact about each.")
    _set_number(page, "#sd-max-new", 24)
    _choose(page, "#sd-k", "4")
    page.locator("#sd-run").click()
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Your run')", timeout=300_000)
    verdict = page.locator("#sd-verdict").inner_text()
    assert "speedup measured, but the timings are too unstable to explain it" in verdict
    why = page.locator("#sd-why").inner_text()
    assert why.startswith("Why: not explained, the timings are too unstable:")
    assert "Limited most by" not in why and "accepted too rarely" not in why
    # the number that tripped the rule is on the page: a spread (×) or a v(m) out of its range
    assert "×" in why.split("unstable:")[1] or "v(" in why
    page.locator("#sd-verdict").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "honest-unstable.png"), full_page=False)
