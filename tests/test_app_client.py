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
def client():
    from app.ui import build_demo, launch_kwargs
    demo = build_demo()
    demo.queue().launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1", **launch_kwargs())
    try:
        yield Client(demo.local_url, verbose=False)
    finally:
        demo.close()


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
