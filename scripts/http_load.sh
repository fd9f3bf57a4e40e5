#!/usr/bin/env bash
# HTTP load benchmark: one trivial axum handler, bare, behind tollgate's
# RateLimitLayer, and behind tower_governor's GovernorLayer, loaded with wrk
# over loopback. Prints a markdown table of medians.
#
#   bash scripts/http_load.sh
#
# Settings (environment): ROUNDS (5), DURATION (6s), WARMUP (1s),
# CONNECTIONS (32), WRK_THREADS (1), SCENARIOS ("allowed deny"),
# MODES ("bare tollgate tollgate-no-headers governor governor-headers":
# the layer as it ships, with headers on every response; with
# AdmittedHeaders::Never, headers on refusals only, as tower_governor's
# default; tower_governor as it ships; and with its use_headers(). Also
# tollgate-extension, with the Decision in the request's extensions too),
# SERVER_CPU (0), WRK_CPU (1).
#
# "ratio vs peer" compares each tollgate mode with its like-for-like
# tower_governor mode: tollgate with governor-headers, the others with
# governor. "paired ratio vs peer" is the median over rounds of each
# round's own ratio: the machine's speed can shift between rounds, and a
# round's modes run back to back.
#
# With two or more CPUs and `taskset`, the server is pinned to SERVER_CPU
# (its tokio runtime then has one worker) and wrk to WRK_CPU, so that each
# has a core of its own. Only 127.0.0.1 is ever targeted. About 4 minutes
# with the defaults, after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

# Other work on the machine would take the server's or wrk's core in the
# middle of a run. As root, run in a session of our own (so a scheduler
# autogroup of our own) at nice -19: server and wrk then keep their cores.
# PRIORITY=0 skips this.
if [ "${PRIORITY:-1}" = 1 ] && [ -z "${HTTP_LOAD_SESSION:-}" ] && [ "$(id -u)" = 0 ] &&
    command -v setsid >/dev/null && [ -w /proc/self/autogroup ]; then
    export HTTP_LOAD_SESSION=1
    exec setsid --wait bash -c 'echo -19 >/proc/self/autogroup && exec bash "$0" "$@"' "$0" "$@"
fi

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-6s}
WARMUP=${WARMUP:-1s}
CONNECTIONS=${CONNECTIONS:-32}
WRK_THREADS=${WRK_THREADS:-1}
SCENARIOS=${SCENARIOS:-"allowed deny"}
MODES=${MODES:-"bare tollgate tollgate-no-headers governor governor-headers"}
SERVER_CPU=${SERVER_CPU:-0}
WRK_CPU=${WRK_CPU:-1}

log() { echo "$*" >&2; }

if ! command -v wrk >/dev/null; then
    log "== wrk is missing; installing it"
    sudo -n apt-get install -y wrk >&2 || apt-get install -y wrk >&2 || true
fi
if ! command -v wrk >/dev/null; then
    log "wrk is not installed and could not be installed (apt-get install wrk); giving up"
    exit 1
fi

log "== building the server (release)"
cargo build --release --features axum --example http_load_server >&2
server_bin="${CARGO_TARGET_DIR:-target}/release/examples/http_load_server"

server_pin=()
wrk_pin=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    server_pin=(taskset -c "$SERVER_CPU")
    wrk_pin=(taskset -c "$WRK_CPU")
    pinning="server on CPU $SERVER_CPU, wrk on CPU $WRK_CPU (taskset)"
else
    pinning="not pinned (taskset missing or fewer than 2 CPUs)"
fi

priority="scheduler autogroup at nice $(awk '{ print $3 }' /proc/self/autogroup 2>/dev/null || echo '?')"
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

# Starts the server for mode $1 and scenario $2; sets server_pid and url.
# Each server writes to files of its own: the shell opens them in the
# child, so a reused name could still show the previous server's address.
runs=0
start_server() {
    runs=$((runs + 1))
    local out="$work/server.$runs.out" err="$work/server.$runs.err"
    : >"$out"
    "${server_pin[@]}" "$server_bin" --addr 127.0.0.1:0 --mode "$1" --scenario "$2" \
        >"$out" 2>"$err" &
    server_pid=$!
    local addr=""
    for _ in $(seq 100); do
        addr=$(sed -n 's#^listening on http://\(127\.0\.0\.1:[0-9]*\)/.*#\1#p' "$out")
        [ -n "$addr" ] && break
        sleep 0.05
    done
    if [ -z "$addr" ]; then
        log "the server did not start:"
        cat "$err" >&2
        exit 1
    fi
    url="http://$addr/"
}

stop_server() {
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# The server's CPU time so far, in nanoseconds, all its threads together.
cpu_ns() {
    cat /proc/"$server_pid"/task/*/schedstat | awk '{ n += $1 } END { printf "%.0f", n }'
}

# wrk's latency as microseconds ("1.23ms" -> 1230).
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) f = 1; else if (v ~ /ms$/) f = 1000; else if (v ~ /m$/) f = 60e6; else f = 1e6
        printf "%.1f", n * f
    }'
}

# One line per run: scenario mode round req/s p99_us non2xx requests server_cpu% cpu_us_per_request
results="$work/results"
: >"$results"
secs=${DURATION%s}

log "== $ROUNDS rounds of $DURATION per mode, wrk -t$WRK_THREADS -c$CONNECTIONS, $pinning, $priority"
log "   load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for scenario in $SCENARIOS; do
    read -r -a modes <<<"$MODES"
    for round in $(seq "$ROUNDS"); do
        # Rotate the order each round, so no mode always runs first.
        shift_by=$(((round - 1) % ${#modes[@]}))
        order=("${modes[@]:shift_by}" "${modes[@]:0:shift_by}")
        for mode in "${order[@]}"; do
            start_server "$mode" "$scenario"
            "${wrk_pin[@]}" wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$WARMUP" "$url" >/dev/null
            before=$(cpu_ns)
            "${wrk_pin[@]}" wrk --latency -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" "$url" \
                >"$work/wrk.out"
            after=$(cpu_ns)
            stop_server
            rps=$(awk '/^Requests\/sec:/ { print $2 }' "$work/wrk.out")
            p99=$(to_us "$(awk '$1 == "99%" { print $2 }' "$work/wrk.out")")
            non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $5 }' "$work/wrk.out")
            requests=$(awk '/requests in/ { print $1 }' "$work/wrk.out")
            cpu=$(awk -v a="$after" -v b="$before" -v s="$secs" \
                'BEGIN { printf "%.0f", 100 * (a - b) / 1e9 / s }')
            per=$(awk -v a="$after" -v b="$before" -v n="$requests" \
                'BEGIN { printf "%.3f", (a - b) / 1e3 / n }')
            echo "$scenario $mode $round $rps $p99 ${non2xx:-0} $requests $cpu $per" >>"$results"
            log "   $scenario $mode round $round: $rps req/s, p99 ${p99} us," \
                "non-2xx ${non2xx:-0} of $requests, server CPU ${cpu}%, ${per} CPU-us per request"
        done
    done
done
log "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { awk -v s="$1" -v m="$2" -v f="$3" '$1 == s && $2 == m { print $f }' "$results" | median; }
# The median over rounds of each round's req/s ratio of mode $2 to mode $3:
# rounds alternate the modes, so a round's pair shared the machine's state.
paired() {
    awk -v s="$1" -v a="$2" -v b="$3" '$1 == s && $2 == a { x[$3] = $4 } $1 == s && $2 == b { y[$3] = $4 }
        END { for (r in x) if (r in y && y[r] > 0) print x[r] / y[r] }' "$results" | median
}

echo
echo "wrk --latency -t$WRK_THREADS -c$CONNECTIONS -d$DURATION against 127.0.0.1, $ROUNDS rounds per mode" \
    "(medians), $pinning, $priority; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| scenario | mode | req/s (median) | p99 (median) | ratio vs bare | ratio vs peer | paired ratio vs peer | refused (429) | server CPU | CPU µs per request |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"
for scenario in $SCENARIOS; do
    bare=$(field "$scenario" bare 4)
    for mode in $MODES; do
        # The like-for-like peer: tower_governor with headers for the layer
        # that sends them on every response, without for the others.
        peer=governor
        [ "$mode" = tollgate ] && [[ " $MODES " == *" governor-headers "* ]] && peer=governor-headers
        case $mode in governor* | bare*) peer= ;; esac
        governor=$([ -n "$peer" ] && field "$scenario" "$peer" 4 || true)
        pair=$([ -n "$peer" ] && paired "$scenario" "$mode" "$peer" || true)
        rps=$(field "$scenario" "$mode" 4)
        p99=$(field "$scenario" "$mode" 5)
        refused=$(awk -v s="$scenario" -v m="$mode" \
            '$1 == s && $2 == m { n += $6; t += $7 } END { printf "%.1f%%", t ? 100 * n / t : 0 }' "$results")
        cpu=$(field "$scenario" "$mode" 8)
        per=$(field "$scenario" "$mode" 9)
        name=$mode
        [ "$mode" = governor ] && name=tower_governor
        [ "$mode" = governor-headers ] && name="tower_governor, use_headers()"
        [ -n "$peer" ] && name="$name (peer: $peer)"
        awk -v s="$scenario" -v m="$name" -v r="$rps" -v p="$p99" -v b="$bare" -v g="$governor" \
            -v x="$refused" -v c="$cpu" -v u="$per" -v q="$pair" 'BEGIN {
            vb = b ? sprintf("%.3f", r / b) : "-"
            vg = g ? sprintf("%.3f", r / g) : "-"
            vq = q != "" ? sprintf("%.3f", q) : "-"
            printf "| %s | %s | %.0f | %.0f µs | %s | %s | %s | %s | %s%% | %.2f |\n", s, m, r, p, vb, vg, vq, x, c, u
        }'
    done
done
