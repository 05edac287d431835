"""The Debugger's wide tables on a projector (issue 61's trial: at 1024×768 the A/B's per-prompt table
hid B's tokens per pass, the k sweep's hid "rounds" and "tokens / pass"). A real browser (Debian
Chromium via Playwright, as tests/test_browser.py) at 1024×768 fills both tables through the page's
own events, with the model work replaced by the numbers the trial saw (the tables' width depends on
their text, not on the model), and finds every column inside the table: nothing scrolls sideways.
Screenshots: test-artifacts/tables-1024-*.png."""
import pytest

from specdec_core.bench.speed import SpeedRatio

from tests.test_ab import rec
from tests.test_browser import ARTIFACTS, browser  # noqa: F401 (fixture)
from tests.test_browser_teach import _no_toasts

pytestmark = [pytest.mark.browser]

# The trial's k sweep (3 raced repeats on a translation prompt; /work/notes/trial61.md): k, median,
# min, max tok/s, ÷ plain [95 %], kept / drafted, rounds, tokens per pass.
TRIAL_SWEEP = [(0, 30.05, 7.57, 32.34, None, 0, 0, 111, 1.0),
               (1, 17.66, 7.71, 22.69, (0.75, 0.37, 1.51), 12, 129, 129, 1.09),
               (2, 23.49, 3.99, 23.71, (0.67, 0.40, 1.14), 6, 126, 105, 1.06),
               (3, 21.35, 5.69, 26.57, (0.76, 0.63, 0.91), 12, 342, 114, 1.11),
               (4, 22.53, 3.15, 23.2, (0.61, 0.27, 1.37), 9, 432, 108, 1.08),
               (5, 21.09, 3.58, 22.31, (0.61, 0.34, 1.09), 3, 480, 96, 1.03),
               (6, 17.12, 4.47, 19.7, (0.59, 0.54, 0.65), 6, 594, 99, 1.06),
               (7, 17.61, 3.12, 18.41, (0.52, 0.31, 0.86), 9, 819, 117, 1.08),
               (8, 17.63, 3.3, 17.67, (0.52, 0.35, 0.76), 12, 900, 112, 1.11),
               ("auto", 24.03, 3.52, 25.14, (0.87, 0.56, 1.34), 24, 111, 108, 1.22),
               ("tree", 27.41, 8.2, 27.6, (0.96, 0.69, 1.33), 8, 154, 110, 1.07)]


def trial_sweep(final: bool = True) -> dict:
    """bench.sweep.summarise's answer with the trial's numbers."""
    rows = [{"k": k, "runs": 3, "tokens_per_s": tps, "min": lo, "max": hi,
             "speed": None if k == 0 else SpeedRatio(*speed, 3), "speedup": 1.0 if k == 0 else speed[0],
             "acceptance": kept / drafted if drafted else None, "kept": kept, "drafted": drafted, "rounds": rounds,
             "tokens_per_pass": tpp, "alpha": 0.11}
            for k, tps, lo, hi, speed, kept, drafted, rounds, tpp in TRIAL_SWEEP]
    tree = rows[-1]["speed"]
    return {"rows": rows, "theory": {k: 30.05 * (1.1 - 0.05 * k) for k in range(1, 9)}, "alpha": 0.11, "c": 0.132,
            "slope": 0.046, "plain_tokens_per_s": 30.05, "best_measured": 0 if final else None,
            "versus": {"tree": tree} if final else {}, "within_noise": ["tree"] if final else [],
            "best_theory": 1}


def fake_sweep(*args, **kwargs):
    """runs.sweep without a model: every run of 3 repeats × 11 lanes finished at once."""
    class Done:
        finished = True
    total = 3 * len(TRIAL_SWEEP)
    for done in range(1, total + 1):
        yield {"k": TRIAL_SWEEP[(done - 1) % len(TRIAL_SWEEP)][0], "rep": (done - 1) // len(TRIAL_SWEEP),
               "trace": Done(), "done": done, "total": total}


def fake_ab(target_ref, arms, device, prompts, chat, seeds, progress, notify):
    """runs.ab without a model: every (arm, prompt, seed) finished at once, in the real runs' order."""
    class Done:
        finished = True
    by_arm = prompts if isinstance(prompts, dict) else {arm.label: prompts for arm in arms}
    todo = [(arm.label, p["name"], seed) for p in by_arm["A"] for seed in seeds for arm in arms]
    for done, (arm, prompt, seed) in enumerate(todo, 1):
        yield {"trace": Done(), "arm": arm, "prompt": prompt, "seed": seed, "race": f"{prompt}/{seed}",
               "done": done, "total": len(todo)}


def fake_record(trace, arm, prompt, seed, race):
    """A record with the trial's magnitudes: ~35/223 kept per prompt, tokens per pass ~1.5."""
    n = sum(map(ord, prompt + arm)) + seed
    return {**rec(arm, prompt, seed, accepted=10 + n % 30, drafted=180 + n % 60, overlap=(0.33 * 40, 40),
                  new_tokens=32, passes=21 + n % 4, tps=9.7 + n % 5, positions=([6, 3, 1, 0], [60, 55, 50, 45])),
            "race": race}


def overflow(page, selector) -> list:
    """What does not fit inside `selector` as shown: a box whose content is wider than itself (the
    table's sideways scroll, a cell's cut text) and a cell whose right edge lies past the table's.
    Gradio sizes the columns with a table of rows 0 px high: what lies in one is not shown."""
    return page.evaluate("""sel => {
        const box = document.querySelector(sel), right = box.getBoundingClientRect().right;
        const shown = e => { for (let a = e; a && a !== box; a = a.parentElement)
                                 if (a.getBoundingClientRect().height < 1) return false;
                             return true; };
        const wide = [...box.querySelectorAll('*')].filter(e => shown(e) && e.scrollWidth > e.clientWidth + 1)
            .map(e => `${e.tagName}.${e.className} ${e.innerText.trim().slice(0, 30)}: ${e.scrollWidth} > ${e.clientWidth}`);
        const cut = [...box.querySelectorAll('th, td, [role=columnheader], [role=gridcell]')]
            .filter(e => shown(e) && e.getBoundingClientRect().right > right + 1)
            .map(e => `${e.innerText.trim().slice(0, 30)} ends at ${e.getBoundingClientRect().right} > ${right}`);
        return wide.concat(cut);
    }""", selector)


@pytest.fixture
def small_page(url, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.set_default_timeout(60_000)
    page.goto(url)
    yield page
    page.close()


def test_the_sweep_and_ab_tables_fit_a_projector(small_page, monkeypatch):
    from app.debug import ab_tab, runs, tab
    page = small_page
    monkeypatch.setattr(runs, "sweep", fake_sweep)
    monkeypatch.setattr(tab, "summarise", lambda done, final=True: trial_sweep(final))
    monkeypatch.setattr(runs, "ab", fake_ab)
    monkeypatch.setattr(ab_tab, "record", fake_record)
    page.get_by_role("tab", name="Debugger").click()
    page.wait_for_selector("#sd-sweep-run")

    page.locator("#sd-sweep-run").click()
    page.wait_for_function("document.querySelector('#sd-sweep-text').innerText.startsWith('Within noise')")
    # the trial's sweep: plain fastest, but tree auto within noise of it (bench.sweep.best_k_text)
    assert "tree auto ÷ plain = 0.96× [0.69, 1.33] over 3 raced repeats" in page.locator("#sd-sweep-text").inner_text()
    page.wait_for_function("document.querySelectorAll('#sd-sweep-table .virtual-body [role=row]').length === 11")
    table = page.locator("#sd-sweep-table").inner_text()
    assert all(h in table for h in ("÷ plain", "rounds", "tokens / pass")) and "tree auto" in table
    page.locator("#sd-sweep-table").scroll_into_view_if_needed()
    _no_toasts(page)
    page.screenshot(path=str(ARTIFACTS / "tables-1024-sweep.png"), full_page=False)
    assert overflow(page, "#sd-sweep-table") == []
    # every row shown at once, the tree's wrapped acceptance too (no scroll inside the table either)
    assert page.evaluate("""() => { const v = document.querySelector('#sd-sweep-table .virtual-table-viewport');
                                    return v.scrollHeight <= v.clientHeight + 1; }""")

    page.locator("#sd-ab-run").click()
    page.wait_for_function("document.querySelector('#sd-ab-text').innerText.includes('Done:')")
    page.wait_for_function("document.querySelectorAll('#sd-ab-prompts .virtual-body [role=row]').length === 12")
    prompts = page.locator("#sd-ab-prompts").inner_text()
    assert "explanation0" in prompts and "code1" in prompts
    page.locator("#sd-ab-prompts").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "tables-1024-ab-prompts.png"), full_page=False)
    assert overflow(page, "#sd-ab-prompts") == []
    page.locator("#sd-ab-table").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "tables-1024-ab-summary.png"), full_page=False)
    assert overflow(page, "#sd-ab-table") == []
