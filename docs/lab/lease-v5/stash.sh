#!/usr/bin/env bash
# stash.sh out|in — before a lease call, move every file of the working tree over 1 MB to ../lease-stash
# (a call carries the tree, 64 MiB in all, and a part of the blob; the blob holds what the GPU needs);
# `in` puts them back. Check `git status` after `in`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=../lease-stash
if [ "$1" = out ]; then
  (git ls-files; git ls-files --others --exclude-standard) | sort -u | while read -r f; do
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 1000000 ]; then mkdir -p "$S/$(dirname "$f")"; mv "$f" "$S/$f"; fi
  done
  echo "tree now $(( $( (git ls-files; git ls-files --others --exclude-standard) | sort -u | while read -r f; do [ -f "$f" ] && stat -c %s "$f"; done | paste -sd+ | bc) / 1000000 )) MB"
else
  [ -d "$S" ] && (cd "$S" && find . -type f) | while read -r f; do mkdir -p "$(dirname "$f")"; mv "$S/$f" "$f"; done
  rm -rf "$S"
fi
