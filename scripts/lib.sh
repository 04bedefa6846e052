# Functions the scripts share (sourced, never run): where they run, their arguments, waits.
#   source "$(dirname "$0")/lib.sh"

# Sets `root` to the repository (the folder above scripts/) and goes there.
enter_repository() {
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    cd "$root"
}

# Reads a script's arguments `[budget] [target ...]`: sets the variable BUDGET_NAME to the
# first argument (DEFAULT_BUDGET when absent) and the array `targets` to the rest
# (DEFAULT_TARGETS, words separated by spaces, when there are none).
#   read_budget_and_targets BUDGET_NAME DEFAULT_BUDGET "DEFAULT_TARGETS" "$@"
read_budget_and_targets() {
    local budget_name="$1" default_budget="$2" default_targets="$3"
    shift 3
    printf -v "$budget_name" '%s' "${1:-$default_budget}"
    shift || true
    targets=("$@")
    if [ ${#targets[@]} -eq 0 ]; then
        read -r -a targets <<<"$default_targets"
    fi
}

# Waits up to 5 s for a TCP listener on HOST:PORT; says so on standard error and fails if
# none comes.
#   wait_listening HOST PORT [WHO]      (WHO prefixes the message, e.g. the script's name)
wait_listening() {
    local host="$1" port="$2" who="${3:+$3: }"
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "${who}nothing listens on $host:$port" >&2
    return 1
}
