"""An ML engineer asks "is the block drafter really worse than the distilled head on code?" with the
page only: the Debugger's A/B runs both on six prose and six code prompts × 2 seeds, shows its
progress while it runs, answers with counts and intervals, and gives the same acceptance numbers when
run again; Stop keeps the runs so far. Screenshots go to test-artifacts/ (README shows them)."""
import re

import pytest

from tests.test_browser import ARTIFACTS, browser, fill_number, page  # noqa: F401 (fixtures)
from tests.test_browser_teach import _no_toasts

pytestmark = [pytest.mark.browser, pytest.mark.model]

TIMING_FREE = ("acceptance", "α", "tokens per target pass")


def _rows(page) -> dict:
    """The summary table's rows by measure: {measure: [kind, A, B, B − A, call]} (Gradio 6 draws a
    table's rows as [role=row] divs; its <tbody> only sizes the columns)."""
    rows = {}
    for row in page.locator("#sd-ab-table .virtual-body [role=row]").all():
        cells = [c.inner_text().strip() for c in row.locator("[role=gridcell]").all()]
        rows[cells[0]] = cells[1:]
    return rows


def _run_to_the_end(page) -> dict:
    page.locator("#sd-ab-run").click()
    # progress while it runs: runs done of the total and the time left
    page.wait_for_function("/\\d+ of 48 runs done .* left/.test(document.querySelector('#sd-ab-text').innerText)",
                           timeout=300_000)
    page.wait_for_function("document.querySelector('#sd-ab-text').innerText.includes('Done: 48 runs')",
                           timeout=600_000)
    return _rows(page)


def test_ab_of_two_drafts_over_prose_and_code(page):
    page.get_by_role("tab", name="Debugger").click()
    page.wait_for_selector("#sd-ab-run")
    assert [page.locator(f"#sd-ab-{side}-draft textarea").input_value() for side in "ab"] == ["distilled", "block"]
    for side in "ab":
        fill_number(page, f"#sd-ab-{side}-temperature", 0.7)        # sampled: the two seeds draw differently
    fill_number(page, "#sd-ab-tokens", 16)
    checked = page.locator("#sd-ab-sets input[type=checkbox]:checked")
    assert checked.count() == 2                                # prose and code, six prompts each

    first = _run_to_the_end(page)
    measures = list(first)
    assert measures[0].startswith("acceptance") and any(m.startswith("α") for m in measures)
    acceptance = first[measures[0]]
    assert acceptance[0] == "timing-free"
    assert re.search(r"\(\d+/\d+ in \d+ rounds\) \[0\.\d+, [01]\.\d+\]", acceptance[1]), acceptance    # counts, rounds, interval
    assert re.search(r"[+-]\d\.\d+ \[-?\d\.\d+, -?\d\.\d+\]", acceptance[3]), acceptance
    assert acceptance[4] in ("A higher", "B higher", "no difference shown")
    assert any("rounds without a guess" in m for m in measures) and any(m.startswith("tokens/s") for m in measures)
    assert any("kept model guesses" in m for m in measures)
    plot = page.locator("#sd-ab-plot").inner_text()
    assert "A: distilled" in plot and "B: block" in plot and "guesses drafted, A / B" in plot
    vocab = page.locator("#sd-ab-vocab").inner_text()
    assert "8,192 of the target's 49,152" in vocab and "of the rejections" in vocab
    page.wait_for_function("document.querySelectorAll('#sd-ab-prompts .virtual-body [role=row]').length === 12")
    prompts = page.locator("#sd-ab-prompts").inner_text()
    assert "code1" in prompts and "explanation0" in prompts
    page.locator("#sd-ab-table").scroll_into_view_if_needed()
    _no_toasts(page)
    page.screenshot(path=str(ARTIFACTS / "ab.png"), full_page=False)

    # the same A/B again: the timing-free numbers are the same, to the last digit
    second = _run_to_the_end(page)
    for m in measures:
        if m.startswith(TIMING_FREE):
            assert second[m] == first[m], (m, first[m], second[m])

    # Stop keeps what has finished
    page.locator("#sd-ab-run").click()
    page.wait_for_function("/\\d+ of 48 runs done/.test(document.querySelector('#sd-ab-text').innerText)",
                           timeout=300_000)
    page.locator("#sd-ab-stop").click()
    page.wait_for_function("document.querySelector('#sd-ab-text').innerText.startsWith('■ Stopped')")
    assert "the tables keep the runs finished so far" in page.locator("#sd-ab-text").inner_text()
    assert len(_rows(page)) == len(first)

    # on a projector: the A/B's table and chart at 1024 × 768
    page.set_viewport_size({"width": 1024, "height": 768})
    page.locator("#sd-ab-table").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / "ab-1024.png"), full_page=False)


def test_ab_of_one_configuration_on_code_against_prose(page):
    """Issue 61's first complaint, with the page only: "the default draft is accepted far less on code
    than on prose". One configuration (the A/B's defaults, greedy) on the code set (A) against the prose
    set (B): the acceptance difference comes with its interval and a call from it, the speed verdict
    with its interval says "within noise" exactly when that covers 1.0, the vocabulary list shows no
    escaped markup, and the built-in prompts can be read."""
    page.get_by_role("tab", name="Debugger").click()
    page.wait_for_selector("#sd-ab-run")
    b_draft = page.locator("#sd-ab-b-draft textarea")
    b_draft.fill(page.locator("#sd-ab-a-draft textarea").input_value())           # the same configuration
    b_draft.blur()
    fill_number(page, "#sd-ab-tokens", 24)
    page.locator("#sd-ab-sets").get_by_label("prose").uncheck()                  # A: code
    page.locator("#sd-ab-b-sets input").click()
    page.get_by_role("option", name="prose", exact=True).click()                 # B: prose
    page.locator("#sd-ab-run").click()
    page.wait_for_function("document.querySelector('#sd-ab-text').innerText.includes('Done: 12 runs')", timeout=600_000)
    rows = _rows(page)
    acceptance = rows[next(m for m in rows if m.startswith("acceptance"))]
    match = re.fullmatch(r"([+-]\d\.\d+) \[(-?\d\.\d+), (-?\d\.\d+)\]", acceptance[3])
    assert match, acceptance
    low, high = float(match[2]), float(match[3])
    assert acceptance[4] == ("no difference shown" if low <= 0 <= high else "B higher" if low > 0 else "A higher")
    assert all(re.search(r"\(\d+/\d+ in \d+ rounds\)", cell) for cell in acceptance[1:3]), acceptance
    speed = rows[next(m for m in rows if m.startswith("tokens/s"))]
    match = re.search(r"B ÷ A (\d\.\d+)× \[(\d\.\d+), (\d\.\d+)\] over 6 races", speed[3])
    assert match, speed
    covers = float(match[2]) <= 1.0 <= float(match[3])
    assert (speed[4] == "within noise") == covers and speed[4] in ("within noise", "A faster", "B faster")
    plot = page.locator("#sd-ab-plot").inner_text()
    assert "on code" in plot and "on prose" in plot
    page.wait_for_function("document.querySelectorAll('#sd-ab-prompts .virtual-body [role=row]').length === 12")
    vocab = page.locator("#sd-ab-vocab").inner_text()
    assert "Most frequent outside" in vocab
    for escaped in ("&#x27;", "&quot;", "&amp;", "&#39;", "&lt;"):
        assert escaped not in vocab, vocab
    page.locator("#sd-ab-set-texts").get_by_text("Read the built-in prompt sets").click()
    texts = page.locator("#sd-ab-set-list")
    texts.wait_for(state="visible")
    from specdec_core.bench.ab import prompt_sets
    first_code = prompt_sets()["code"][0]["text"]
    assert "code0" in texts.inner_text() and " ".join(first_code.split())[:40] in " ".join(texts.inner_text().split())
    page.locator("#sd-ab-table").scroll_into_view_if_needed()
    _no_toasts(page)
    page.screenshot(path=str(ARTIFACTS / "ab-code-vs-prose.png"), full_page=False)
