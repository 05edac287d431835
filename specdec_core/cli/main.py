"""python -m specdec_core "prompt" [options]  ·  python -m specdec_core --show trace.json

Runs speculative decoding on a pair (the offline default unless told otherwise), streams the
coloured trace to the terminal, prints stats, and optionally compares with plain decoding.
"""
from __future__ import annotations

import argparse
import os
import sys
from functools import partial

from ..decoding.plan import Plan, parse_request
from ..settings import SettingsError
from .render import comparison_lines, legend_line, render_tokens, round_pieces, stats_lines


def parse_args(argv=None) -> argparse.Namespace:
    from ..models import DEFAULT_PRESET, PRESETS

    presets = ", ".join(PRESETS)
    ap = argparse.ArgumentParser(prog="python -m specdec_core", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prompt", nargs="?", help="the prompt text")
    ap.add_argument("--target", default=DEFAULT_PRESET, help=f"preset ({presets}), HF id or local dir")
    ap.add_argument("--draft", default=None,
                    help="draft model id/dir, 'distilled[:DIR]', 'ngram', 'target-layers:N', or 'lookup+<draft>' (prompt lookup where the text repeats, <draft> elsewhere; default: the preset's)")
    ap.add_argument("-k", "--k", default=None, help="a chain of k drafts per round (an integer ≥ 1), or 'auto' with "
                    "--tree none: the shape rule as a chain")
    ap.add_argument("--tree", default="auto", help="the drafting shape: 'auto' (each round's token tree chosen by the "
                    "shape rule from measured acceptance and costs; default), 'none' (chains, see -k) or a budget "
                    "'N,D' (at most N draft tokens in at most D levels)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ap.add_argument("--top-k", type=int, default=0, help="0 = off")
    ap.add_argument("--top-p", type=float, default=1.0, help="1.0 = off")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    ap.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    ap.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                    help="apply the chat template (default: when the tokenizer has one)")
    ap.add_argument("--json", metavar="FILE", help="save the speculative trace as JSON")
    ap.add_argument("--compare-plain", action="store_true", help="also run plain decoding, interleaved with the speculative lane a round at a time, and compare")
    ap.add_argument("--show", metavar="FILE", help="re-render a saved trace (no model is loaded)")
    ap.add_argument("--trust-remote-code", action="store_true", help="allow a model's own code (off)")
    ap.add_argument("--fast-path", action=argparse.BooleanOptionalAction, default=None,
                    help="prepacked CPU matrix kernels (default: on, unless SPECDEC_FAST_PATH=0)")
    ap.add_argument("--passes", default="auto", choices=("auto", "dynamic", "static", "graphs"),
                    help="how the target's passes run: a dynamic cache, a static one (eager), or static with "
                         "captured CUDA graphs (default auto: graphs on CUDA where the model allows, else dynamic)")
    ap.add_argument("--color", action=argparse.BooleanOptionalAction, default=None,
                    help="ANSI colours (default: when writing to a terminal and NO_COLOR is unset)")
    args = ap.parse_args(argv)
    if args.show is None and not args.prompt:
        ap.error("give a prompt, or --show FILE")
    if args.show is None:   # the one settings check (plan.py, settings.py), as the API and the app use it
        try:
            args.request = parse_request(args.k, args.tree, args.temperature, args.top_k, args.top_p,
                                         args.max_new_tokens, args.seed)
        except SettingsError as e:
            ap.error(str(e))
    if args.color is None:
        args.color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    return args


def show(path: str, colour: bool) -> None:
    from ..trace.schema import Trace

    trace = Trace.load(path)
    cfg = trace.config
    kernels = (cfg.kernels or {}).get("target")   # optional: older traces lack it
    passes = (cfg.kernels or {}).get("passes")    # likewise, before the static path
    shape = "plain" if cfg.plain else Plan.from_config(cfg).label()
    print(f"trace {path}: {cfg.target} + {cfg.draft} · {shape} · T={cfg.temperature} "
          f"· {cfg.device or '?'}" + (f" · kernels: {kernels}" if kernels else "")
          + (f" · passes: {passes}" if passes else ""))
    print(legend_line(colour))
    print(render_tokens(trace, eos_ids=set(cfg.eos_ids or ()), colour=colour))   # EOS hidden, as live
    print("\n".join(stats_lines(trace)))


def run(args) -> None:
    from .. import interleave, load_pair, stream_decode, warm_up

    print(f"loading {args.target} (draft: {args.draft or 'preset default'}) ...", file=sys.stderr)
    pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype,
                     trust_remote_code=args.trust_remote_code, fast_path=args.fast_path, passes=args.passes)
    ids = pair.encode_prompt(args.prompt, chat=args.chat)
    request = args.request
    # Warm-up outside any timing (both code paths, the run's shape), so no lane pays one-time costs.
    warm_up(pair, ids, request)
    print(f"{pair.target_name} + {pair.draft_name} · {request.plan.label()} · {pair.input_device} · "
          f"{str(pair.dtype).replace('torch.', '')} · kernels: {pair.kernels()['target']} · "
          f"passes: {pair.kernels()['passes']}")
    print(legend_line(args.color))
    lanes = {"speculative": partial(stream_decode, pair, ids, request)}
    if args.compare_plain:   # plain decoding takes turns with it, a round each: both see the same machine
        lanes["plain"] = partial(stream_decode, pair, ids, request.plain())
    done = {}
    for lane, trace in interleave(lanes):
        done[lane] = trace
        if lane == "speculative":
            # A character still incomplete is printed with the round that completes it.
            print("".join(round_pieces(trace, trace.rounds[-1], pair.eos_ids, args.color, pending=False)),
                  end="", flush=True)
    print()
    trace = done["speculative"]
    print("\n".join(stats_lines(trace)))
    if args.json:
        trace.save(args.json)
        print(f"trace saved to {args.json}")
    if args.compare_plain:
        print("\n".join(comparison_lines(trace, done["plain"])))


def main(argv=None) -> int:
    args = parse_args(argv)
    from ..errors import ModelLoadError
    from ..trace.schema import TraceFormatError
    try:
        show(args.show, args.color) if args.show else run(args)
    except (ValueError, ModelLoadError, TraceFormatError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except RuntimeError as e:   # e.g. CUDA out of memory: one clear line, no stack trace
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0
