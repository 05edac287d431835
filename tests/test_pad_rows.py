"""Few-row products padded to the kernel's faster row count (kernels/rows.py): the real rows'
outputs are the unpadded ones (up to rounding), Pack.linear pads exactly the row counts it was
told to, the measurement pads only shapes that stream from memory (and nothing when turned off),
and a model padded everywhere decodes the tokens it decodes unpadded."""
import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, speculative_generate
from specdec_core.kernels import fastpath, rows
from specdec_core.kernels.packed import PAD_TO, Pack

from .conftest import tiny_llama


def spy_rows(pk: Pack) -> list:
    """Record the row count of every product pk's plain kernel runs."""
    seen, plain = [], pk.plain

    def recorded(x, bias):
        seen.append(x.numel() // x.shape[-1])
        return plain(x, bias)
    pk.plain = recorded
    return seen


def bf16_packs() -> bool:
    """oneDNN packs a bf16 matrix on this CPU (it refuses without avx512bw/vl/dq or avx_ne_convert;
    the fast path then keeps every matrix in fp32: fastpath.draft_matrix_dtype)."""
    try:
        Pack([torch.randn(8, 8)], dtype=torch.bfloat16)
        return True
    except RuntimeError:
        return False


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), pytest.param(
    torch.bfloat16, 2e-2, marks=pytest.mark.skipif(not bf16_packs(), reason="this CPU cannot pack bf16 matrices"))])
def test_a_padded_product_gives_the_plain_products_rows(dtype, tol):
    gen = torch.Generator().manual_seed(0)
    w, b = torch.randn(40, 24, generator=gen), torch.randn(40, generator=gen)
    pk = Pack([w], dtype=dtype)
    for shape in [(1, 24), (2, 24), (3, 24), (1, 1, 24), (1, 2, 24), (1, 3, 24)]:
        x = torch.randn(*shape, generator=gen)
        plain, padded = pk.plain(x, b), pk.padded(x, b)
        assert padded.shape == plain.shape == (*shape[:-1], 40)
        assert float((padded - plain).abs().max()) < tol * float(plain.abs().max())
        assert float((plain - (x @ w.T + b)).abs().max()) < tol * float(plain.abs().max())


def test_linear_pads_exactly_the_row_counts_it_was_given():
    pk = Pack([torch.randn(16, 8)])
    seen = spy_rows(pk)
    pk.pad_rows = frozenset({1, 2})
    for r in (1, 2, 3, 5):
        pk.linear(torch.randn(1, r, 8), None)
    assert seen == [PAD_TO, PAD_TO, 3, 5]
    pk.pad_rows = frozenset()
    pk.linear(torch.randn(1, 1, 8), None)
    assert seen[-1] == 1


def test_only_shapes_that_stream_from_memory_are_measured(monkeypatch):
    packs = [Pack([torch.randn(64, 32)]) for _ in range(3)] + [Pack([torch.randn(32, 64)])]
    monkeypatch.setattr(rows, "last_level_cache_bytes", lambda: 20_000)   # 3 × 8 kB over it, 8 kB not
    padded = rows.measure(packs)
    assert set(padded) == {(32, 64, torch.float32)}
    assert padded[(32, 64, torch.float32)] <= frozenset(range(1, PAD_TO))
    union = rows.set_padding(packs, {(32, 64, torch.float32): frozenset({1, 2})})
    assert union == (1, 2)
    assert [pk.pad_rows for pk in packs] == [frozenset({1, 2})] * 3 + [frozenset()]
    monkeypatch.setattr(rows, "last_level_cache_bytes", lambda: 1 << 40)
    assert rows.measure(packs) == {}
    monkeypatch.setattr(rows, "last_level_cache_bytes", lambda: 1)
    monkeypatch.setenv(rows.ENV, "0")
    assert rows.measure(packs) == {}


def test_the_label_says_which_rows_are_padded():
    k = fastpath.Kernels(fastpath.FAST, n_packed=3, fused=True, padded_rows=(1, 2))
    assert k.label() == "onednn-prepacked, fused qkv and gate/up, 1/2-row products padded to 4 where faster"
    assert "padded" not in fastpath.Kernels(fastpath.FAST, n_packed=3).label()


def test_a_model_padded_everywhere_decodes_as_unpadded():
    """Every product of 1-3 rows padded (plain steps: 1 row; verify passes: 2-4): the same greedy
    tokens, plain and speculative, and logits within rounding."""
    target = tiny_llama(vocab_size=32, seed=0, layers=2)
    pair = ModelPair.from_models(target, tiny_llama(vocab_size=32, seed=1), fast_path=True)
    packs = [pk for pk, _ in fastpath.packs_of(pair.target)]
    assert packs and fastpath.kernels_of(pair.target).name == fastpath.FAST
    prompt = [1, 2, 3, 4, 5]
    runs = {}
    for padded in (False, True):
        rows.set_padding(packs, {(pk.in_features, pk.out_features, pk.dtype): frozenset({1, 2, 3}) if padded else frozenset()
                                 for pk in packs})
        seen = spy_rows(packs[0])
        plain = autoregressive_generate(pair, prompt, max_new_tokens=12)
        spec = speculative_generate(pair, prompt, k=2, tree=None, max_new_tokens=12)
        with torch.inference_mode():
            logits = pair.target(torch.tensor([prompt])).logits
        runs[padded] = (plain.output_ids, spec.output_ids, logits)
        del packs[0].plain                     # the spy goes; the class method again
        # padded: no product ran on fewer than PAD_TO rows (plain steps did, unpadded)
        assert min(seen) >= PAD_TO if padded else min(seen) == 1
    assert runs[True][0] == runs[False][0] == runs[True][1] == runs[False][1]
    assert float((runs[True][2] - runs[False][2]).abs().max()) < 1e-5


def test_the_choice_is_made_once_per_machine_and_kept(monkeypatch, tmp_path):
    """Issue 60: padding was timed at every load, so a shape whose gain sits near MARGIN could flip
    between two loads on one machine (logits then differed by ~5e-5). `decided` measures a shape
    once per CPU model and torch version, keeps it in the cache file, and every later load (fresh
    packs of the same shapes) reads it: the same choice, no timing."""
    monkeypatch.setenv(rows.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(rows, "last_level_cache_bytes", lambda: 20_000)
    timed = []
    real = rows.measure

    def measure(packs):
        timed.append(len(packs))
        return real(packs)
    monkeypatch.setattr(rows, "measure", measure)
    load = lambda: [Pack([torch.randn(64, 32)]) for _ in range(3)] + [Pack([torch.randn(32, 64)])]
    first = rows.decided(load())
    assert timed == [4] and rows.machine_key() in rows.cache_file().read_text()
    flips = iter([frozenset({1, 2, 3}), frozenset()])          # what a re-timing could now say
    big = (32, 64, torch.float32)                              # the shape over the (patched) cache size
    monkeypatch.setattr(rows, "measure", lambda packs: {big: next(flips)} if big in rows.shapes(packs) else {})
    assert rows.decided(load()) == first and rows.decided(load()) == first       # read back, never re-timed
    monkeypatch.setattr(rows, "machine_key", lambda: "another CPU | torch 9")   # another machine decides afresh
    assert rows.decided(load()) == {(32, 64, torch.float32): frozenset({1, 2, 3})}
    monkeypatch.setenv(rows.ENV, "0")
    assert rows.decided(load()) == {}
