#!/usr/bin/env bash
# User-space instructions per request of the HTTP load server, counted by
# valgrind's callgrind: exact and nearly independent of other load on the
# machine, unlike times. For each mode, two runs of different length
# (SHORT, LONG of wrk against 127.0.0.1); per request = (I_long - I_short)
# / (N_long - N_short), which cancels start-up and shutdown. Kernel time
# (the network stack) is not counted: compare modes with each other, not
# with the CPU µs of scripts/http_load.sh.
#
#   bash scripts/http_instructions.sh
#
# Settings (environment): MODES ("bare bare-headers tollgate
# tollgate-no-headers tollgate-extension governor"), SCENARIOS ("allowed"),
# ROUNDS (2), SHORT (3s), LONG (9s),
# SERVER (a server binary to use instead of building this tree's).
set -euo pipefail
cd "$(dirname "$0")/.."

MODES=${MODES:-"bare bare-headers tollgate tollgate-no-headers tollgate-extension governor"}
SCENARIOS=${SCENARIOS:-allowed}
ROUNDS=${ROUNDS:-2}
SHORT=${SHORT:-3s}
LONG=${LONG:-9s}

for tool in valgrind wrk; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
if [ -z "${SERVER:-}" ]; then
    cargo build --release --features axum --example http_load_server >&2
    SERVER="${CARGO_TARGET_DIR:-target}/release/examples/http_load_server"
fi

work=$(mktemp -d)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# One run: prints "requests instructions".
run() {
    local mode=$1 scenario=$2 duration=$3 out="$work/run"
    rm -f "$out".*
    valgrind --tool=callgrind --callgrind-out-file="$out.cg" "$SERVER" --addr 127.0.0.1:0 \
        --mode "$mode" --scenario "$scenario" --workers 1 >"$out.stdout" 2>"$out.err" &
    server_pid=$!
    local addr=""
    for _ in $(seq 300); do
        addr=$(sed -n 's#^listening on http://\(127\.0\.0\.1:[0-9]*\)/.*#\1#p' "$out.stdout" 2>/dev/null || true)
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { echo "the server did not start" >&2; cat "$out.err" >&2; exit 1; }
    wrk -t1 -c4 -d"$duration" "http://$addr/" >"$out.wrk"
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    echo "$(awk '/requests in/ { print $1 }' "$out.wrk") $(awk '/^(summary|totals):/ { print $2; exit }' "$out.cg")"
}

echo "| scenario | mode | round | instructions per request |"
echo "|---|---|--:|--:|"
for scenario in $SCENARIOS; do
    for round in $(seq "$ROUNDS"); do
        for mode in $MODES; do
            read -r n1 i1 < <(run "$mode" "$scenario" "$SHORT")
            read -r n2 i2 < <(run "$mode" "$scenario" "$LONG")
            awk -v s="$scenario" -v m="$mode" -v r="$round" -v a="$n1" -v b="$n2" -v x="$i1" -v y="$i2" \
                'BEGIN { printf "| %s | %s | %d | %.0f |\n", s, m, r, (y - x) / (b - a) }'
        done
    done
done
