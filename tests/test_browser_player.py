"""The round player and the walkthrough of this run in a real browser (Debian Chromium via
Playwright, as tests/test_browser.py; issue 36): after a Run the player steps round by round, and
the timeline, the inspector and both lanes show the round the trace holds; playing at the default
pace takes at least half a second a round; a click on a timeline round moves the player; the
walkthrough walks the same race, a token tree's round names its children in the order tried with
r(x)/Σr, and at the last step Next does nothing. Screenshots: test-artifacts/player-*.png."""
import re
import time

import pytest

from specdec_core import Trace
from specdec_core.trace.decisions import DECISIONS, draft_decision

from tests.test_browser import ARTIFACTS, _choose, _set_number, browser, page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]

RUN_DONE = ("document.querySelector('#sd-banner [data-testid=\"markdown\"]').innerText.trim()"
            ".startsWith('▶ Your run')")
COPY_PROMPT = ("Summarize the following meeting notes in three bullet points, reusing their wording.\n\n"
               "Meeting notes: The team agreed that the release will move to Friday. The team agreed that the "
               "release notes must list every API change. Alice will update the release notes.")


def _traces(page, tmp_path):
    """The race's two trace files, downloaded from the page."""
    out = {}
    links = page.locator("#sd-files a.download-link")
    for i in range(links.count()):
        with page.expect_download() as dl:
            links.nth(i).click()
        path = tmp_path / dl.value.suggested_filename
        dl.value.save_as(path)
        t = Trace.load(path)
        out["plain" if t.config.mode == "autoregressive" else "spec"] = t
    return out["spec"], out["plain"]


def _player_round(page) -> int:
    return int(page.locator("#sd-player").get_attribute("data-round"))


def _lane(page, lane: str) -> int:
    return int(page.locator(f'#sd-player .sd-pl-lane[data-lane="{lane}"] .sd-pl-n').inner_text())


def _run_copy_prompt(page, tmp_path, tree=None):
    """Run the copy-heavy prompt (many rounds, token trees) and return its downloaded traces;
    `tree`: a fixed budget "N,D" (every round a token tree), else the page's default (auto)."""
    page.wait_for_selector("#sd-player .sd-pl-controls")
    page.locator("#sd-prompt textarea").fill(COPY_PROMPT)
    _set_number(page, "#sd-max-new", 40)
    if tree is not None:
        _choose(page, "#sd-tree", tree)
    page.locator("#sd-run").click()
    page.wait_for_function(RUN_DONE, timeout=300_000)
    return _traces(page, tmp_path)


def test_the_player_steps_plays_and_leads_the_linked_views(page, tmp_path):
    # a small tree budget (at most 5 tokens a round): 40 tokens take at least 8 rounds, whatever the
    # acceptance on this machine (auto may verify trees of depth 8 and finish in 4)
    spec, plain = _run_copy_prompt(page, tmp_path, tree="4,4")
    assert len(spec.rounds) >= 5
    page.locator("#sd-player").scroll_into_view_if_needed()
    # Back to the first round, then three steps forward: round 3.
    for _ in range(len(spec.rounds) + 1):
        page.locator('#sd-player .sd-pl-btn[data-act="back"]').click()
    page.locator('#sd-player .sd-pl-btn[data-act="fwd"]').click()          # round 0 done
    for _ in range(3):
        page.locator('#sd-player .sd-pl-btn[data-act="fwd"]').click()
    assert _player_round(page) == 3
    # both lanes: the tokens the trace holds after round 3, plain's by the same moment on its own clock
    t3 = spec.rounds[3].t_end
    assert _lane(page, "spec") == sum(len(r.committed) for r in spec.rounds[:4])
    assert _lane(page, "plain") == sum(len(r.committed) for r in plain.rounds if r.t_end <= t3 + 1e-9)
    # the round's guesses and their decisions, in the order tried
    rnd = spec.rounds[3]
    expected = ([n.decision for n in rnd.tree] if rnd.tree else [draft_decision(t) for t in rnd.drafted])
    card = page.locator('#sd-player .sd-pl-card[data-round="3"]')
    assert card.locator(".sd-pl-g").evaluate_all("els => els.map(e => e.dataset.decision)") == expected
    # the timeline highlights round 3; the inspector follows
    assert page.locator("#sd-timeline .sd-round.sd-pl-current").get_attribute("data-round") == "3"
    page.wait_for_function("Number(document.querySelector('#sd-round input[type=number]').value) === 3",
                           timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "player-round3.png"), full_page=False)
    # a click on round 1 in the timeline moves the player there
    page.locator('#sd-timeline .sd-round[data-round="1"] .sd-rn').click()
    page.wait_for_function("document.querySelector('#sd-player').dataset.round === '1'")
    # playing at the default pace: at least half a second per round
    page.locator('#sd-player .sd-pl-btn[data-act="play"]').click()
    seen, start = [1], time.monotonic()
    while len(seen) < 4 and time.monotonic() - start < 20:
        r = _player_round(page)
        if r != seen[-1]:
            seen.append(r)
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    page.locator('#sd-player .sd-pl-btn[data-act="play"]').click()          # pause
    assert seen == [1, 2, 3, 4] and elapsed >= 0.5 * 3, (seen, elapsed)


def test_the_walkthrough_walks_this_race_and_ends(page, tmp_path):
    # a fixed tree budget: under load the shape rule may choose chains only, and this walk needs a tree
    spec, _ = _run_copy_prompt(page, tmp_path, tree="8,4")
    page.get_by_role("tab", name="Walkthrough").click()
    page.wait_for_selector("#sd-wt-text")
    # the default source is this page's race: its round list holds this race's rounds
    page.wait_for_function(f"document.querySelector('#sd-wt-round input').value.startsWith('round ')")
    trees = [r.index for r in spec.rounds if r.tree]
    assert trees, "the race verified no token tree"
    if "a tree of" not in page.locator("#sd-wt-round input").input_value():
        # the walkthrough opened on a chain round: pick the race's first tree round
        page.locator("#sd-wt-round input").click()
        page.locator("ul[role=listbox] li", has_text=f"round {trees[0]} · a tree of").first.click()
        page.wait_for_function("document.querySelector('#sd-wt-round input').value.includes('a tree of')")
        page.wait_for_timeout(500)
    text = ""
    for _ in range(12):
        text = page.locator("#sd-wt-text").inner_text()
        if "r(x)/Σr =" in text and "After" in text:
            break
        page.locator("#sd-wt-next").click()
        page.wait_for_timeout(400)
    assert "r(x)/Σr =" in text           # the page samples at T 0.7: each child tried with its r(x)/Σr
    assert re.search(r"After the committed text: .+", text)
    page.screenshot(path=str(ARTIFACTS / "player-walkthrough-tree.png"), full_page=False)
    # walk to the end: Next is disabled there and a click changes nothing
    for _ in range(12):
        if page.locator("#sd-wt-next").is_disabled():
            break
        page.locator("#sd-wt-next").click()
        page.wait_for_timeout(400)
    counter = page.locator("#sd-wt-counter").inner_text()
    m = re.search(r"Step (\d+) of (\d+)", counter)
    assert m and m.group(1) == m.group(2) and page.locator("#sd-wt-next").is_disabled()
    page.locator("#sd-wt-next").click(force=True)
    page.wait_for_timeout(500)
    assert page.locator("#sd-wt-counter").inner_text() == counter


def test_a_round_without_guesses_says_the_target_wrote_it(page, default_pair, tmp_path):
    """Issue 44 item 4: a round that drafted nothing is shown as the target's own token — its mark
    and tooltip in the timeline, the legend, the round player's caption — never as a lone "bonus".
    The race is a real decode of the default target replaying a schedule whose every other round
    is a plain step (k = 0: what the shape rule does when no guess pays), loaded as files."""
    from specdec_core import autoregressive_generate, speculative_generate
    ids = default_pair.encode_prompt(COPY_PROMPT, chat=True)
    spec = speculative_generate(default_pair, ids, k=2, max_new_tokens=12, k_schedule=[2, 0, 2, 0])
    plain = autoregressive_generate(default_pair, ids, max_new_tokens=12)
    own = [r.index for r in spec.rounds if not r.drafted and not r.tree]
    assert own, "the schedule's plain steps are rounds without guesses"
    files = [tmp_path / "spec.trace.json", tmp_path / "plain.trace.json"]
    spec.save(files[0])
    plain.save(files[1])
    page.wait_for_selector("#sd-timeline .sd-tok")
    with page.expect_file_chooser() as fc:
        page.locator("#sd-upload").click()
    fc.value.set_files([str(f) for f in files])
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Loaded from file')")
    page.wait_for_selector(f'#sd-timeline .sd-round[data-round="{own[0]}"]')
    for r in own:
        toks = page.locator(f'#sd-timeline .sd-round[data-round="{r}"] .sd-tok')
        assert toks.count() == 1 and "sd-own" in toks.get_attribute("class")
        assert "no guess this round: the target wrote one token itself" in toks.get_attribute("title")
    assert DECISIONS["own"].words in page.locator(".sd-legend").first.text_content()     # said in words (issue 59)
    assert page.locator("#sd-timeline .sd-bonus").count() == sum(
        1 for r in spec.rounds if r.drafted and r.n_accepted == len(r.drafted))   # bonus only after kept guesses
    # the player, moved there by a click on the round in the timeline, says it in its caption
    page.locator(f'#sd-timeline .sd-round[data-round="{own[0]}"] .sd-rn').click()
    page.wait_for_function(f"document.querySelector('#sd-player').dataset.round === '{own[0]}'")
    caption = page.locator("#sd-player .sd-pl-caption").inner_text()
    assert caption.startswith("No guesses this round: the target writes one token itself"), caption
    page.locator("#sd-player").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "player-no-guess.png"), full_page=False)


def test_a_link_with_a_round_opens_the_player_and_the_inspector_on_it(page, url):
    """A share link's round (?round=N): the player rests there and the linked views are drawn on it
    from the start: the round picker, the inspector's figure, the tokens-vs-time marker."""
    page.goto(url + "?round=2")
    page.wait_for_function("document.querySelector('#sd-banner') && "
                           "document.querySelector('#sd-banner').innerText.includes('restored from the link')")
    page.wait_for_function("document.querySelector('#sd-player').dataset.round === '2'")
    page.wait_for_function("Number(document.querySelector('#sd-round input[type=number]').value) === 2")
    page.wait_for_function("""Array.from(document.querySelectorAll('#sd-round-plot .gtitle'))
        .some(e => e.textContent.startsWith('Round 2:'))""")
    # the marker: one dotted line on the tokens-vs-time chart
    page.wait_for_function("document.querySelectorAll('#sd-chart-time .shapelayer path').length === 1")
    # and all of it stays after the player's notice on opening
    page.wait_for_timeout(1000)
    assert page.locator("#sd-player").get_attribute("data-round") == "2"
    assert page.locator("#sd-round input[type=number]").input_value() == "2"
