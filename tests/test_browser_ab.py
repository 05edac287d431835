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
    assert re.search(r"\(\d+/\d+\) \[0\.\d+, [01]\.\d+\]", acceptance[1]), acceptance    # counts and an interval
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
