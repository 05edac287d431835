#!/usr/bin/env bash
# stash.sh out|in — before a lease call, move every file of the working tree over 1 MB to ../lease-stash
# and the folders the GPU never reads (the bench reports, the screenshots, the run, which travels in the
# blob): a call carries the tree, 64 MiB in all, and a part of the blob; the tree is then ~3 MB.
# `in` puts them back. Check `git status` after `in`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=../lease-stash
if [ "$1" = out ]; then
  (git ls-files; git ls-files --others --exclude-standard) | sort -u | while read -r f; do
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 1000000 ]; then mkdir -p "$S/$(dirname "$f")"; mv "$f" "$S/$f"; fi
  done
  for d in docs/bench assets/screenshots specdec_core/lab/runs/v5 specdec_core/lab/runs/v5-deep; do
    [ -d "$d" ] && mkdir -p "$S/$d" && cp -r "$d"/. "$S/$d"/ && rm -rf "$d"
  done
  echo "tree now $(( $( (git ls-files; git ls-files --others --exclude-standard) | sort -u | while read -r f; do [ -f "$f" ] && stat -c %s "$f"; done | paste -sd+ | bc) / 1000000 )) MB"
else
  [ -d "$S" ] && (cd "$S" && find . -type f) | while read -r f; do mkdir -p "$(dirname "$f")"; mv "$S/$f" "$f"; done
  rm -rf "$S"
fi
