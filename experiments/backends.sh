# Sourced by the shell experiments (experiments/syscalls.sh, experiments/proxy/callgrind.sh):
# a scratch folder removed on exit with every process started, memcached backends with their
# keys preloaded, and a nutcracker pool over them on the ring the proxy experiments use.
#
#   source experiments/backends.sh      # sets $scratch, $pids, the EXIT trap
#   start_backends CPU PORT...          # memcached -t 1 -m 64 on CPU (taskset; "" for none)
#   preload_backends ARGS -- PORT...    # closedloop -preload ARGS on each (every key on each)
#   nutcracker_pool LISTEN PORT... > file.yml

closedloop=target/experiments/closedloop
scratch="$(mktemp -d)"
pids=()
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$scratch"
}
trap cleanup EXIT
memcached_user=()
[ "$(id -u)" -eq 0 ] && memcached_user=(-u nobody)

start_backends() {
    local cpu="$1" port pin=()
    shift
    [ -n "$cpu" ] && pin=(taskset -c "$cpu")
    for port in "$@"; do
        "${pin[@]}" memcached -p "$port" -l 127.0.0.1 -t 1 -U 0 -m 64 "${memcached_user[@]}" &
        pids+=($!)
    done
    sleep 0.5
}

preload_backends() {
    local args=() port
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    for port in "$@"; do
        "$closedloop" -s "127.0.0.1:$port" -preload "${args[@]}" >/dev/null
    done
}

# ketama over fnv1a_64, weight 1 each, 2 s timeout, no ejection: the ring of
# `tailtrim proxy --hash fnv1a_64 --distribution ketama` over the same servers.
nutcracker_pool() {
    local listen="$1" port
    shift
    printf 'pool:\n  listen: 127.0.0.1:%s\n  hash: fnv1a_64\n' "$listen"
    printf '  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n  servers:\n'
    for port in "$@"; do printf '   - 127.0.0.1:%s:1\n' "$port"; done
}
