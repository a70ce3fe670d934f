#!/usr/bin/env bash
# Runs berth's whole test suite: unit tests of every crate (model, store,
# API, policy, schema) and the HTTP integration tests, which start the real
# `berth` binary on 127.0.0.1 with throwaway data directories.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) first" >&2
  exit 1
fi
cargo test --workspace --locked "$@"
