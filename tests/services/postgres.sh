#!/usr/bin/env bash
# Start (or stop) a PostgreSQL server of the tests' own, on 127.0.0.1 only.
#   tests/services/postgres.sh start   -> prints the URL to use (NOVAKIT_TEST_PG_URL)
#   tests/services/postgres.sh stop    -> stops the server this script started
# Installs Debian's postgresql first when run as root and it is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# The server runs as the postgres user, which cannot enter a checkout under /root (0700): as root,
# its directory is one of its own outside the checkout, named after the checkout's path.
# NOVAKIT_PG_INSTANCE names a second server of the tests' own (the cells tests' second cell).
INSTANCE="${NOVAKIT_PG_INSTANCE:-}"
if [ "$(id -u)" = 0 ]; then
    DEFAULT_PGDIR="/var/lib/novakit-test/postgres${INSTANCE}-$(printf %s "$ROOT" | md5sum | cut -c1-8)"
else
    DEFAULT_PGDIR="$ROOT/.state/postgres${INSTANCE}"
fi
PGDIR="${NOVAKIT_PG_DIR:-$DEFAULT_PGDIR}"
PORT="${NOVAKIT_PG_PORT:-55432}"
URL="postgresql+psycopg://novakit:novakit@127.0.0.1:${PORT}/novakit"

pg_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$d" ] && echo "$d"
}

as_pg() {  # run a command as the postgres user (initdb refuses root), from a directory it may enter
    if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

start() {
    if [ -z "$(pg_bin)" ]; then
        if [ "$(id -u)" != 0 ]; then echo "postgresql is not installed and we are not root" >&2; exit 1; fi
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
    fi
    local bin; bin=$(pg_bin)
    mkdir -p "$PGDIR"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$PGDIR"
    if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
        as_pg "$bin/initdb" -D "$PGDIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    if ! as_pg "$bin/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; then
        as_pg "$bin/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -o \
            "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$PGDIR -c max_connections=200 -c fsync=off" start >/dev/null
    fi
    as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname='novakit'" | grep -q 1 \
        || as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE ROLE novakit LOGIN SUPERUSER PASSWORD 'novakit'"
    as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='novakit'" | grep -q 1 \
        || as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE DATABASE novakit OWNER novakit"
    echo "$URL"
}

stop() {
    local bin; bin=$(pg_bin)
    if [ -n "$bin" ] && [ -f "$PGDIR/data/postmaster.pid" ]; then
        as_pg "$bin/pg_ctl" -D "$PGDIR/data" -m fast stop >/dev/null || true
    fi
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
