#!/usr/bin/env bash
# Installs what the test suites need on a fresh Debian machine (run as root; uses sudo otherwise).
# Idempotent and quiet: prints nothing unless something fails.
#
#   apt:    memcached (the differential oracle), nutcracker (a proxy baseline),
#           prometheus (promtool and the server, for the /metrics tests; its service stays off)
#           netcat-openbsd (the README's examples), openssl (certificates of tests/python's TLS test)
#   python: .venv with pymemcache + pytest + hdrhistogram (tests/python, experiments/)
#   go:     module deps of tests/go (gomemcache)       (tests/go)
#
# The Debian packages may start system services; we prevent that with a temporary
# policy-rc.d and never stop a service that was already running: tests start their own
# server instances on ephemeral ports.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

log="$(mktemp)"
policy=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    rm -f "$log"
    if [ "$created_policy" = 1 ]; then "${sudo_cmd[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT
fail() {
    cat "$log" >&2
    echo "setup-deps: failed: $*" >&2
    exit 1
}
quiet() { "$@" >>"$log" 2>&1 || fail "$*"; }

# --- Debian packages --------------------------------------------------------------------
missing=()
command -v memcached >/dev/null 2>&1 || [ -x /usr/bin/memcached ] || missing+=(memcached)
command -v nutcracker >/dev/null 2>&1 || [ -x /usr/sbin/nutcracker ] || missing+=(nutcracker)
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || missing+=(prometheus)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# The README's examples (scripts/readme-examples.sh) talk to servers with `nc -q1`.
command -v nc >/dev/null 2>&1 || missing+=(netcat-openbsd)
# tests/python/test_tls.py makes its test certificates with the openssl CLI.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing+=(golang-go)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
        "${sudo_cmd[@]}" chmod 755 "$policy"
        created_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # `apt-get update` only when the package lists do not know the packages yet.
    if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
        quiet "${sudo_cmd[@]}" apt-get update -q
    fi
    quiet "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- Python venv ------------------------------------------------------------------------
if ! .venv/bin/python -c 'import pymemcache, pytest, hdrh' >/dev/null 2>&1; then
    quiet python3 -m venv .venv
    quiet .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
fi

# --- Go modules ---------------------------------------------------------------------------
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
fi
(cd tests/go && go mod download >>"$log" 2>&1) || fail "go mod download (tests/go)"
