"""The CLI on the default pair: coloured trace, stats, --compare-plain, --json and --show; bad
input gives one clear line and a non-zero exit, never a stack trace."""
import json
import os
import subprocess
import sys

import pytest

from specdec_core.trace.decisions import DECISIONS

pytestmark = pytest.mark.model

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "specdec_core", *args], capture_output=True,
                          text=True, env=ENV, timeout=timeout)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, default_pair):   # default_pair: the conversion is cached before the CLI runs
    path = tmp_path_factory.mktemp("cli") / "trace.json"
    result = cli("List the days of the week, then list them again.", "--max-new-tokens", "24",
                 "-k", "3", "--compare-plain", "--json", str(path), "--color")
    return result, path


def test_cli_runs_default_pair_with_compare_plain(saved):
    result, path = saved
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b[38;2;" in out                               # ANSI colours were asked for
    for d in DECISIONS.values():
        assert d.label in out                                # the legend
    assert "acceptance rate" in out and "tok/s" in out
    assert "plain decoding" in out and "speedup" in out
    assert "✓ identical token for token" in out               # greedy: both lanes agree
    assert json.loads(path.read_text())["schema"] == "specdec.trace/2"


def test_cli_show_rerenders_without_a_model(saved):
    _, path = saved
    result = cli("--show", str(path))
    assert result.returncode == 0, result.stderr
    assert "acceptance rate" in result.stdout and "Loading" not in result.stderr
    assert "\x1b[" not in result.stdout                      # NO_COLOR: marks instead of colours


@pytest.mark.parametrize("args,message", [
    (["hi", "--temperature", "-1"], "temperature"),
    (["hi", "-k", "zero"], "k must be an integer from 1 to 32 (or \"auto\"); got 'zero'"),
    (["hi", "-k", "100000"], "k must be an integer from 1 to 32 (or \"auto\")"),
    (["hi", "--max-new-tokens", "999999999"], "max new tokens must be an integer from 1 to 4,096; got 999,999,999"),
    (["   "], "prompt is empty"),
    (["--show", "/nonexistent/trace.json"], "No such file"),
    (["hi", "--draft", "target-layers:x"], "target-layers"),
    (["hi", "--draft", "distilled:/nonexistent/head"], "no distilled draft in /nonexistent/head"),
])
def test_cli_bad_input_is_one_clear_line(args, message):
    result = cli(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
