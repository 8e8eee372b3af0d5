#!/usr/bin/env bash
# Counts the places in ndarray_ops/src (test modules and test files left out) that choose by an
# op's name: `match` arms whose patterns are string literals (one per arm), and comparisons of
# an op's name with a string literal. Also counts the repository's source files over 800 lines.
# Usage: tools/op_name_counts.sh [TREE]   (default: the repository this script is in)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
arms=0
cmps=0
while IFS= read -r f; do
  # Up to an inline test module (`#[cfg(test)]` then `mod name {`).
  body=$(awk 'held != "" && /^mod .*\{$/ {exit} held != "" {print held; held = ""}
              /^#\[cfg\(test\)\]$/ {held = $0; next} {print}' "$f")
  a=$(printf '%s\n' "$body" |
    grep -cE '^\s*(\|\s*)?(Some\()?"[^"]*"\)?(\s*\|\s*(Some\()?"[^"]*"\)?)*\s*(if .*)?=>' || true)
  c=$(printf '%s\n' "$body" |
    { grep -oE '(op|name|fwd|d\.name|def\.name|op_name\(\))\s*[!=]=\s*"' || true; } | wc -l)
  arms=$((arms + a))
  cmps=$((cmps + c))
done < <(find ndarray_ops/src -name '*.rs' | grep -v '/tests/\|/tests\.rs$' | sort)
big=$(git ls-files | grep -E '\.(rs|py|cu|cuh)$' | xargs wc -l | awk '$2 != "total" && $1 > 800' | wc -l)
echo "string match arms on names: $arms"
echo "comparisons of names with strings: $cmps"
echo "source files over 800 lines: $big"
