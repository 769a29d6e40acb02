#!/usr/bin/env bash
# Try novakit on real guests without spare machines: K compute "hosts" on this one (default 3),
# each a Unix user (nk-h1..nk-hK) with its own libvirtd session daemon running QEMU/TCG guests,
# all reached by Ansible over SSH on 127.0.0.1 (an sshd of the testbed's own, keys only).
#
#   sudo tests/testbed.sh up [--hosts K]   bring it up (idempotent), register the tiny image and flavors
#   sudo tests/testbed.sh status           what runs (exit status 0 when everything is up)
#   sudo tests/testbed.sh down [--purge]   stop everything it started, remove its users and files
#                                          (--purge: also the cached venv and image store)
#
# Files live under NOVAKIT_TESTBED_DIR (default /opt/novakit-testbed); the inventory is
# $NOVAKIT_TESTBED_DIR/run/inventory.yml and the novakit database (SQLite) $NOVAKIT_TESTBED_DIR/run/state.
# As root on Debian 12 it installs the packages it needs first.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BASE="${NOVAKIT_TESTBED_DIR:-/opt/novakit-testbed}"
PACKAGES="openssh-server openssh-client libvirt-daemon-system libvirt-clients libvirt-dev pkg-config
    qemu-system-x86 qemu-utils cpio busybox-static python3-venv python3-dev gcc"

if [ "$(id -u)" != 0 ]; then
    echo "testbed.sh: the testbed makes Unix users and daemons; run it as root (sudo)" >&2
    exit 1
fi
cmd="${1:-}"
[ $# -gt 0 ] && shift

install_missing() {
    local missing="" pkg
    for pkg in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
    done
    if [ -n "$missing" ]; then
        echo "testbed.sh: installing:$missing" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        # shellcheck disable=SC2086 # the list is meant to split
        apt-get install -y -q --no-install-recommends $missing
    fi
}

controller_python() {
    # The controller side (ansible-playbook, the novakit modules on localhost) runs from the repository's venv.
    if [ ! -x .venv/bin/python ]; then
        "${PYTHON:-python3}" -m venv .venv
        .venv/bin/pip install -q --upgrade pip
    fi
    .venv/bin/python -c "import novakit, ansible_runner, libvirt" 2>/dev/null || .venv/bin/pip install -q -e ".[libvirt]"
    echo "$ROOT/.venv/bin/python"
}

case "$cmd" in
    up)
        install_missing
        tests/images/build-tiny-image.sh .state/tiny-image
        py=$(controller_python)
        "$py" -m tests.e2e.testbed up "$@"
        "$py" -m tests.e2e.testbed catalog "$@"
        cat <<EOF

The testbed is up. Try it:

  export NOVAKIT_STATE_DIR=$BASE/run/state NOVAKIT_CONFIG=$BASE/run/novakit.toml PATH=$ROOT/.venv/bin:\$PATH
  ansible-playbook -i $BASE/run/inventory.yml playbooks/compute_node.yml
  ansible-playbook -i $BASE/run/inventory.yml playbooks/boot.yml -e server_name=web -e count=3 -e flavor=tb.small
  novakit server list
  ansible-playbook -i $BASE/run/inventory.yml playbooks/server_action.yml -e server_action=reboot -e servers=web-1
  ansible-playbook -i $BASE/run/inventory.yml playbooks/delete.yml -e servers=web-1,web-2,web-3

A guest's console: $BASE/home/<host>/instances/<server id>/console.log
Take it down with: sudo tests/testbed.sh down
EOF
        ;;
    down)
        py=$(controller_python)
        "$py" -m tests.e2e.testbed down "$@"
        ;;
    status)
        py=$(controller_python)
        exec "$py" -m tests.e2e.testbed status "$@"
        ;;
    *)
        echo "usage: $0 up [--hosts K] | status | down [--purge]" >&2
        exit 2
        ;;
esac
