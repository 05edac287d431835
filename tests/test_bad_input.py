"""Bad input, everywhere: the page (app.handlers), the Python API and the CLI answer every wrong
input with one clear line — never a stack trace — and keep working. Model cases use tiny models
built and saved here (an encoder, a config that asks for remote code, two tokenizers that differ),
never the Hub."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from app import form_fields, handlers
from specdec_core import ModelLoadError, ModelPair, load_pair, speculative_generate
from specdec_core.errors import DecodeError

from .conftest import tiny_llama

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["<unk>", "</s>", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]


def save_llama(folder: Path, words: list, seed: int = 0) -> str:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      eos_token_id=1, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>").save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    enc = base / "encoder"
    BertModel(BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(enc)
    remote = base / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps({
        "model_type": "evil-llm", "architectures": ["EvilForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilLM"}}))
    return {"encoder": str(enc), "remote": str(remote),
            "target": save_llama(base / "target", WORDS),
            "other_tok": save_llama(base / "other", WORDS[:2] + WORDS[2:][::-1], seed=1)}


def ui_run(prompt="a b c", target="smollm2-135m", draft="ngram", drafter=form_fields.NGRAM_CHOICE, k="2",
           temperature=0.0, top_k=0, top_p=1.0, max_new=4, seed=0, chat=False):
    """Drive the Run handler like the page does; returns the final view dict or raises UserError."""
    out = None
    form = handlers.RunForm("smollm2-135m", target, draft, drafter, "cpu", prompt, chat, k, temperature, top_k,
                            top_p, max_new, seed)
    for out in handlers.run(form, 0, lambda *a, **k: None, lambda *a: None):
        pass
    return out


UI_CASES = [  # (name, kwargs for ui_run, message)
    ("empty prompt", dict(prompt=""), "The prompt is empty"),
    ("whitespace prompt", dict(prompt=" \n\t "), "The prompt is empty"),
    ("undecodable bytes", dict(prompt="caf\udce9 au lait"), "not valid UTF-8"),
    ("control characters", dict(prompt="a\x00b"), "control character (U+0000"),
    ("1 MB prompt", dict(prompt="word " * 210_000), "the limit is 100,000"),
    ("k 0", dict(k="0"), 'k must be an integer from 1 to 32 (or "auto"); got \'0\''),
    ("k negative", dict(k="-3"), "k must be an integer from 1 to 32"),
    ("k above the cap", dict(k="100000"), "k must be an integer from 1 to 32"),
    ("temperature negative", dict(temperature=-1), "temperature must be a number from 0 to 10 (0 = greedy); got -1"),
    ("temperature above the cap", dict(temperature=50), "temperature must be a number from 0 to 10"),
    ("top-p negative", dict(top_p=-0.2), "top-p must be a number > 0 and ≤ 1 (1 = off)"),
    ("temperature NaN", dict(temperature=math.nan), "temperature must be a number from 0 to 10 (0 = greedy); got nan"),
    ("temperature inf", dict(temperature=math.inf), "got inf"),
    ("top-p above 1", dict(top_p=1.5), "top-p must be a number > 0 and ≤ 1"),
    ("top-k negative", dict(top_k=-1), "top-k must be an integer ≥ 0 (0 = off)"),
    ("seed not an integer", dict(seed="seven"), "seed must be an integer from 0 to"),
    ("max new tokens huge", dict(max_new=999_999_999), "max new tokens must be an integer from 1 to 256 on this page"),
    ("unknown model id", dict(target="no-such-org/no-such-model"), "could not load model"),
    ("local path refused", dict(target="/tmp"), "is a local path"),
    ("distilled:DIR refused", dict(draft="distilled:/tmp", drafter=form_fields.MODEL_CHOICE), "is a local path"),
    ("block:DIR refused", dict(draft="block:/tmp", drafter=form_fields.COMBINED_CHOICE), "is a local path"),
    ("relative path refused", dict(draft="../shared", drafter=form_fields.MODEL_CHOICE), "is a local path"),
]


@pytest.mark.parametrize("name,kwargs,message", UI_CASES, ids=[c[0] for c in UI_CASES])
def test_page_refuses_with_one_line(name, kwargs, message, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECDEC_ALLOW_LOCAL_PATHS", raising=False)
    with pytest.raises(form_fields.UserError) as e:
        ui_run(**kwargs)
    assert message in str(e.value) and "\n" not in str(e.value) and "Traceback" not in str(e.value)


def test_page_policy_accepts_the_built_in_drafters(monkeypatch):
    """The public page's policy (deploy.check_model_refs, through models.refs.ref_kind) loads the
    built-in drafters, the block drafter and its prompt-lookup combination included."""
    from app import deploy
    from specdec_core import ModelLoadError, parse_draft
    monkeypatch.delenv("SPECDEC_ALLOW_LOCAL_PATHS", raising=False)
    policy = deploy.Policy.from_env()
    drafts = ["ngram", "distilled", "block", "lookup+distilled", "lookup+block", "target-layers:2"]
    deploy.check_model_refs(policy, ["smollm2-135m", *map(parse_draft, drafts)])
    for local in ("distilled:/tmp/head", "lookup+block:./blocks", "lookup+../model"):   # a head's or a model's folder
        with pytest.raises(ModelLoadError, match="is a local path"):
            deploy.check_model_refs(policy, [parse_draft(local)])


# Issue 27's table of what a new user typed, one case per row: (row, kwargs for ui_run, message).
# Each message names the field and its allowed range, or the model reference and what is accepted.
RANDOM_300 = "".join(chr(33 + (i * 37) % 94) for i in range(300))
ISSUE_ROWS = [
    ("NUL in the prompt", dict(prompt="a\x00b"), "the prompt contains a control character (U+0000 at character 1)"),
    ("k 3.5", dict(k="3.5"), 'k must be an integer from 1 to 32 (or "auto"); got \'3.5\''),
    ("k -2", dict(k="-2"), 'k must be an integer from 1 to 32 (or "auto"); got \'-2\''),
    ("k abc", dict(k="abc"), 'k must be an integer from 1 to 32 (or "auto"); got \'abc\''),
    ("k 0", dict(k="0"), 'k must be an integer from 1 to 32 (or "auto"); got \'0\''),
    ("temperature nan", dict(temperature="nan"), "temperature must be a number from 0 to 10 (0 = greedy); got 'nan'"),
    ("temperature 1e9", dict(temperature=1e9), "temperature must be a number from 0 to 10 (0 = greedy); got 1e+09"),
    ("temperature empty", dict(temperature=None), "temperature must be a number from 0 to 10 (0 = greedy); empty"),
    ("top-p 0", dict(top_p=0), "top-p must be a number > 0 and ≤ 1 (1 = off); got 0"),
    ("max new tokens 0", dict(max_new=0), "max new tokens must be an integer from 1 to 256 on this page "
                                          "(the API and CLI allow up to 4,096); got 0"),
    ("max new tokens 100000", dict(max_new=100000), "max new tokens must be an integer from 1 to 256 on this page"),
    ("seed -1", dict(seed=-1), "seed must be an integer from 0 to 2⁶³ − 1 (empty = a random seed); got -1"),
    ("seed 1e30 at T 0.8", dict(seed=1e30, temperature=0.8), "seed must be an integer from 0 to "
                                                             "2⁶³ − 1 (empty = a random seed); got 1e+30"),
    ("../../../etc/passwd as target", dict(target="../../../etc/passwd"), "'../../../etc/passwd' is a local path"),
    ("file:///etc/passwd as target", dict(target="file:///etc/passwd"), "'file:///etc/passwd' is a local path"),
    ("gpt2 offline", dict(target="gpt2"), "could not load model 'gpt2' (not a local folder; a Hugging Face id needs internet)"),
    ("300 × r as target", dict(target="r" * 300), "the model name is 300 characters long (at most 256): give a preset, "
                                                 "a Hugging Face id"),
    ("300 random characters as target", dict(target=RANDOM_300), "the model name is 300 characters long"),
    ("40 random characters as target", dict(target="".join(c for c in RANDOM_300[:60] if c not in "/\\~.")),
     "is not a preset, a Hugging Face id (name or org/name: letters, digits, '-', '_', '.') or a local folder"),
    ("a web address as target", dict(target="https://huggingface.co/gpt2"), "is a web address"),
]


@pytest.mark.parametrize("row,kwargs,message", ISSUE_ROWS, ids=[c[0] for c in ISSUE_ROWS])
def test_issue_table_row_gets_one_plain_line(row, kwargs, message, monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECDEC_ALLOW_LOCAL_PATHS", raising=False)
    with pytest.raises(form_fields.UserError) as e:
        ui_run(**kwargs)
    text = str(e.value)
    assert message in text and "\n" not in text
    assert "inside the decoder" not in text            # a user's mistake is never a decoder failure
    # and the page's answer leaves the previous results, with the reason kept in the banner
    with caplog.at_level("INFO", logger="specdec-explainer"):
        out = handlers.refused(text, {"spec": None, "plain": None, "banner": "▶ **Your run** on **cpu**"})
    assert out["banner"].startswith("⚠ **Not run:** " + text) and "Your run" in out["banner"]
    lines = [r for r in caplog.records if r.name == "specdec-explainer"]
    assert len(lines) == 1 and lines[0].exc_info is None and "\n" not in lines[0].getMessage()


def test_issue_table_long_prompt_names_tokens_and_context(monkeypatch):
    """The 60,000-character prompt: refused with its token count and the model's context."""
    with pytest.raises(form_fields.UserError, match=r"the prompt has [\d,]+ tokens; the model's context is 8,192 tokens"):
        ui_run(prompt="The quick brown fox jumps over the lazy dog. " * 1334, max_new=8)


def test_issue_table_uploads(tmp_path):
    """A PNG renamed or not, and valid JSON that is not a trace: one line naming the file."""
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(form_fields.UserError, match=r"could not load the trace: picture.png: "):
        handlers.upload([str(png)])
    other = tmp_path / "data.json"
    other.write_text('{"rows": [1, 2, 3]}')
    with pytest.raises(form_fields.UserError, match=r'data.json: not a trace file: expected "schema": "specdec.trace/2"'):
        handlers.upload([str(other)])


def test_issue_table_share_link():
    """k=999&temperature=-5&prompt=<script>…: both settings named with their ranges; the prompt is
    restored as plain text (the page shows it in a text box, never as markup)."""
    from app.teach import classroom
    values, problems = classroom.restore({"k": "999", "temperature": "-5", "prompt": "<script>alert(1)</script>"})
    assert values == {"prompt": "<script>alert(1)</script>"}
    assert any("“k” ignored (k must be an integer from 1 to 32" in p for p in problems)
    assert any("“temperature” ignored (temperature must be a number from 0 to 10 (0 = greedy); got '-5')" in p
               for p in problems)


@pytest.mark.parametrize("kind,message", [
    ("encoder", "is not a causal language model (BertModel)"),
    ("remote", "needs its own code to load (trust_remote_code)"),
    ("other_tok", "incompatible tokenizers"),
])
def test_bad_models_are_refused_in_api_and_page(models, kind, message, monkeypatch):
    monkeypatch.setenv("SPECDEC_ALLOW_LOCAL_PATHS", "1")
    if kind == "other_tok":
        target, draft = models["target"], models["other_tok"]
    else:
        target, draft = models[kind], "ngram"
    with pytest.raises(ModelLoadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pair(target, draft=draft, device="cpu")
    with pytest.raises(form_fields.UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ui_run(target=target, draft=draft,
               drafter=form_fields.NGRAM_CHOICE if draft == "ngram" else form_fields.MODEL_CHOICE)


def test_context_limits_are_named(models, monkeypatch):
    monkeypatch.setenv("SPECDEC_ALLOW_LOCAL_PATHS", "1")
    pair = load_pair(models["target"], draft="ngram", device="cpu")
    assert pair.context_length == 64
    with pytest.raises(ValueError, match="the prompt has 70 tokens; the model's context is 64 tokens"):
        speculative_generate(pair, [2] * 70, k=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="at most 54"):
        speculative_generate(pair, [2] * 10, k=2, max_new_tokens=60)
    with pytest.raises(form_fields.UserError, match="the model's context is 64 tokens"):
        ui_run(prompt="a b c " * 30, target=models["target"])
    # and a run that fits works right after
    final = ui_run(prompt="a b c", target=models["target"], max_new=5)
    assert final["traces"]["spec"].stats["new_tokens"] == 5


def test_size_cap_before_any_weight_is_read(monkeypatch):
    monkeypatch.setenv("SPECDEC_UI_MAX_PARAMS", "1e8")          # the default target has 135 M
    with pytest.raises(form_fields.UserError, match="has about 0.1 B parameters, above the cap of 0.1 B"):
        ui_run()


def test_nan_logits_stop_the_decode_with_a_message():
    target = tiny_llama(seed=0)
    with torch.no_grad():
        target.lm_head.weight[3, 0] = float("nan")
    pair = ModelPair.from_models(target, tiny_llama(seed=1))
    for temperature in (0.0, 1.0):
        with pytest.raises(DecodeError, match="NaN or infinite logits in round 0"):
            speculative_generate(pair, [1, 2], k=2, max_new_tokens=4, temperature=temperature)


def test_out_of_memory_is_a_message_and_the_page_goes_on(monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    with monkeypatch.context() as m:
        m.setattr(handlers, "load_pair", oom)
        with pytest.raises(form_fields.UserError, match="Out of memory while running smollm2-135m"):
            ui_run()
    with monkeypatch.context() as m:       # while decoding
        m.setattr(handlers, "warm_up", oom)
        with pytest.raises(form_fields.UserError, match="Out of memory"):
            ui_run()
    assert ui_run(max_new=3)["traces"]["spec"].stats["new_tokens"] == 3


def _trace_json():
    plain = ROOT / "tests" / "data" / "trace_v1_before_regroup.plain.json"
    return plain.read_text()


@pytest.mark.parametrize("name,content,message", [
    ("malformed", "{ nope", "invalid JSON"),
    ("truncated", None, "invalid JSON"),
    ("wrong schema", json.dumps({"schema": "something/else"}), "expected \"schema\": \"specdec.trace/2\""),
    ("future schema", None, "found 'specdec.trace/3'"),
    ("not an object", "[1, 2, 3]", "expected \"schema\""),
])
def test_bad_uploads_are_refused(tmp_path, name, content, message):
    if name == "truncated":
        content = _trace_json()[:5000]
    if name == "future schema":
        content = _trace_json().replace('"specdec.trace/1"', '"specdec.trace/3"', 1)
    path = tmp_path / "upload.json"
    path.write_text(content)
    with pytest.raises(form_fields.UserError, match="could not load the trace: upload.json") as e:
        handlers.upload([str(path)])
    assert message in str(e.value)


def test_upload_caps(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_MAX_UPLOAD_MB", "0.01")
    big = tmp_path / "big.json"
    big.write_text(_trace_json())
    with pytest.raises(form_fields.UserError, match="big.json is 29 KB: trace files up to 10 KB are accepted"):
        handlers.upload([str(big)])
    monkeypatch.setenv("SPECDEC_MAX_UPLOAD_MB", "10")
    with pytest.raises(form_fields.UserError, match="upload at most 4 trace files"):
        handlers.upload([str(big)] * 5)
    assert handlers.upload([str(big)])["traces"]["plain"] is not None


def test_token_text_with_html_is_escaped_after_upload(tmp_path):
    d = json.loads(_trace_json())
    d["rounds"][0]["correction"]["text"] = '<script>alert(1)</script><img src=x onerror=alert(2)>'
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(d))
    out = handlers.upload([str(path)])
    html = out["plain_lane"] + str(out.get("timeline", ""))
    assert "<script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;" in html or "&lt;img" in html


@pytest.mark.parametrize("args,message", [
    (["hi", "--target", "no-such-org/no-such-model"], "could not load model"),
    (["hi", "--temperature", "nan"], "temperature must be a number from 0 to 10 (0 = greedy); got nan"),
    (["hi", "--top-p", "0"], "top-p must be a number > 0 and ≤ 1 (1 = off); got 0"),
    (["a\x01b"], "control character"),
])
def test_cli_refuses_with_one_line(args, message):
    env = dict(os.environ, NO_COLOR="1", HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "specdec_core", *args], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=300)
    assert result.returncode != 0 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_allows_local_folders(models):
    env = dict(os.environ, NO_COLOR="1", HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "specdec_core", "a b c", "--target", models["target"],
                             "--draft", "ngram", "--no-chat", "--max-new-tokens", "4"],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr


def test_a_crash_while_writing_a_trace_leaves_no_file(tmp_path, monkeypatch):
    """Trace.save is atomic: a failure mid-write leaves neither the file nor a temporary."""
    from specdec_core import ModelPair, Trace, speculative_generate

    from .conftest import tiny_llama
    trace = speculative_generate(ModelPair.from_models(tiny_llama(), tiny_llama(seed=1)), [1, 2], k=2, max_new_tokens=4)
    good = tmp_path / "good.trace.json"
    trace.save(good)
    assert Trace.load(good).output_ids == trace.output_ids

    def broken(self, indent=None):
        raise OSError("disk full")
    monkeypatch.setattr(Trace, "to_json", broken)
    with pytest.raises(OSError):
        trace.save(tmp_path / "bad.trace.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.trace.json"]


def test_download_folders_stay_within_the_age_and_count_budget(tmp_path, monkeypatch):
    import os
    import time

    from app import views
    monkeypatch.setattr(views.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setenv("SPECDEC_TRACE_MAX_RUNS", "3")
    from specdec_core import ModelPair, speculative_generate

    from .conftest import tiny_llama
    trace = speculative_generate(ModelPair.from_models(tiny_llama(), tiny_llama(seed=1)), [1, 2], k=2, max_new_tokens=4)
    for _ in range(6):
        views.write_files(trace, None)
    assert len(list(views.trace_dir().glob("run-*"))) == 3
    old = next(iter(views.trace_dir().glob("run-*")))
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    monkeypatch.setenv("SPECDEC_TRACE_MAX_AGE_S", "3600")
    views.write_files(trace, None)
    assert not old.exists() and len(list(views.trace_dir().glob("run-*"))) == 3
