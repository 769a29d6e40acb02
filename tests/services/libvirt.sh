#!/bin/sh
# Start or stop libvirtd + virtlogd for the integration tests, on machines without systemd.
#
#   tests/services/libvirt.sh start   install (as root, if missing) and start the daemons
#   tests/services/libvirt.sh stop    stop only the daemons this script started
#   tests/services/libvirt.sh status  say whether qemu:///system answers
#
# Idempotent: "start" leaves daemons that already answer alone, and "stop" only
# signals pids recorded in its own pid files (NOVAKIT_SERVICE_DIR, default
# .state/services), so a libvirtd someone else runs is never touched.
set -eu

STATE_DIR=${NOVAKIT_SERVICE_DIR:-.state/services}
URI=qemu:///system
PACKAGES="libvirt-daemon-system libvirt-dev pkg-config qemu-system-x86 qemu-utils cpio busybox-static"

log() { echo "libvirt.sh: $*" >&2; }

answers() {
    virsh -c "$URI" version >/dev/null 2>&1
}

# Whether a virtlogd takes connections on its socket (as root; others cannot tell, nor start one).
# A virtlogd that was killed leaves its socket file behind: libvirtd answers, and every guest start
# then fails with "Failed to connect socket to '/run/libvirt/virtlogd-sock': Connection refused".
virtlogd_answers() {
    [ "$(id -u)" = 0 ] || return 0
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' \
        /run/libvirt/virtlogd-sock 2>/dev/null
}

install_missing() {
    missing=""
    for pkg in $PACKAGES; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            missing="$missing $pkg"
        fi
    done
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" != 0 ]; then
        log "missing Debian packages:$missing (run as root to install them)"
        return 1
    fi
    log "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # One update per machine: the marker file keeps repeated starts offline.
    if [ ! -e "$STATE_DIR/apt-updated" ]; then
        apt-get update -q
        touch "$STATE_DIR/apt-updated"
    fi
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    apt-get install -y -q $missing
}

# start_daemon NAME PIDFILE: start NAME -d unless its pid file names a live process.
start_daemon() {
    name=$1
    pidfile=$2
    if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        return 0
    fi
    # The daemon writes its own pid file under /run; ours records that we started it.
    syspid=/run/$name.pid
    if [ -s "$syspid" ] && ! kill -0 "$(cat "$syspid")" 2>/dev/null; then
        rm -f "$syspid"  # a dead daemon's: not to be taken for the new one's
    fi
    "$name" -d
    sleep 0.2
    i=0
    while [ ! -s "$syspid" ] && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if [ -s "$syspid" ]; then
        cp "$syspid" "$pidfile"
        log "started $name (pid $(cat "$pidfile"))"
    else
        log "$name did not write $syspid"
        return 1
    fi
}

# /dev/kvm as Debian's udev rules leave it (group kvm, 0660). Without udev it can stay root-only
# (0600): libvirtd then finds KVM unusable for its QEMU user on every call, throws away its cached
# QEMU capabilities and probes QEMU again, which made each domain definition take 20 to 70 s here.
# The tests still ask for TCG guests (domain type qemu): nested KVM does not work on these machines.
kvm_device_as_udev_leaves_it() {
    [ -c /dev/kvm ] && [ "$(id -u)" = 0 ] && getent group kvm >/dev/null || return 0
    if [ "$(stat -c %G:%a /dev/kvm)" != "kvm:660" ]; then
        chgrp kvm /dev/kvm && chmod 0660 /dev/kvm && log "/dev/kvm: group kvm, mode 0660"
    fi
}

start() {
    mkdir -p "$STATE_DIR"
    kvm_device_as_udev_leaves_it
    if answers && virtlogd_answers; then
        log "$URI already answers"
        return 0
    fi
    install_missing
    if [ "$(id -u)" != 0 ]; then
        log "$URI does not answer and only root can start the system daemon"
        return 1
    fi
    mkdir -p /run/libvirt /var/log/libvirt/qemu
    if ! virtlogd_answers; then
        rm -f /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock  # a dead one's
        start_daemon virtlogd "$STATE_DIR/virtlogd.pid"
    fi
    answers || start_daemon libvirtd "$STATE_DIR/libvirtd.pid"
    i=0
    until answers; do
        i=$((i + 1))
        if [ $i -gt 100 ]; then
            log "$URI still does not answer after 20 s; see /var/log/libvirt/libvirtd.log"
            return 1
        fi
        sleep 0.2
    done
    log "$URI answers"
}

stop_daemon() {
    name=$1
    pidfile="$STATE_DIR/$name.pid"
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$name" ]; then
        kill "$pid"
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        log "stopped $name (pid $pid)"
    fi
    rm -f "$pidfile"
}

stop() {
    stop_daemon libvirtd
    stop_daemon virtlogd
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if answers; then echo "running"; else echo "stopped"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
