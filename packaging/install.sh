#!/usr/bin/env bash
# Installs tailtrim: the binary, its man pages, shell completions (bash, zsh, fish) and the
# systemd unit, whose ExecStart is rewritten to the binary installed. Enables nothing.
#
#   bash packaging/install.sh                    # as root: /usr/local/bin/tailtrim, ...
#   PREFIX=$HOME/.local bash packaging/install.sh   # no root: no systemd unit unless UNIT_DIR
#
# Environment:
#   TAILTRIM_BIN  binary to install (default target/release/tailtrim, built if missing)
#   PREFIX        installation prefix (default /usr/local)
#   DESTDIR       staging root prepended to every path written (packagers)
#   UNIT_DIR      where the unit goes (default /etc/systemd/system as root, else none)
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${PREFIX:-/usr/local}"
destdir="${DESTDIR:-}"
binary="${TAILTRIM_BIN:-target/release/tailtrim}"
if [ -z "${UNIT_DIR+set}" ]; then
    if [ "$(id -u)" -eq 0 ]; then unit_dir=/etc/systemd/system; else unit_dir=; fi
else
    unit_dir="$UNIT_DIR"
fi

if [ ! -x "$binary" ]; then
    if [ -n "${TAILTRIM_BIN:-}" ]; then
        echo "install: $binary is not an executable" >&2
        exit 1
    fi
    cargo build --release --locked --bin tailtrim
fi

bin_dir="$prefix/bin"
man_dir="$prefix/share/man/man1"
bash_dir="$prefix/share/bash-completion/completions"
zsh_dir="$prefix/share/zsh/site-functions"
fish_dir="$prefix/share/fish/vendor_completions.d"

install -d "$destdir$bin_dir" "$destdir$man_dir" "$destdir$bash_dir" "$destdir$zsh_dir" \
    "$destdir$fish_dir"
install -m 0755 "$binary" "$destdir$bin_dir/tailtrim"
installed="$destdir$bin_dir/tailtrim"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
"$installed" man "$scratch"
install -m 0644 "$scratch"/*.1 "$destdir$man_dir/"
"$installed" completions bash >"$scratch/tailtrim.bash"
"$installed" completions zsh >"$scratch/_tailtrim"
"$installed" completions fish >"$scratch/tailtrim.fish"
install -m 0644 "$scratch/tailtrim.bash" "$destdir$bash_dir/tailtrim"
install -m 0644 "$scratch/_tailtrim" "$destdir$zsh_dir/_tailtrim"
install -m 0644 "$scratch/tailtrim.fish" "$destdir$fish_dir/tailtrim.fish"
echo "installed $bin_dir/tailtrim, man pages in $man_dir, completions for bash, zsh and fish"

if [ -n "$unit_dir" ]; then
    install -d "$destdir$unit_dir"
    sed "s|/usr/bin/tailtrim|$bin_dir/tailtrim|g" packaging/tailtrim.service \
        >"$destdir$unit_dir/tailtrim.service"
    chmod 0644 "$destdir$unit_dir/tailtrim.service"
    echo "installed $unit_dir/tailtrim.service (ExecStart=$bin_dir/tailtrim ...);" \
        "enable it with: systemctl daemon-reload && systemctl enable --now tailtrim"
fi
