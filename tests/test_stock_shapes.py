"""Issue 60: where this CPU runs a matrix shape's stock F.linear faster than its prepacked copy, the
fast path uses stock for that shape — decided once per machine, kept, shown in the kernels label —
and decodes exactly as before."""
import time

import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, speculative_generate
from specdec_core.kernels import fastpath, rows, stock
from specdec_core.kernels.packed import Pack

from .conftest import tiny_llama

PROMPT = [1, 5, 2, 3, 3, 1, 5, 2]


def packs_and_sources(shapes=((64, 32), (64, 32), (64, 32), (32, 64))):
    out = []
    for o, i in shapes:
        w = torch.randn(o, i)
        out.append((Pack([w]), [w]))
    return out


def test_measure_picks_stock_exactly_where_the_pack_is_slower(monkeypatch):
    """The two kernels replaced by ones of known speed (a real kernel's first call on a new shape
    can cost tens of ms, which would make this test about oneDNN's warm-up)."""
    monkeypatch.setattr(rows, "last_level_cache_bytes", lambda: 0)      # every shape streams: all timed
    group = packs_and_sources()

    def kernels(packed_s, stock_s):
        monkeypatch.setattr(Pack, "linear", lambda self, x, bias: time.sleep(packed_s))
        monkeypatch.setattr(stock.F, "linear", lambda x, w: time.sleep(stock_s))
    kernels(0.004, 0.001)
    assert stock.measure(group) == {(32, 64, torch.float32): True, (64, 32, torch.float32): True}
    kernels(0.001, 0.004)
    assert stock.measure(group) == {(32, 64, torch.float32): False, (64, 32, torch.float32): False}
    kernels(0.002, 0.002)                        # equal: not a measured gain (MARGIN)
    assert stock.measure(group) == {(32, 64, torch.float32): False, (64, 32, torch.float32): False}


def test_the_choice_is_made_once_per_machine_and_kept(monkeypatch, tmp_path):
    monkeypatch.setenv(rows.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(rows, "last_level_cache_bytes", lambda: 20_000)   # only the 3 × 64×32 shape streams
    timed = []
    monkeypatch.setattr(stock, "measure", lambda group: timed.append(len(group)) or
                        {rows.shape_of(pk): pk.out_features == 64 for pk, _ in group})
    first = stock.decided(packs_and_sources())
    assert first == {(32, 64, torch.float32): True} and timed == [4]
    assert rows.machine_key() in stock.cache_file().read_text()
    monkeypatch.setattr(stock, "measure", lambda group: pytest.fail("re-timed a decided shape"))
    assert stock.decided(packs_and_sources()) == first                  # read back, never re-timed
    monkeypatch.setenv(stock.ENV, "0")
    assert stock.decided(packs_and_sources()) == {}


def test_a_stock_shape_skips_its_pack_and_decodes_as_the_stock_model(monkeypatch):
    """Every shape of a fast-path model put on stock kernels: no pack is read (fused layers run HF's
    forward, PackedLinear its F.linear), the label says so, and greedy and sampled decodes equal the
    stock model's token for token."""
    fast = ModelPair.from_models(tiny_llama(vocab_size=16, seed=3, layers=2), tiny_llama(vocab_size=16, seed=4),
                                 fast_path=True)
    plain = ModelPair.from_models(tiny_llama(vocab_size=16, seed=3, layers=2), tiny_llama(vocab_size=16, seed=4),
                                  fast_path=False)
    for model in (fast.target, fast.draft_model):
        packs = [pk for pk, _ in fastpath.packs_of(model)]
        on_stock = stock.set_stock(packs, {rows.shape_of(pk): True for pk in packs})
        kernels = fastpath.kernels_of(model)
        object.__setattr__(model, "_specdec_kernels", fastpath.Kernels(**{**kernels.__dict__, "stock_shapes": on_stock}))
    assert "stock kernels for" in fast.kernels()["target"]
    monkeypatch.setattr(Pack, "linear", lambda self, x, bias: pytest.fail("a stock shape read its pack"))
    for settings in (dict(), dict(temperature=1.0, seed=3)):
        want = speculative_generate(plain, PROMPT, k=3, max_new_tokens=16, **settings).output_ids
        assert speculative_generate(fast, PROMPT, k=3, max_new_tokens=16, **settings).output_ids == want
    assert autoregressive_generate(fast, PROMPT, max_new_tokens=16).output_ids == \
        autoregressive_generate(plain, PROMPT, max_new_tokens=16).output_ids
