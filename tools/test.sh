#!/usr/bin/env bash
# The whole test suite, as the README gives it: the Rust tests of every crate, then the Python
# package installed into a fresh virtual environment (`pip install ./python`, as a user would)
# and its pytest suite run against that install.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --release
# The products (Strassen's split among them), Winograd's transforms, convolutions and fused
# graphs again with the AVX2 kernels, on a CPU that would otherwise run them with AVX-512 (where it has neither, MXRS_CPU
# says so and they run as above). Selected across the workspace, as built above: a selection by
# package resolves features apart and builds the crates again.
MXRS_CPU=avx2 cargo test --workspace --release --lib -- gemm winograd strassen
MXRS_CPU=avx2 cargo test --workspace --release --test fusion --test nn --test rnn --test gradient \
  --test layers

venv=target/pytest-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet ./python pytest
# Run from the repository root with the venv's pytest, so that `import mxrs` finds the
# installed package and not the source folder.
"$venv/bin/pytest" -q python/tests
