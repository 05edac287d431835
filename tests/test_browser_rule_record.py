"""Every view tells the rule the decoder ran (issue 45), in a real browser: each "u = a < / ≥ test = b"
the page prints — the timeline's tooltips and the round player's cards — is true of its numbers,
agrees with the guess's mark, and no guess of a token tree is shown tested against p/q. On the
recorded race of the first paint (written before the rule recorded its tests: derived on load),
after a Run at the defaults, and on an uploaded greedy /1 trace (no u drawn: the top-token test)."""
import re
from pathlib import Path

import pytest

from .test_browser import ARTIFACTS, browser, page  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]

DATA = Path(__file__).resolve().parent / "data"
TEST = re.compile(r"u = (\d+\.\d+) ([<≥]) (min\(1, p/q\)|r\(x\)/Σr) = (\d+\.\d+)")

# What the page shows, per guess: (where, printed text, "accepted"/"rejected"/…, in a token tree?)
COLLECT = """() => {
  const out = [];
  document.querySelectorAll('#sd-timeline .sd-round').forEach(r => {
    const tree = r.querySelector('.sd-guesses') !== null;
    r.querySelectorAll('.sd-tok[title]').forEach(t => {
      const cls = Array.from(t.classList).find(c => ['sd-accepted', 'sd-rejected'].includes(c)) || '';
      out.push(['timeline', t.getAttribute('title'), cls.replace('sd-', ''), tree]);
    });
  });
  document.querySelectorAll('.sd-pl-card').forEach(c => {
    const depths = Array.from(c.querySelectorAll('.sd-pl-g')).map(g => g.dataset.depth);
    const tree = depths.length !== new Set(depths).size;
    c.querySelectorAll('.sd-pl-g').forEach(g => {
      const test = g.querySelector('.sd-pl-test');
      out.push(['player', test ? test.textContent : '', g.dataset.decision, tree]);
    });
  });
  return out;
}"""


def printed_tests_are_true(page) -> int:
    """Check every printed test on the page; the number of tests found."""
    found = 0
    for where, text, decision, tree in page.evaluate(COLLECT):
        for u, rel, name, limit in TEST.findall(text):
            found += 1
            assert (float(u) < float(limit)) == (rel == "<"), f"{where}: false as printed: {text!r}"
            assert decision == ("accepted" if rel == "<" else "rejected"), f"{where}: mark disagrees: {text!r}"
            assert not (tree and name.startswith("min")), f"{where}: a tree guess tested against p/q: {text!r}"
    return found


def test_every_printed_test_is_the_rules(page):
    page.wait_for_selector("#sd-timeline .sd-tok")
    assert printed_tests_are_true(page) > 0                 # the recorded race of the first paint

    page.locator("#sd-run").click()                          # a Run at the defaults (sampled, tree = auto)
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Your run')", timeout=300_000)
    page.wait_for_selector("#sd-timeline .sd-tok")
    assert printed_tests_are_true(page) > 0

    with page.expect_file_chooser() as fc:                   # a trace written before the rule recorded them
        page.locator("#sd-upload").click()
    fc.value.set_files([str(DATA / "trace_v1_before_regroup.speculative.json"),
                        str(DATA / "trace_v1_before_regroup.plain.json")])
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Loaded from file')")
    # That file is greedy: no u is drawn, and every checked guess says it met the top-token test.
    assert printed_tests_are_true(page) == 0
    titles = page.locator("#sd-timeline .sd-accepted[title], #sd-timeline .sd-rejected[title]").evaluate_all(
        "els => els.map(e => e.getAttribute('title'))")
    assert titles and all("temperature 0: kept only if it is the target's top token" in t for t in titles)
    page.screenshot(path=str(ARTIFACTS / "rule-record.png"), full_page=False)
