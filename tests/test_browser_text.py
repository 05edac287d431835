"""Text survives, in a real browser (issue 27): an Arabic + emoji prompt races on the default pair;
each lane's text is the tokenizer's decode of that lane's output ids (read back from the
downloaded traces), no "�" shows in the lanes or the timeline, and split characters carry a dotted
byte cue there. Screenshot: test-artifacts/text-arabic-emoji.png."""
import pytest

from tests.test_browser import ARTIFACTS, _choose, _set_number, browser, greedy, page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.model]

# The default target answers this one in Arabic and emoji (2- and 4-byte characters split over tokens).
PROMPT = "كيف حالك؟ 😀 Reply in Arabic: كيف"


def test_arabic_and_emoji_lanes_read_as_the_tokenizer_decodes(page, default_pair):
    from specdec_core import Trace
    page.wait_for_selector("#sd-timeline .sd-tok")
    page.locator("#sd-prompt textarea").fill(PROMPT)
    _set_number(page, "#sd-max-new", 38)     # the answer ends on a whole character
    _choose(page, "#sd-k", "4")
    greedy(page)                             # the answer this test knows is the greedy one
    page.locator("#sd-run").click()
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Your run')", timeout=300_000)

    links = page.locator("#sd-files a.download-link")
    assert links.count() == 2
    traces = []
    for i in range(2):
        with page.expect_download() as dl:
            links.nth(i).click()
        traces.append(Trace.load(dl.value.path()))
    for trace in traces:
        lane = "#sd-lane-plain" if trace.config.k == 0 else "#sd-lane-spec"
        shown = page.locator(f"{lane} .sd-lane-text").inner_text()
        whole = default_pair.decode(trace.output_ids)
        assert shown == whole and len(whole) < len(trace.output_ids)    # characters were split over tokens
    for view in ("#sd-lane-plain", "#sd-lane-spec", "#sd-timeline"):
        assert "\ufffd" not in page.locator(view).inner_text()
    # a committed token carrying bytes of a character it does not complete shows them in a dotted
    # box, named (the character itself is shown on the token that completes it)
    cue = page.locator("#sd-timeline :is(.sd-accepted, .sd-resampled, .sd-bonus) .sd-part").first
    assert cue.inner_text().startswith("⟨") and "bytes of '" in cue.get_attribute("title")

    page.locator("#sd-plain").evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "text-arabic-emoji.png"), full_page=False)
