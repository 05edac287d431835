"""The app through gradio_client against a launched server: a streamed run on the offline default
pair, a valid final trace, uploads, and errors that leave the app serving."""
import json
import os
import re

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client, handle_file  # noqa: E402

from specdec_core import Trace  # noqa: E402

pytestmark = pytest.mark.model

NGRAM = "n-gram (prompt lookup, no model)"
PROMPT = ("Repeat this sentence twice: The team agreed that the release will move to Friday.")


def run_args(prompt=PROMPT, target="smollm2-135m", drafter=NGRAM, k="4", max_new_tokens=12, temperature=0.0,
             top_k=0, draft="target-layers:2"):
    # preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p, max_new, seed
    return ["smollm2-135m", target, draft, drafter, "cpu", prompt, True, k, temperature, top_k, 1.0,
            max_new_tokens, 0]


@pytest.fixture(scope="module")
def demo():
    from app.ui import build_demo, launch_kwargs
    demo = build_demo()
    demo.queue().launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1", **launch_kwargs())
    try:
        yield demo
    finally:
        demo.close()


@pytest.fixture(scope="module")
def client(demo):
    yield Client(demo.local_url, verbose=False)


def test_the_pages_race_streams_to_the_lanes_only_and_the_api_gets_every_view(demo):
    """The page's Run is two events (issue 44: Gradio's page re-reads every output of a streaming
    event on each update, so a race streaming to the charts slowed the decoder on the same cores):
    the race streams to the lanes and a few small outputs, no chart among them, and hands the
    views to a second event; the API's /run stays one call that returns every view."""
    import gradio as gr
    from app.wiring import RACE_OUTPUTS, VIEW_OUTPUTS
    fns = list(demo.fns.values())
    api = next(f for f in fns if f.api_name == "run")
    assert len(api.outputs) == len(VIEW_OUTPUTS)
    page_runs = [f for f in fns if f.fn is api.fn and f is not api]
    assert len(page_runs) == 1                          # the Run button (the greedy button only sets T = 0)
    for f in page_runs:
        assert len(f.outputs) == len(RACE_OUTPUTS)
        assert not any(isinstance(o, gr.Plot) for o in f.outputs)
        assert f.api_visibility == "private"


@pytest.fixture(scope="module")
def finished_run(client):
    # 48 tokens: a race long enough for the lanes to be redrawn while it runs (every RACE_REDRAW_S)
    job = client.submit(*run_args(max_new_tokens=48), api_name="/run")
    updates = list(job)            # every streamed update
    return updates, job.outputs()[-1]


def test_run_streams_updates_and_returns_valid_traces(finished_run):
    updates, final = finished_run
    assert len(updates) >= 4          # lanes start, stream, finish: more than one update
    banner, recorded_why, plain_lane, spec_lane, verdict, timeline = final[:6]
    assert "Your run" in banner and "CPU" in banner
    assert recorded_why.startswith("**Your race:**")        # this race beside the recorded ones
    assert "finished" in plain_lane and "finished" in spec_lane
    n = int(re.search(r'class="sd-count">(\d+)<', plain_lane).group(1))
    assert f'class="sd-count">{n}<' in spec_lane and 12 <= n <= 48
    assert "speedup" in verdict and "identical token for token" in verdict   # T = 0: same text
    assert "sd-tok sd-" in timeline
    files = final[-1]
    traces = [Trace.load(f) for f in files]
    spec = next(t for t in traces if t.config.k != 0)
    plain = next(t for t in traces if t.config.k == 0)
    assert spec.finished and plain.finished and spec.output_ids == plain.output_ids
    assert len(spec.output_ids) == n and spec.config.draft == "ngram"
    # a streamed intermediate update showed a partial lane
    partial = [u for u in updates if isinstance(u, (list, tuple)) and any("running" in str(x) for x in u)]
    assert partial


def test_upload_rerenders_without_a_model(client, finished_run, tmp_path):
    files = finished_run[1][-1]
    out = client.predict([handle_file(f) for f in files], api_name="/upload")
    banner, recorded_why, plain_lane, spec_lane, verdict, timeline = out[:6]
    assert "Loaded from file" in banner and recorded_why.startswith("**Your race:**") and "speedup" in verdict and "sd-tok" in timeline
    titles = [json.loads(x["plot"])["layout"]["title"]["text"] for x in out if isinstance(x, dict) and "plot" in x]
    assert len(titles) == 7
    assert titles[0].startswith("Round ") and "Speedup vs draft length k" in titles


def test_malformed_upload_is_a_readable_error_and_app_keeps_serving(client, tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema": "specdec.trace/1", "config": 3}')
    out = client.predict([handle_file(str(bad))], api_name="/upload")
    # the banner says why, keeps the description of what is still shown, and nothing else changes
    assert out[0].startswith("⚠ **Not loaded:** could not load the trace: broken.json")
    assert "The views below are unchanged: " in out[0]      # with the banner of what is shown
    out = client.predict(0, api_name="/inspect_round")    # still serving
    assert out[1]["type"] == "plotly"


@pytest.mark.parametrize("args, message", [
    (run_args(prompt="   "), "prompt is empty"),
    (run_args(target="/nonexistent/model-dir"), "is a local path"),
    (run_args(target="no-such-org/no-such-model"), "could not load model"),
    (run_args(top_k=-1), "top-k must be an integer ≥ 0"),
    (run_args(drafter="draft model", draft=""), "needs a draft"),
])
def test_errors_are_shown_and_app_keeps_serving(client, args, message):
    out = client.predict(*args, api_name="/run")
    banner, _why, plain_lane, spec_lane = out[:4]
    assert banner.startswith("⚠ **Not run:**") and message in banner
    assert "waiting" not in plain_lane and "waiting" not in spec_lane    # the previous results stay
