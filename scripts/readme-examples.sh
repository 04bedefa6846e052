#!/usr/bin/env bash
# Runs README.md's shell examples as a reader would, with `tailtrim` on PATH, and fails when one
# fails or prints something else than the README shows.
#
#   README.md ──```sh runnable … ```──> one script per block ──run──> stdout
#             ──the next fenced block, if ```text output──> must equal that stdout (\r removed)
#
# Each block runs in a scratch directory (with the repository's config/ linked in) in its own
# process group, which is killed afterwards, so servers the example starts with `&` stop. The
# ports the README uses (11211-11213, 22122, 22123) are replaced by unused ones, so the run
# never meets a server already on this machine.
#
# Environment: TAILTRIM_BIN, the binary to run (default target/release/tailtrim).
# Needs nc (netcat-openbsd) and memcached: scripts/setup-deps.sh installs them.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
binary="${TAILTRIM_BIN:-$repo/target/release/tailtrim}"
fail() {
    echo "readme-examples: $*" >&2
    exit 1
}
[ -x "$binary" ] || fail "no binary at $binary (cargo build --release, or set TAILTRIM_BIN)"
for tool in nc memcached; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is missing (run scripts/setup-deps.sh)"
done

scratch="$(mktemp -d)"
groups=()
cleanup() {
    for group in "${groups[@]}"; do kill -KILL -- "-$group" 2>/dev/null || true; done
    rm -rf "$scratch"
}
trap cleanup EXIT
mkdir -p "$scratch/bin" "$scratch/blocks"
ln -s "$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")" "$scratch/bin/tailtrim"
export PATH="$scratch/bin:$PATH"

# The blocks: example-N.sh, and example-N.expected when the next fenced block is an output one.
awk -v dir="$scratch/blocks" '
    /^```sh runnable[[:space:]]*$/ { n++; file = sprintf("%s/example-%d.sh", dir, n); inside = 1; next }
    /^```text output[[:space:]]*$/ && last == n && n > 0 {
        file = sprintf("%s/example-%d.expected", dir, n); printf "" > file; inside = 1; next
    }
    /^```/ && inside { inside = 0; last = n; close(file); next }
    /^```/ { last = -1; next }
    inside { print > file; next }
' "$repo/README.md"

# Below the kernel's ephemeral range, so no outgoing connection takes the port meanwhile.
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range
unused_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % (ephemeral_low - 20000)))
        nc -z 127.0.0.1 "$port" 2>/dev/null || break
    done
    echo "$port"
}
rewrite=()
for port in 11211 11212 11213 22122 22123; do
    rewrite+=(-e "s/\\b$port\\b/$(unused_port)/g")
done

count=0
for example in "$scratch"/blocks/example-*.sh; do
    [ -e "$example" ] || fail "README.md has no \`\`\`sh runnable block"
    name="$(basename "$example" .sh)"
    work="$scratch/work-$name"
    mkdir -p "$work"
    ln -s "$repo/config" "$work/config"
    sed "${rewrite[@]}" "$example" >"$work/example.sh"
    (cd "$work" && exec setsid timeout 120 bash -euo pipefail example.sh >stdout 2>stderr) &
    group=$!
    groups+=("$group")
    status=0
    wait "$group" || status=$?
    # Servers the example left running stop before the next example reuses their ports.
    kill -TERM -- "-$group" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 -- "-$group" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$group" 2>/dev/null || true
    if [ "$status" -ne 0 ]; then
        echo "readme-examples: $name failed (exit $status):" >&2
        sed 's/^/    /' "$example" >&2
        echo "  its stderr:" >&2
        sed 's/^/    /' "$work/stderr" >&2
        exit 1
    fi
    if [ -e "${example%.sh}.expected" ]; then
        # Replies end in \r\n on the wire; the README shows lines.
        if ! tr -d '\r' <"$work/stdout" | diff -u "${example%.sh}.expected" - >"$work/diff"; then
            echo "readme-examples: $name printed other output than README.md shows:" >&2
            sed 's/^/    /' "$example" >&2
            cat "$work/diff" >&2
            exit 1
        fi
    fi
    count=$((count + 1))
done
echo "readme-examples: $count examples ran as README.md shows them"
