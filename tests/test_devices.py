"""Device hygiene without a GPU: every tensor the decoder, the drafters, the head and the sampler
create names its device (no implicit CPU tensor that a CUDA run would mix with GPU tensors).

A TorchFunctionMode watches tensor factory calls made from specdec_core's own code during real
decodes on CPU and fails on any that does not pass `device=` — the feature head's attention mask
(built with `torch.ones(n, total)`, no device) was such a call and is caught by this test."""
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from specdec_core import ModelPair, autoregressive_generate, load_pair, speculative_generate
from specdec_core.drafters import NGramDrafter

from .conftest import tiny_llama

CORE = str(Path(__file__).resolve().parent.parent / "specdec_core")
FACTORIES = {torch.ones, torch.zeros, torch.full, torch.empty, torch.arange, torch.rand, torch.randn,
             torch.randint, torch.tensor, torch.eye, torch.linspace}


class ImplicitDeviceWatch(TorchFunctionMode):
    """Records factory calls from specdec_core frames that do not say which device."""

    def __init__(self):
        super().__init__()
        self.violations = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(str(Path(torch.__file__).parent)):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(CORE):
                self.violations.append(f"{func.__name__} at {Path(frame.f_code.co_filename).name}:{frame.f_lineno}")
        return func(*args, **kwargs)


def decodes_clean(run) -> list:
    watch = ImplicitDeviceWatch()
    with watch:
        run()
    return watch.violations


def test_decoder_sampler_and_drafters_name_their_device():
    pair = ModelPair.from_models(tiny_llama(vocab_size=16, seed=0, layers=2), tiny_llama(vocab_size=16, seed=1))
    for settings in (dict(temperature=0.0), dict(temperature=1.0, top_k=5, top_p=0.9, seed=3)):
        assert decodes_clean(lambda: speculative_generate(pair, [1, 2, 3, 1, 2], k=3, max_new_tokens=12, **settings)) == []
        assert decodes_clean(lambda: speculative_generate(pair, [1, 2, 3, 1, 2], k="auto", max_new_tokens=12,
                                                          **settings)) == []
        assert decodes_clean(lambda: autoregressive_generate(pair, [1, 2, 3], max_new_tokens=6, **settings)) == []
        ngram = lambda: speculative_generate(pair, [1, 2, 3, 1, 2], k=2, max_new_tokens=8,
                                             drafter=NGramDrafter(16, pair.input_device), **settings)
        assert decodes_clean(ngram) == []


@pytest.mark.model
def test_the_distilled_head_names_its_device():
    pair = load_pair("smollm2-135m", draft="distilled", device="cpu")
    ids = pair.encode_prompt("Write a haiku about trains.")
    for settings in (dict(temperature=0.0), dict(temperature=0.8, seed=1)):
        assert decodes_clean(lambda: speculative_generate(pair, ids, k=3, max_new_tokens=8, **settings)) == []


def test_early_stop_off_the_cpu_is_one_sync_after_drafting_with_the_same_result(monkeypatch):
    """On a GPU the round loop does not read a sampled row's top probability back per token (a host
    sync each): it drafts the chain, then asks the decider about every row at once (one read) and
    cuts after the first it would have stopped at. Simulated on the CPU by treating it like a GPU:
    the chains equal those of the per-level early stop."""
    from specdec_core.decoding import grow
    from specdec_core.decoding.tree import Shape
    from specdec_core.drafters import ModelDrafter
    from specdec_core.sampling import SamplingConfig
    target, draft = tiny_llama(vocab_size=16, seed=0), tiny_llama(vocab_size=16, seed=1, init=0.05)
    committed = torch.tensor([1, 2, 3, 4, 5])

    class Above:        # a decider: the next level pays while the last row's top q is ≥ stop
        def __init__(self, stop):
            self.stop = stop

        def more(self, grown):
            return float(grown.top) >= self.stop

    def chains():
        out = []
        for stop in (0.05, 0.3, 0.9):
            d = ModelDrafter(draft, 16)
            d.start(committed)
            tree, _, _ = grow.draft_round(d, committed, Shape(6, 6), 6, SamplingConfig(0.0), None, Above(stop))
            out.append(tree.ids.tolist())
        return out
    per_step = chains()
    monkeypatch.setattr(grow, "READ_NOW", set())
    deferred = chains()
    assert deferred == per_step
    assert len({len(ids) for ids in per_step}) > 1      # the thresholds really cut at different places
