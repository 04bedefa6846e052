#!/usr/bin/env bash
# Stands in for `tailtrim serve` so that client suites written for a server (tests/python,
# tests/go) run through `tailtrim proxy` in front of stock memcached backends
# (TAILTRIM_PROXY_BACKENDS, default 2, sharing the server's -m memory equally, so that the
# pool's summed `limit_maxbytes` equals what the suite asked one server for):
#
#   TAILTRIM_BIN=crates/proxy/scripts/proxy-as-server.sh .venv/bin/python -m pytest tests/python
#
# Accepts the server's arguments (`serve -p PORT -l ADDR -m MB -I SIZE ...`; `-Z` and the
# `ssl_*` items of `-o` go to the proxy's client listener; others ignored),
# starts the backends on free ports, then execs the proxy on PORT. A watcher kills the
# backends when the proxy (this process after exec) goes away, even on SIGKILL.
# TAILTRIM_PROXY_BIN picks the tailtrim binary (default target/release/tailtrim);
# TAILTRIM_PROXY_ARGS adds proxy flags (e.g. "--replicas 2").
# TAILTRIM_PROXY_CHURN=SECONDS starts one more memcached, adds it to the pool 0.2 s after
# the proxy starts, then every SECONDS removes it and adds it again (at most
# TAILTRIM_PROXY_CHURN_CHANGES changes, default no limit) through the proxy's admin listener (warm-up mode
# TAILTRIM_PROXY_CHURN_WARMUP, default fallback), so a suite runs while the membership changes.
# Each answer of the admin listener is appended to TAILTRIM_PROXY_CHURN_LOG (default
# /dev/null); a refused change stops the churn and is logged with the word FAILED.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
bin="${TAILTRIM_PROXY_BIN:-$repo/target/release/tailtrim}"
port=11211
listen=127.0.0.1
item_size=1m
memory_mb=64
backends="${TAILTRIM_PROXY_BACKENDS:-2}"
tls_args=()
ssl_options=()
[ "${1:-}" = "serve" ] && shift
while [ $# -gt 0 ]; do
    case "$1" in
        -p) port="$2"; shift 2 ;;
        -l) listen="$2"; shift 2 ;;
        -I) item_size="$2"; shift 2 ;;
        -m) memory_mb="$2"; shift 2 ;;
        -U|-t|-c) shift 2 ;;
        -Z|--enable-ssl) tls_args+=(-Z); shift ;;
        -o)
            IFS=, read -r -a items <<<"$2"
            for item in "${items[@]}"; do
                [[ "$item" == ssl_* ]] && ssl_options+=("$item")
            done
            shift 2 ;;
        *) shift ;;
    esac
done
case "$item_size" in
    *[kK]) item_bytes=$(( ${item_size%[kK]} * 1024 )) ;;
    *[mM]) item_bytes=$(( ${item_size%[mM]} * 1024 * 1024 )) ;;
    *) item_bytes="$item_size" ;;
esac
user_args=()
[ "$(id -u)" = 0 ] && user_args=(-u root)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
servers=()
pids=()
for _ in $(seq "$backends"); do
    p="$(free_port)"
    memcached -l 127.0.0.1 -p "$p" -U 0 -m $((memory_mb / backends)) -t 1 -I "$item_size" "${user_args[@]}" &
    pids+=("$!")
    servers+=("127.0.0.1:$p:1")
done
# The proxy must not answer before its backends listen (a suite's first request would get
# "backend unreachable"): wait up to 5 s for each to accept a connection.
for server in "${servers[@]}"; do
    p="${server#127.0.0.1:}"; p="${p%:1}"
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break
        sleep 0.05
    done
done
self=$$
admin=off
churn="${TAILTRIM_PROXY_CHURN:-}"
if [ -n "$churn" ]; then
    extra="$(free_port)"
    memcached -l 127.0.0.1 -p "$extra" -U 0 -m $((memory_mb / backends)) -t 1 -I "$item_size" "${user_args[@]}" &
    pids+=("$!")
    admin_port="$(free_port)"
    admin="127.0.0.1:$admin_port"
    churn_log="${TAILTRIM_PROXY_CHURN_LOG:-/dev/null}"
    churn_warmup="${TAILTRIM_PROXY_CHURN_WARMUP:-fallback}"
    # One admin request; prints the status line and the JSON answer on one line.
    admin_call() {
        (exec 3<>"/dev/tcp/127.0.0.1/$admin_port" || exit 1
         printf '%s /pool/servers?server=127.0.0.1:%s&warmup=%s HTTP/1.0\r\n\r\n' \
             "$1" "$extra" "$churn_warmup" >&3
         tr '\r\n' '  ' <&3) 2>/dev/null
    }
    (
        # Wait for the proxy (this process after exec) to answer on its admin port.
        for _ in $(seq 100); do
            (exec 3<>"/dev/tcp/127.0.0.1/$admin_port") 2>/dev/null && break
            sleep 0.05
        done
        method=POST
        pause=0.2
        changes=0
        while kill -0 "$self" 2>/dev/null; do
            [ -n "${TAILTRIM_PROXY_CHURN_CHANGES:-}" ] && [ "$changes" -ge "$TAILTRIM_PROXY_CHURN_CHANGES" ] && break
            changes=$((changes + 1))
            sleep "$pause"
            pause="$churn"
            kill -0 "$self" 2>/dev/null || break
            answer="$(admin_call "$method")"
            if [[ "$answer" != "HTTP/1.1 200"* && "$answer" != "HTTP/1.0 200"* ]]; then
                echo "FAILED $method: $answer" >>"$churn_log"
                break
            fi
            echo "$method: $answer" >>"$churn_log"
            if [ "$method" = POST ]; then method=DELETE; else method=POST; fi
        done
    ) &
fi
( while kill -0 "$self" 2>/dev/null; do sleep 0.3; done; kill "${pids[@]}" 2>/dev/null ) &
joined="$(IFS=,; echo "${servers[*]}")"
if [ "${#ssl_options[@]}" -gt 0 ]; then
    tls_args+=(-o "$(IFS=,; echo "${ssl_options[*]}")")
fi
# shellcheck disable=SC2086
exec "$bin" proxy -l "$listen:$port" --admin "$admin" -s "$joined" -I "$item_bytes" \
    "${tls_args[@]}" ${TAILTRIM_PROXY_ARGS:-}
