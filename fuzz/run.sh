#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20), seeded from the repository's own
# inputs: the shipped graphs, the MXNet fixtures and a few attribute sets. Needs a nightly
# toolchain and cargo-fuzz (`cargo install cargo-fuzz`). A crash fails the run and leaves the
# input under fuzz/artifacts/TARGET/.
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(symbol_json ndarray_file bound_graph attributes)

mkdir -p corpus/symbol_json corpus/ndarray_file corpus/bound_graph corpus/attributes
for f in ../graphs/mlp-symbol.json ../ndarray_ops/tests/data/mxnet/*-symbol.json ../ndarray_ops/tests/data/*-symbol.json; do
  cp -n "$f" corpus/symbol_json/ 2>/dev/null || true
done
for f in ../ndarray_ops/tests/data/mxnet/*.params ../ndarray_ops/tests/data/mxnet/*.nd; do
  [ "$(stat -c %s "$f")" -le 65536 ] && cp -n "$f" corpus/ndarray_file/ || true
done
cp -n ../graphs/mlp-*-bound.json corpus/bound_graph/ 2>/dev/null || true
i=0
while IFS= read -r line; do
  i=$((i + 1))
  printf '%b' "$line" > "corpus/attributes/seed$i"
done <<'SEEDS'
Convolution\nkernel=(3, 3)\nnum_filter=4\npad=(1, 1)\nno_bias=True
Pooling\nkernel=(2, 2)\nstride=(2, 2)\npool_type=max
take\nmode=raise\naxis=0
Reshape\nshape=(0, -1)
sum\naxis=(0, 1)\nkeepdims=True
topk\nk=2\nret_typ=both\naxis=-1
slice\nbegin=(0, 1)\nend=(2, None)\nstep=(1, 2)
one_hot\ndepth=4\ndtype=float64
SEEDS

cargo +nightly fuzz build
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${secs}s"
  cargo +nightly fuzz run "$t" "corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 2>&1 \
    | grep -E "^(stat::number_of_executed_units|stat::new_units_added|==|SUMMARY|Done)|ERROR|panicked" || true
  if [ -n "$(ls -A "artifacts/$t" 2>/dev/null)" ]; then
    echo "fuzz target $t found a crash: $(ls "artifacts/$t")"
    exit 1
  fi
done
