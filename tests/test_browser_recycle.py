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


def _session(browser, url):
    """A page in a browser context of its own: its own Gradio session."""
    pg = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    pg.set_default_timeout(60_000)
    pg.goto(url)
    pg.wait_for_selector("#sd-timeline .sd-tok")
    return pg


def _race(pg, prompt: str, max_new: int, temperature=None, chat: bool = True) -> list:
    """Run prompt lookup + recycling on a fixed tree (8 guesses, depth 4: the shape rule's auto reads
    timings, a fixed shape repeats); returns the timeline's tokens (class and text, in order)."""
    from app.form_fields import RECYCLE_CHOICE

    from .test_browser import _choose
    pg.locator("#sd-prompt textarea").fill(prompt)
    _set_number(pg, "#sd-max-new", max_new)
    open_advanced(pg)
    pg.locator("#sd-drafter").get_by_role("radio", name=RECYCLE_CHOICE).check()
    _choose(pg, "#sd-tree", "8,4")
    if temperature is not None:
        _set_number(pg, "#sd-temperature", temperature)
    box = pg.get_by_label("Apply the chat template")
    box.check() if chat else box.uncheck()
    pg.locator("#sd-run").click()
    # the banner says loading, racing, then "Your run" (a second run's banner starts as the first's)
    pg.wait_for_function("!document.querySelector('#sd-banner').innerText.includes('Your run')")
    pg.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Your run')", timeout=600_000)
    return pg.eval_on_selector_all("#sd-timeline .sd-tok", "es => es.map(e => [e.className, e.innerText])")


def test_a_visitor_never_sees_guesses_recalled_from_another_visitors_run(url, browser):
    """Issue 60: session A's run writes "The wizard Zorbunkle lives in Quexton."; session B, on the
    same server, races a prompt ending in " wizard" and its timeline shows no token recalled from A's
    text (the table lived on the loaded target: B was offered ' Z', 'orb', 'unk', ' Que'); B's
    banner says its table started empty; session C repeats B's seeded run and gets the same rounds."""
    a = _session(browser, url)
    _race(a, "Repeat this sentence exactly: The wizard Zorbunkle lives in Quexton.", 16, temperature=0)
    assert "Zorbunkle" in a.locator("#sd-lane-spec").inner_text()
    story = "Once upon a time there was a wizard"
    b = _session(browser, url)
    b_tokens = _race(b, story, 24, chat=False)            # the page's sampler (T 0.7) and seed
    recalled = {text.strip() for cls, text in b_tokens if "sd-src-recycle" in cls}
    assert recalled, "B recalled nothing from its own run: the check would be empty"
    assert not recalled & {"orb", "unk", "Que", "Qu"}, recalled
    assert "warmed by 0 earlier runs" in b.locator("#sd-banner").inner_text()
    b.screenshot(path=str(ARTIFACTS / "recycle-own-session.png"), full_page=False)
    c = _session(browser, url)
    assert _race(c, story, 24, chat=False) == b_tokens     # a fresh session repeats the seeded run
    # the same session's next run recalls its own earlier one, and says so
    _race(b, story, 24, chat=False)
    assert "warmed by 1 earlier run " in b.locator("#sd-banner").inner_text()
    for pg in (a, b, c):
        pg.context.close()
