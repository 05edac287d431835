"""The run form's fields: drafter and shape choices, reading and checking what a visitor typed
(settings, target and draft, whole numbers), and the one error type the page shows (UserError, and
user_error for an exception from model work). No model work here."""
from __future__ import annotations

import logging

from specdec_core import PRESETS, RANGES, DecodeError, DraftSpec, ModelLoadError, Request, SettingsError, parse_draft, parse_request

from . import explain

LOG = logging.getLogger("specdec-explainer")

NGRAM_CHOICE = "n-gram (prompt lookup, no model)"
MODEL_CHOICE = "draft model"
COMBINED_CHOICE = "prompt lookup + draft model"
RECYCLE_CHOICE = "prompt lookup + recycling (no draft model)"
DRAFTERS = [COMBINED_CHOICE, MODEL_CHOICE, NGRAM_CHOICE, RECYCLE_CHOICE]
K_CHOICES = ["auto", "1", "2", "3", "4", "5", "6", "8", "10", "12"]


class UserError(Exception):
    """An error meant for the page (ui.py shows it in the banner, headed by `what`: "Not run" for a
    refused input, "Run failed" when the decode itself failed)."""

    def __init__(self, message: str, what: str = "Not run"):
        super().__init__(message)
        self.what = what


def whole_number(value, name: str, lo: int, hi: int) -> int:
    """A page field that counts something (draws, repeats, seeds, tokens), or a UserError naming it
    and its range."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a whole number between {lo:,} and {hi:,}") from None
    if not lo <= n <= hi:
        raise UserError(f"{name} must be between {lo:,} and {hi:,} (got {n:,})")
    return n


def preset_fields(preset: str) -> dict:
    """Target, draft and drafter fields for a preset (a model drafter for the n-gram default:
    the target's first two layers)."""
    p = PRESETS.get(preset)
    if p is None:
        return {}
    if p.draft.kind == "ngram":
        return {"target": preset, "draft": "target-layers:2", "drafter": NGRAM_CHOICE}
    drafter = COMBINED_CHOICE if p.draft.lookup else MODEL_CHOICE
    return {"target": preset, "draft": p.draft.with_lookup(False).name, "drafter": drafter}


TREE_CHOICES = ["auto", "none", "4,4", "8,4", "12,5", "24,6"]


def field_hint(name: str) -> str:
    """The hint under a settings field: its allowed range on this page, from the one table."""
    if name == "tree":
        return ('auto: each round\'s token tree chosen by the shape rule; none: chains of k; "N,D": at most '
                f"N guesses ({RANGES['tree_nodes'].allowed()}) in D levels ({RANGES['tree_depth'].allowed()})")
    hint = RANGES[name].allowed(page=True)
    return hint + "; a number: a chain of k drafts per round (with shape auto or none)" if name == "k" else hint


def parse_settings(k, temperature, top_k, top_p, max_new_tokens, seed, tree="auto") -> Request:
    """The page's fields through the core's one check of a request (parse_request), with the page's
    caps; every decode of the action takes the Request as it is. The shape: k "auto" leaves it to
    `tree`; a number k is a chain of k (refused beside a tree budget)."""
    try:
        return parse_request(k, tree, temperature, top_k, top_p, max_new_tokens, seed, page=True)
    except SettingsError as e:
        raise UserError(str(e)) from None


def pair_args(preset: str, target: str, draft: str, drafter: str) -> tuple[str, DraftSpec]:
    """The page's target, draft and drafter fields -> (target reference, DraftSpec): the drafter
    choice says whether prompt lookup goes first; the draft field names the model draft. With no
    draft named, the default drafter (prompt lookup + a draft) falls back to prompt lookup +
    recycling, which any target can run."""
    target = (target or "").strip() or preset
    if drafter == NGRAM_CHOICE:
        return target, DraftSpec("ngram")
    draft = (draft or "").strip()
    if drafter == RECYCLE_CHOICE or (drafter == COMBINED_CHOICE and not draft):
        return target, DraftSpec("recycle", lookup=True)      # training-free: any target, no draft model
    if not draft:
        raise UserError(explain.ERRORS["no_draft"])
    if drafter == COMBINED_CHOICE and not draft.startswith("lookup+"):
        draft = "lookup+" + draft          # "distilled+recycle" reads as lookup + distilled + recycling
    try:
        spec = parse_draft(draft)
    except ModelLoadError as e:
        raise UserError(str(e)) from None
    return target, spec


def user_error(e: Exception, what: str) -> UserError:
    """The one line the page shows for an exception raised by model work on `what`."""
    if isinstance(e, UserError):
        return e
    if isinstance(e, (ModelLoadError, ValueError, DecodeError)):
        return UserError(str(e))
    if isinstance(e, MemoryError) or "out of memory" in str(e).lower():   # torch.OutOfMemoryError is a RuntimeError
        return UserError(explain.ERRORS["oom"].format(what=what), what="Run failed")
    # Anything else is a bug: the server log keeps the traceback, the page gets one line, and the
    # shared models are untouched (a decode holds only per-request state), so the next run works.
    LOG.error("model work failed", exc_info=e)
    return UserError(explain.ERRORS["internal"].format(error=f"{type(e).__name__}: {e}"), what="Run failed")
