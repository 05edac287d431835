"""The page with the training-free drafter (prompt lookup + recycling), in a real browser: a race
runs with no draft model, the recalled guesses carry their own mark (⟲) in the timeline, the legend
says what the mark means, and the stats name recycling. Screenshot: test-artifacts/recycle-timeline.png."""
import pytest

from .test_browser import ARTIFACTS, _set_number, browser, greedy, open_advanced, page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]


def test_recalled_guesses_are_marked_in_the_timeline(page):
    from app.form_fields import RECYCLE_CHOICE
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.locator("#sd-prompt textarea").fill("List the planets of the solar system in order, one per line, "
                                             "each with one short fact about it.")
    _set_number(page, "#sd-max-new", 40)
    open_advanced(page)
    page.locator("#sd-drafter").get_by_role("radio", name=RECYCLE_CHOICE).check()
    greedy(page)
    for run in range(2):           # the second race recalls what the first one's passes left in the table
        page.locator("#sd-run").click()
        page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Your run')",
                               timeout=300_000)
        page.wait_for_function(f"document.querySelectorAll('#sd-timeline .sd-round').length > 3", timeout=120_000)
    recalled = page.locator("#sd-timeline .sd-src-recycle")
    assert recalled.count() > 0
    title = recalled.first.get_attribute("title")
    assert "recalled: the target's own earlier top choices" in title, title
    mark = recalled.first.evaluate("e => getComputedStyle(e, '::before').content")
    assert "⟲" in mark, mark
    legend = page.locator(".sd-legend").first.inner_text()
    assert "recalled (the target's own earlier choice)" in legend and "copied by prompt lookup" in legend
    assert "identical token for token" in page.locator("#sd-verdict").inner_text()
    page.locator("#sd-timeline").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "recycle-timeline.png"), full_page=False)
