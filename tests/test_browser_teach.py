"""A teacher in a real browser: steps through one real round in the Walkthrough tab (8 distinct
steps), switches on classroom mode (fonts ≥ 1.5×, the walkthrough first), runs the exactness lab
and the cost-of-a-pass measurement and sees their charts, and opens a shared link that restores the
prompt and settings. Screenshots go to test-artifacts/ (README shows them)."""
import pytest

from tests.test_browser import ARTIFACTS, _choose, _no_toasts, _set_number, browser, page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]

TITLE = "document.querySelector('#sd-wt-text h3') && document.querySelector('#sd-wt-text h3').innerText"


def _open(page, tab):
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.get_by_role("tab", name=tab).click()


def test_walkthrough_steps_through_one_real_round(page):
    _open(page, "Walkthrough")
    page.wait_for_selector("#sd-wt-strip")
    titles, stages = [], []
    for step in range(8):
        page.wait_for_function(f"document.querySelector('#sd-wt-counter').innerText.includes('Step {step + 1} of')")
        page.wait_for_selector("#sd-wt-chart .main-svg")
        titles.append(page.evaluate(TITLE))
        stages.append(page.locator("#sd-wt-strip").get_attribute("data-stage"))
        if step == 4:
            page.screenshot(path=str(ARTIFACTS / "walkthrough.png"), full_page=True)
        if step < 7:
            page.locator("#sd-wt-next").click()
            page.wait_for_function(f"{TITLE} !== {titles[-1]!r}")
    assert len(set(titles)) == 8, titles
    assert "The first rejection: resample from the residual" in titles          # the recorded round has one
    # the strip moves plain → drafted → questions → decided → corrected (a token tree's round has two
    # steps on the decided strip: the tree and its tests, guess by guess)
    order = [s for i, s in enumerate(stages) if i == 0 or s != stages[i - 1]]
    assert order[:5] == ["plain", "drafted", "questions", "decided", "corrected"], stages
    tree_round = "a tree of" in page.locator("#sd-wt-round input").input_value()
    assert stages.count("decided") == (2 if tree_round else 1), stages
    assert ("A token tree: many guesses, one pass" in titles) == tree_round
    page.locator("#sd-wt-back").click()
    page.wait_for_function(f"{TITLE} === {titles[6]!r}")
    # a fully accepted round of the same trace has the bonus step instead
    box = page.locator("#sd-wt-round input")
    box.click()
    page.locator("ul[role=listbox] li", has_text="accepted + bonus").first.click()
    page.wait_for_function("document.querySelector('#sd-wt-counter').innerText.includes('Step 1 of')")
    # ... right after the accept step (four steps in for a chain round, five for a tree round's)
    seen = [page.evaluate(TITLE)]
    while "bonus" not in seen[-1] and len(seen) < 7:
        page.locator("#sd-wt-next").click()
        page.wait_for_function(f"{TITLE} !== {seen[-1]!r}")
        seen.append(page.evaluate(TITLE))
    assert "bonus" in seen[-1] and len(seen) in (5, 6), seen
    assert seen[-2].startswith(("Token by token", "Guess by guess")), seen


def _prose_font_px(page) -> float:
    return page.evaluate("parseFloat(getComputedStyle(document.querySelector('#sd-wt-text .prose, #sd-wt-text')).fontSize)")


def test_classroom_mode_enlarges_and_opens_the_walkthrough(page):
    _open(page, "Walkthrough")
    page.wait_for_selector("#sd-wt-strip")
    before = _prose_font_px(page)
    page.get_by_role("tab", name="Race").click()
    page.locator("#sd-classroom input").check()
    page.wait_for_function("document.body.classList.contains('sd-classroom')")
    page.wait_for_selector("#sd-wt-strip")                 # the walkthrough tab is shown first
    assert page.get_by_role("tab", name="Walkthrough").get_attribute("aria-selected") == "true"
    assert _prose_font_px(page) >= 1.5 * before - 0.5
    page.wait_for_timeout(800)
    page.screenshot(path=str(ARTIFACTS / "classroom.png"), full_page=False)
    page.locator("#sd-classroom input").uncheck()
    page.wait_for_function("!document.body.classList.contains('sd-classroom')")


def test_exactness_lab_and_cost_of_a_pass(page):
    _open(page, "Cost of a pass")
    page.locator("#sd-lab-run").click()
    page.wait_for_function("document.querySelector('#sd-lab-summary').innerText.includes('N = 4,000')",
                           timeout=300_000)
    summary = page.locator("#sd-lab-summary").inner_text()
    assert "speculative (the core's rejection rule)" in summary and "broken variant" in summary
    page.wait_for_selector("#sd-lab-plot .main-svg")
    assert "plain sampling (χ² p =" in page.locator("#sd-lab-plot").inner_text()
    assert "BROKEN VARIANT" in page.locator("#sd-lab-broken").inner_text()
    page.locator("#sd-lab-plot").scroll_into_view_if_needed()
    _no_toasts(page)
    page.screenshot(path=str(ARTIFACTS / "exactness-lab.png"), full_page=False)
    page.locator("#sd-cost-run").click()
    page.wait_for_function("document.querySelector('#sd-cost-summary').innerText.includes('One pass over 1 token')",
                           timeout=300_000)
    assert "measured pass" in page.locator("#sd-cost-plot").inner_text()
    page.locator("#sd-cost-plot").scroll_into_view_if_needed()
    _no_toasts(page)
    page.screenshot(path=str(ARTIFACTS / "cost-of-a-pass.png"), full_page=False)


def test_shared_link_restores_the_settings(page, browser):  # noqa: F811
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.locator("#sd-prompt textarea").fill("Explain tides to a child & keep it short.")
    _choose(page, "#sd-k", "3")
    _set_number(page, "#sd-max-new", 17)
    page.locator("#sd-share").click()
    page.wait_for_function("document.querySelector('#sd-link textarea, #sd-link input').value.startsWith('http')")
    link = page.locator("#sd-link textarea, #sd-link input").first.input_value()
    assert "k=3" in link and "max_new=17" in link
    other = browser.new_page(viewport={"width": 1300, "height": 900})
    other.set_default_timeout(60_000)
    other.goto(link + "&classroom=1&k2=oops")
    other.wait_for_function("document.querySelector('#sd-banner') && "
                            "document.querySelector('#sd-banner').innerText.includes('restored from the link')")
    assert "Ignored: unknown parameter “k2”" in other.locator("#sd-banner").inner_text()
    assert other.locator("#sd-prompt textarea").input_value() == "Explain tides to a child & keep it short."
    assert other.locator("#sd-k input").input_value() == "3"
    assert other.locator("#sd-max-new input[type=number]").input_value() == "17"
    other.wait_for_function("document.body.classList.contains('sd-classroom')")
    other.close()
