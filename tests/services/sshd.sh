#!/usr/bin/env bash
# An sshd of the tests' own on 127.0.0.1 only: its own config, host key, client key and port.
#   tests/services/sshd.sh start DIR [PORT]  -> starts it, prints "PORT KEYFILE"
#   tests/services/sshd.sh stop DIR          -> stops the sshd this script started in DIR (by its pid)
# Logs in as the user running the script (root: PermitRootLogin prohibit-password, keys only).
set -euo pipefail

start() {
    local dir="$1" port="${2:-}"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    [ -x /usr/sbin/sshd ] || { echo "openssh-server is not installed (apt-get install openssh-server)" >&2; exit 1; }
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519" >/dev/null
    [ -f "$dir/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/client_ed25519" >/dev/null
    cp "$dir/client_ed25519.pub" "$dir/authorized_keys"
    chmod 600 "$dir/authorized_keys"
    if [ -z "$port" ]; then
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    # sshd refuses to start without its privilege-separation directory.
    [ "$(id -u)" = 0 ] && mkdir -p /run/sshd && chmod 755 /run/sshd
    cat >"$dir/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $port
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
MaxStartups 50:30:100
MaxSessions 50
LogLevel VERBOSE
EOF
    /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
    for _ in $(seq 50); do
        [ -s "$dir/sshd.pid" ] && break
        sleep 0.1
    done
    [ -s "$dir/sshd.pid" ] || { echo "sshd did not start; see $dir/sshd.log" >&2; exit 1; }
    echo "$port $dir/client_ed25519"
}

stop() {
    local dir="$1"
    if [ -s "$dir/sshd.pid" ]; then
        kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true
        rm -f "$dir/sshd.pid"
    fi
}

case "${1:-}" in
    start) start "${2:?DIR}" "${3:-}" ;;
    stop) stop "${2:?DIR}" ;;
    *) echo "usage: $0 start DIR [PORT] | stop DIR" >&2; exit 2 ;;
esac
