"""The one place of process state (specdec_core.registry): LRU by count and bytes, attachments go
with their model, a model a running decode holds is never evicted."""
import torch

from specdec_core import ModelPair, speculative_generate
from specdec_core.registry import Registry, tensor_bytes

from .conftest import tiny_llama


def loader(seed):
    return lambda: (tiny_llama(seed=seed), None)


def test_lru_bound_by_count_and_attachments_go_with_their_model():
    reg = Registry(max_models=2, max_bytes=1 << 40)
    a = reg.model(("a",), loader(0))[0]
    reg.model(("b",), loader(1))
    reg.attachment(a, "pass_costs", lambda: {"measured": True})
    reg.model(("a",), loader(0))                       # a used again: b is now least recent
    reg.model(("c",), loader(2))
    assert reg.loaded() == [("a",), ("c",)]
    reg.model(("d",), loader(3))                       # a is least recent now: evicted, attachment too
    assert reg.loaded() == [("c",), ("d",)]
    assert reg.peek(a, "pass_costs") is None


def test_bound_by_bytes_counts_attachments():
    one = tensor_bytes(tiny_llama(seed=0))
    reg = Registry(max_models=10, max_bytes=int(2.5 * one))
    first = reg.model(("a",), loader(0))[0]
    reg.model(("b",), loader(1))
    assert len(reg.loaded()) == 2 and reg.total_bytes() == 2 * one
    reg.attachment(first, "head", lambda: tiny_llama(seed=5))   # + one model's bytes: over the bound
    assert reg.loaded() == [("b",)]


def test_a_held_model_is_never_evicted():
    reg = Registry(max_models=1, max_bytes=1 << 40)
    a = reg.model(("a",), loader(0))[0]
    with reg.holding(a):
        reg.model(("b",), loader(1))
        assert ("a",) in reg.loaded()                  # over the bound while a decode holds it
    reg.model(("c",), loader(2))
    assert reg.loaded() == [("c",)]


def test_decoding_holds_its_models(monkeypatch):
    from specdec_core import registry
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    seen = []
    real = registry.REGISTRY.holding

    def spy(*models):
        seen.append(models)
        return real(*models)
    monkeypatch.setattr(registry.REGISTRY, "holding", spy)
    speculative_generate(pair, [1, 2, 3], k=2, max_new_tokens=4)
    assert seen and seen[0][0] is pair.target and seen[0][1] is pair.draft_model
    assert not registry.REGISTRY._held                # released at the end


def test_env_configures_the_bound(monkeypatch):
    monkeypatch.setenv("SPECDEC_MAX_MODELS", "3")
    monkeypatch.setenv("SPECDEC_MAX_MODEL_MB", "512")
    reg = Registry()
    assert reg.max_models == 3 and reg.max_bytes == 512 << 20
    assert tensor_bytes(torch.nn.Linear(4, 2)) == 4 * (8 + 2)


def test_a_slow_load_blocks_neither_other_models_nor_attachments():
    """A model loading (or a cost curve being measured) in one thread: another thread's lookups of
    other keys finish meanwhile; a second caller of the same key waits and gets the one load."""
    import threading
    reg = Registry(max_models=4)
    release, started, calls = threading.Event(), threading.Event(), []

    def slow_loader():
        calls.append("slow")
        started.set()
        release.wait(30)
        return (torch.nn.Linear(2, 2), "tok")

    results = {}
    first = threading.Thread(target=lambda: results.setdefault("a", reg.model(("a",), slow_loader)))
    second = threading.Thread(target=lambda: results.setdefault("a2", reg.model(("a",), slow_loader)))
    first.start()
    assert started.wait(30)
    second.start()
    fast = reg.model(("b",), lambda: (torch.nn.Linear(2, 2), "tok"))       # not behind the slow load
    assert reg.attachment(fast[0], "curve", lambda: torch.zeros(3)).shape == (3,)
    assert "a" not in results                                              # still loading
    release.set()
    first.join(30), second.join(30)
    assert results["a"] is results["a2"] and calls == ["slow"]
