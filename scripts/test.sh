#!/usr/bin/env bash
# The whole test suite: installs the real peers (once, into a cache outside
# the clone), then runs every test of the workspace against them.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/peers.sh)"
cargo test --workspace "$@"
