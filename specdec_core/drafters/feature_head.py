"""The distilled default draft: an EAGLE-style feature head over the target's last hidden state.

At committed position t the target's verify pass already gave its hidden states; the head taps
a few layers (cfg "feature_layers", the last one the final post-norm state f_t), fuses them into
one H-vector f̃_t (inner taps RMS-normed, one linear 3H -> H; a one-tap head reads f_t as is),
reads [f̃_t ; e(x_{t+1})] (e: the target's frozen token embeddings), projects 2H -> H, runs ONE
decoder layer of the target's width (causal attention over its own KV cache; cfg "depth" stacks
more, each with its own cache — the shipped head has one), a final RMSNorm,
and a truncated output layer: the rows of the target's tied embedding matrix for the N most
frequent output tokens (+ a trained bias). Its output g_t imitates f_{t+1},
so a second draft step feeds [g_t ; e(d_1)], and so on. The drafter that calls it each round is
feature_drafter.py (q is 0 outside the N tokens, which keeps speculative sampling exact).

Shipped: fc, the layer, the norm, the bias and the vocabulary ids (fp16, a few MB); the embedding
and output rows are taken from the target at load time, never stored twice.

    from specdec_core.drafters.feature_drafter import drafter_factory   # factory(pair) -> Drafter
    pair = ModelPair.from_models(target, drafter_factory(target), tokenizer)
    pair = load_pair("smollm2-135m", draft="distilled")            # the same, by name
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .. import data
from . import memory
from ..kernels import fastpath
from ..registry import REGISTRY
from ..kernels import fused_llama
from .head_layers import Block, RMSNorm, rope, rope_angles

WEIGHTS = "weights.safetensors"


class FeatureHead(nn.Module):
    """fc + one Llama decoder layer (or `depth` of them) + norm + truncated tied head. Shapes: B
    batch, T positions."""

    kind, train_command = "distilled", "train"     # the draft name that loads it, the lab command

    def __init__(self, cfg: dict, vocab_ids: torch.Tensor):
        super().__init__()
        H, I = cfg["hidden_size"], cfg["intermediate_size"]
        cfg = {**cfg, "feature_layers": list(cfg.get("feature_layers", [-1]))}
        self.cfg, self.nh, self.nkv, self.hd = cfg, cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        n_taps = len(cfg["feature_layers"])
        if n_taps > 1:    # inner residual streams carry outlier dimensions: normalise before fusing
            self.tap_norms = nn.ModuleList(RMSNorm(H, cfg["rms_norm_eps"]) for _ in range(n_taps - 1))
            self.fuse = nn.Linear(n_taps * H, H, bias=False)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.ln1, self.ln2 = RMSNorm(H, cfg["rms_norm_eps"]), RMSNorm(H, cfg["rms_norm_eps"])
        self.q = nn.Linear(H, self.nh * self.hd, bias=False)
        self.k = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o = nn.Linear(self.nh * self.hd, H, bias=False)
        self.gate, self.up = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False)
        self.down = nn.Linear(I, H, bias=False)
        # Layers after the first (cfg "depth", default 1): keys extra.0.…, so a one-layer head's are unchanged
        depth = int(cfg.get("depth", 1))
        if depth > 1:
            self.extra = nn.ModuleList(Block(H, I, self.nh, self.nkv, self.hd, cfg["rms_norm_eps"]) for _ in range(depth - 1))
        self.norm = RMSNorm(H, cfg["rms_norm_eps"])
        self.register_buffer("vocab_ids", vocab_ids.long())            # [N] target ids
        self.bias = nn.Parameter(torch.zeros(len(vocab_ids)))
        self.embed: Optional[torch.Tensor] = None                     # [V, H] frozen, from target
        self.head_w: Optional[torch.Tensor] = None                    # [N, H] frozen rows
        self.packed_logits: Optional[fastpath.Pack] = None            # CPU fast path: head_w prepacked
        self.packed_qkv: Optional[fastpath.Pack] = None               # ... q|k|v in one matrix
        self.packed_gate_up: Optional[fastpath.Pack] = None           # ... gate|up in one matrix
        self.version: Optional[str] = None                            # "<name> v<N>" once loaded
        self.memory: Optional[memory.PhraseMemory] = None              # the target's phrasing (memory.py)
        self.memory_cols: Optional["np.ndarray"] = None               # [E] each entry's head column (-1: none)
        self.text_phrases: Optional[dict] = None                      # the text's own phrases: TextPhrases' settings

    def attach(self, embed_weight: torch.Tensor, head_weight: torch.Tensor) -> "FeatureHead":
        """Borrow the target's frozen embeddings [V, H] and output layer [V, H] (no copy of V×H)."""
        self.embed = embed_weight.detach()
        self.head_w = head_weight.detach()[self.vocab_ids]
        return self

    @torch.no_grad()
    def init_from_target(self, target, layer: int) -> None:
        """Start from a target decoder layer and the target's final norm; fc picks the feature."""
        L = target.model.layers[layer]
        w = fused_llama.layer_weights(L)      # stock or fast-path (fused) layer alike
        for i, B in enumerate(self.layers()):
            for mine, name in [(B.q, "q_proj"), (B.k, "k_proj"), (B.v, "v_proj"), (B.o, "o_proj"),
                               (B.gate, "gate_proj"), (B.up, "up_proj"), (B.down, "down_proj")]:
                # an MLP wider than the target's: its first units are the layer's, the others start
                # silent (their down columns zero) so the head computes what the layer does
                rows, cols = w[name].shape
                if name == "down_proj":
                    mine.weight.zero_()
                mine.weight[:rows, :cols].copy_(w[name])
            for mine, theirs in [(B.ln1, L.input_layernorm), (B.ln2, L.post_attention_layernorm)]:
                mine.weight.copy_(theirs.weight)
            if i > 0:     # a later layer starts as a pass-through (nothing added to the residual stream)
                B.o.weight.zero_()
                B.down.weight.zero_()
        self.norm.weight.copy_(target.model.norm.weight)
        H = self.fc.out_features
        self.fc.weight.normal_(0, 0.02)
        self.fc.weight[:, :H] += torch.eye(H)
        if hasattr(self, "fuse"):   # start as a one-tap head: the final state passes through
            self.fuse.weight.zero_()
            self.fuse.weight[:, -H:] = torch.eye(H)

    def true_feature(self, taps: torch.Tensor) -> torch.Tensor:
        """The target's tapped hidden states [..., n_taps·H] -> the head's feature [..., H]."""
        if not hasattr(self, "fuse"):
            return taps
        H = self.fc.out_features
        parts = [norm(taps[..., i * H:(i + 1) * H]) for i, norm in enumerate(self.tap_norms)]
        return self.fuse(torch.cat(parts + [taps[..., -H:]], -1))

    def layer_in(self, feat: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """feat [B, T, H] features, ids [B, T] next tokens -> layer input [B, T, H]."""
        return self.fc(torch.cat([feat, self.embed[ids].to(feat.dtype)], -1))

    def layers(self) -> list:
        """The head's decoder layers in order: itself (its first layer's parts are its own) and any extra."""
        return [self, *getattr(self, "extra", [])]

    def qkv(self, x: torch.Tensor, pos: torch.Tensor, L: Optional[nn.Module] = None):
        """x [B, T, H] -> q [B, nh, T, d], k, v [B, nkv, T, d] (RoPE at positions pos [T]) of layer
        L (one of layers(); None: the first)."""
        L = self if L is None else L
        B, T, _ = x.shape
        h = L.ln1(x)
        cos, sin = rope_angles(pos, self.hd, self.cfg["rope_theta"])
        if self._fused(L.packed_qkv, L.q, L.k, L.v, x=h):   # one product instead of three
            q, k, v = L.packed_qkv.linear(h, None).split([self.nh * self.hd, self.nkv * self.hd,
                                                           self.nkv * self.hd], -1)
        else:
            q, k, v = L.q(h), L.k(h), L.v(h)
        q = rope(q.reshape(B, T, self.nh, self.hd).transpose(1, 2), cos, sin)
        k = rope(k.reshape(B, T, self.nkv, self.hd).transpose(1, 2), cos, sin)
        v = v.reshape(B, T, self.nkv, self.hd).transpose(1, 2)
        return q, k, v

    @staticmethod
    def _fused(pack, *linears, x) -> bool:
        """A fused pack of these linears' weights (no bias) may serve this forward."""
        return pack is not None and x.dtype == torch.float32 and pack.usable_for([m.weight for m in linears])

    def finish(self, x: torch.Tensor, attn: torch.Tensor, L: Optional[nn.Module] = None) -> torch.Tensor:
        """Residual stream x [B, T, H] + attention output [B, nh, T, d] -> layer L's output g [B, T, H]."""
        L = self if L is None else L
        B, _, T, _ = attn.shape
        x = x + L.o(attn.transpose(1, 2).reshape(B, T, -1))
        h = L.ln2(x)
        if self._fused(L.packed_gate_up, L.gate, L.up, x=h):   # one product instead of two
            gate, up = L.packed_gate_up.linear(h, None).chunk(2, -1)
        else:
            gate, up = L.gate(h), L.up(h)
        return x + L.down(F.silu(gate) * up)

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """g [..., H] -> logits over the N draft tokens [..., N]."""
        if self.packed_logits is not None and self.packed_logits.usable_for([self.head_w]) and g.dtype == torch.float32:
            return self.packed_logits.linear(self.norm(g), self.bias)
        return self.norm(g) @ self.head_w.T.to(g.dtype) + self.bias

    def attach_memory(self, mem: "memory.PhraseMemory") -> "FeatureHead":
        """Use a phrase memory at drafting: its entries mapped to this head's columns once."""
        self.memory, self.memory_cols = mem, mem.columns(self.vocab_ids.cpu().numpy())
        return self

    def with_memory(self, logits_n: torch.Tensor, contexts: list) -> torch.Tensor:
        """logits_n [m, N] with the memory's bias added on each row, row r following the token ids
        contexts[r] (a tuple, at least the memory's order long when the text is): see memory.py."""
        rows, cols, delta = self.memory.bias_rows(contexts, self.memory_cols, logits_n.device)
        if len(rows) == 0:
            return logits_n
        return logits_n.index_put((rows, cols), delta.to(logits_n.dtype), accumulate=True)

    def use_fast_path(self) -> None:
        """Drafting only (no training after this): prepack every matrix, the output rows included,
        in bfloat16 where the CPU has bf16 math (fastpath.draft_matrix_dtype)."""
        dtype = fastpath.draft_matrix_dtype()
        fastpath.apply(self, dtype=dtype)
        if fastpath.kernels_of(self).name == fastpath.FAST:
            if self.head_w is not None:
                self.packed_logits = fastpath.Pack([self.head_w], dtype=dtype)
            # each layer's q, k, v (and gate, up) read the same input: one product each, not three (two)
            for L in self.layers():
                L.packed_qkv = fastpath.Pack([L.q.weight, L.k.weight, L.v.weight], dtype=dtype)
                L.packed_gate_up = fastpath.Pack([L.gate.weight, L.up.weight], dtype=dtype)

    def forward(self, feat, ids, pos, cache: Optional[list], mask: Optional[torch.Tensor] = None):
        """Incremental forward for drafting. feat [1, n, H], ids [1, n], pos [n]; cache [k, v] per
        layer, flat ([k0, v0, k1, v1, …]), or None; mask [n, total] bool (True: attend; None:
        causal), total = cached + n keys. Returns (g [1, n, H], new cache)."""
        return self.attend(self.layer_in(feat, ids), pos, cache, mask)

    def attend(self, x, pos, cache: Optional[list], mask: Optional[torch.Tensor] = None):
        """The layers over inputs x [1, n, H] at positions pos [n] (forward() after layer_in; a block
        drafter's mask slots enter here). Returns (g [1, n, H], new cache)."""
        new_cache = []
        for i, L in enumerate(self.layers()):
            q, k, v = self.qkv(x, pos, L)
            if cache is not None:
                k, v = torch.cat([cache[2 * i], k], 2), torch.cat([cache[2 * i + 1], v], 2)
            n, total = q.shape[2], k.shape[2]
            if mask is None:   # causal: the n new queries against all `total` keys (the last n are theirs)
                mask = torch.ones(n, total, dtype=torch.bool, device=q.device).tril(total - n)
            # grouped-query attention: each of the nkv key/value heads serves nh / nkv query heads
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            x = self.finish(x, attn, L)
            new_cache += [k, v]
        return x, new_cache


def save_head(head: FeatureHead, out_dir: Path, card: dict) -> None:
    """weights.safetensors (fp16 state without the borrowed target tensors) + config.json (+ memory.npz
    when the head drafts with a phrase memory)."""
    from safetensors.torch import save_file
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(out_dir / WEIGHTS))
    rule = {"text_phrases": head.text_phrases} if head.text_phrases else {}     # how it drafts, beside what it is
    (out_dir / "config.json").write_text(json.dumps({"cfg": head.cfg, **rule, **card}, indent=1))
    if head.memory is not None:     # the draft it is: the memory goes with the weights
        head.memory.save(out_dir)


def target_cfg(target) -> dict:
    c = target.config
    rope_theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", getattr(c, "rope_theta", 10000.0))
    return dict(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                rms_norm_eps=c.rms_norm_eps, rope_theta=float(rope_theta))


def load_head(target, path=None, make=FeatureHead, shipped: str = "draft") -> FeatureHead:
    """The head saved in `path` (a folder; None: the one shipped in the package's data/<shipped>),
    attached to the target's embeddings/output layer, fp32, eval mode; `make` its class (a
    FeatureHead, or drafters.block_head.BlockHead). Loaded once per (target, path); a head trained
    for another target or of the other kind is refused. Weights are safetensors: no pickle is ever
    loaded."""
    if path is None:
        path, name = data.file(shipped), "shipped"
    else:
        path = Path(path)
        name = str(path.resolve())
    return REGISTRY.attachment(target, f"{make.kind}:{name}", lambda: _load_head(target, path, name, make))


def shipped_head():
    """The folder of the distilled draft shipped for the embedded target (package data)."""
    return data.file("draft")


def _load_head(target, path, name: str = "", make=FeatureHead) -> FeatureHead:
    from safetensors.torch import load as load_safetensors

    from ..errors import ModelLoadError
    if not (path / WEIGHTS).is_file() or not (path / "config.json").is_file():
        raise ModelLoadError(f"no {make.kind} draft in {path}: train one with "
                             f"`python -m specdec_core.lab {make.train_command} --out DIR`")
    meta = json.loads((path / "config.json").read_text())
    kind = "block" if "block_size" in meta.get("cfg", {}) else "distilled"
    if kind != make.kind:
        raise ModelLoadError(f"{path} holds a {kind} draft, not a {make.kind} one: load it as '{kind}:{path}'")
    mine = target_cfg(target)
    if any(meta["cfg"].get(k) != mine[k] for k in ("hidden_size", "num_attention_heads", "head_dim")):
        raise ModelLoadError(f"the distilled draft in {path} was trained for another target "
                             f"(hidden size {meta['cfg'].get('hidden_size')}, this one {mine['hidden_size']})")
    state = load_safetensors((path / WEIGHTS).read_bytes())
    if int(state["vocab_ids"].max()) >= target.get_output_embeddings().weight.shape[0]:
        raise ModelLoadError(f"the distilled draft in {path} proposes tokens outside this target's vocabulary")
    head = make(meta["cfg"], state["vocab_ids"])
    head.version = f"{make.kind if name == 'shipped' else path.name} v{meta.get('version', 1)}"
    head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    dev = target.get_input_embeddings().weight.device
    head = head.to(dev).eval().attach(target.get_input_embeddings().weight,
                                      target.get_output_embeddings().weight)
    mem = memory.load(path) if make.kind == FeatureHead.kind else None    # the block drafter reads none
    if mem is not None:      # shipped beside the weights: the target's phrasing (memory.py)
        head.attach_memory(mem)
        head.version += " + memory"
    if meta.get("text_phrases"):    # drafts with the text's own phrases (memory.TextPhrases)
        head.text_phrases = dict(meta["text_phrases"])
        head.version += " + text phrases"
    if fastpath.kernels_of(target).name == fastpath.FAST:   # the head runs what its target runs
        head.use_fast_path()
    return head
