#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (the flow parsers, the configuration
# parser, the model's event-stream decoder, the strict-JSON verdict and
# budget parsers) for a short fixed time each, with bounded memory and input
# length, and exits non-zero on the first crash, panic, leak past the memory
# limit or hang. Installs cargo-fuzz into a cache folder outside the clone
# when it is missing.
#
#   scripts/fuzz.sh                 every target, 20 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh sse flow_json
#
# Only a stable toolchain is needed: cargo-fuzz passes rustc flags that are
# nightly-only (-Zsanitizer, ...), which a stable compiler accepts under
# RUSTC_BOOTSTRAP=1. A crash leaves its input in fuzz/artifacts/TARGET/;
# replay it with `cargo fuzz run TARGET fuzz/artifacts/TARGET/crash-...`
# (same environment).
set -euo pipefail
cd "$(dirname "$0")/.."

tools="${LEASEHOLD_TOOLS:-$HOME/.cache/leasehold-tools}"
seconds="${FUZZ_SECONDS:-20}"
# libFuzzer's limits: the process's resident memory (a parser that keeps
# what it is fed beyond reason fails here) and the largest input tried.
rss_limit_mb="${FUZZ_RSS_LIMIT_MB:-2048}"
max_len="${FUZZ_MAX_LEN:-65536}"
cargo_fuzz_version=0.13.2

export PATH="$tools/bin:$PATH"
export RUSTC_BOOTSTRAP=1
# Its own target folder: the fuzz build's flags differ from the workspace's.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/fuzz/target}"

if ! cargo fuzz --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
  cargo install --locked --quiet cargo-fuzz --version "$cargo_fuzz_version" --root "$tools" >&2
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

# Optimized, with debug assertions and overflow checks (cargo-fuzz's
# default), under AddressSanitizer.
cargo fuzz build >&2
mkdir -p fuzz/logs
for target in "${targets[@]}"; do
  echo "fuzz: $target for ${seconds}s" >&2
  mkdir -p "fuzz/corpus/$target"
  log="fuzz/logs/$target.log"
  if ! cargo fuzz run "$target" "fuzz/corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" -max_len="$max_len" \
      -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target FAILED; the input is in fuzz/artifacts/$target/, the log in $log" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units" "$log" | sed "s/^/fuzz: $target: /" >&2 || true
done
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash" >&2
