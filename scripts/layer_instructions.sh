#!/usr/bin/env bash
# Instructions per request of the HTTP layer alone, in process
# (examples/layer_instructions.rs): callgrind counts only inside its
# `measured` function, so the count is exact and the same on every run of
# one binary. Complements scripts/http_instructions.sh (a whole server
# under wrk, whose count moves with how requests batch).
#
#   bash scripts/layer_instructions.sh
#
# Settings (environment): MODES ("bare tollgate tollgate-no-headers
# tollgate-extension governor governor-headers"), N (20000 requests), FEATURES (axum; with
# `tower` alone, PeerIp reads ConnectInfo through peer_from), BIN (a
# binary to use instead of building this tree's).
set -euo pipefail
cd "$(dirname "$0")/.."

MODES=${MODES:-"bare tollgate tollgate-no-headers tollgate-extension governor governor-headers"}
N=${N:-20000}
FEATURES=${FEATURES:-axum}

command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
    cargo build --release --features "$FEATURES" --example layer_instructions >&2
    BIN="${CARGO_TARGET_DIR:-target}/release/examples/layer_instructions"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| mode | instructions per request | over bare |"
echo "|---|--:|--:|"
bare=""
for mode in $MODES; do
    total=$(valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect='layer_instructions::measured*' \
        --callgrind-out-file="$work/cg" "$BIN" "$mode" "$N" 2>&1 >/dev/null |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    per=$((total / N))
    [ "$mode" = bare ] && bare=$per
    if [ -n "$bare" ]; then
        echo "| $mode | $per | $((per - bare)) |"
    else
        echo "| $mode | $per | |"
    fi
done
