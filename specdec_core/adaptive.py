"""k = "auto": choose the draft length of each round from running estimates of α, c and v(k).

The policy measures while it decodes: α from the overlaps Σ min(p, q) of evaluated drafts, the
target step time from plain rounds, v(k) from verify times, c from draft step times. Each round it
takes the theory's best k; when no k beats plain decoding (α ≤ c, or speculative rounds measured
slower than plain steps) it falls back to plain steps and probes speculation again now and then.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .theory import best_k

EMA = 0.15            # weight of a new measurement in running means
K_MAX = 8
STOP_BELOW = 0.3      # stop drafting once the draft's top probability falls below this


@dataclass
class AutoK:
    device_type: str = "cpu"
    alpha: float = 0.6                     # prior before any draft was checked
    step_s: float | None = None            # target single-token step
    draft_step_s: float | None = None
    verify_s: dict = field(default_factory=dict)   # m drafted -> EMA verify time
    spec_rate: float | None = None         # EMA tokens/s of speculative rounds
    plain_run: int = 0                     # consecutive plain rounds chosen
    probe_every: int = 8

    def _ema(self, old, new):
        return new if old is None else (1 - EMA) * old + EMA * new

    def v(self, k: int) -> float:
        """Estimated verify cost of k drafts in target steps (measured where seen, else linear)."""
        if k in self.verify_s:
            return self.verify_s[k] / self.step_s
        # Prior slope per extra token: CPU forward time grows with tokens, a GPU's barely does.
        slope = 0.12 if self.device_type == "cpu" else 0.02
        seen = sorted((m, t / self.step_s) for m, t in self.verify_s.items() if m > 0)
        if seen:
            m, vm = seen[-1]
            slope = max((vm - 1.0) / m, 0.0)
        return 1.0 + slope * k

    def next_k(self) -> tuple[int, float | None, str]:
        """(k for this round, early-stop threshold, reason recorded in the trace)."""
        if self.step_s is None:
            return 0, None, "first round: plain step to measure the target's step time"
        c = (self.draft_step_s or 0.0) / self.step_s
        k, predicted = best_k(self.alpha, c, self.v, K_MAX)
        measured = self.spec_rate * self.step_s if self.spec_rate is not None else None
        if k > 0 and measured is not None and measured < 1.0 and predicted < 1.1:
            k, why = 0, f"speculative rounds measured {measured:.2f}× plain"
        else:
            why = f"α≈{self.alpha:.2f}, c≈{c:.2f}, v({k})≈{self.v(k):.2f} → predicted {predicted:.2f}×"
        if k == 0:
            self.plain_run += 1
            if self.plain_run % self.probe_every == 0:   # probe: the text may have become easy
                self.probe_every = min(self.probe_every * 2, 64)
                return 1, None, f"probe (plain for {self.plain_run} rounds: {why})"
            return 0, None, f"plain step: {why}"
        self.plain_run, self.probe_every = 0, 8
        return k, STOP_BELOW, f"best k: {why}"

    def update(self, rnd) -> None:
        """Fold one finished Round into the estimates."""
        m = len(rnd.drafted)
        if m == 0:
            self.step_s = self._ema(self.step_s, rnd.verify_s)
            return
        self.verify_s[m] = self._ema(self.verify_s.get(m), rnd.verify_s)
        self.draft_step_s = self._ema(self.draft_step_s, rnd.draft_s / m)
        for t in rnd.drafted:
            if t.evaluated and t.overlap is not None:
                self.alpha = self._ema(self.alpha, t.overlap)
        seconds = rnd.t_end - rnd.t_start
        if seconds > 0:
            self.spec_rate = self._ema(self.spec_rate, len(rnd.committed) / seconds)

