#!/usr/bin/env bash
# The test command (README): installs what the tests need, starts the real services
# (PostgreSQL, libvirtd) as the tests' own, runs the whole suite, stops what it started.
#
#   bash tests/run.sh [pytest args]       e.g. bash tests/run.sh tests/functional -k cells
#                                         (paths given replace the default, tests/)
#
# As root on a fresh Debian machine it first installs Debian's packages; as another
# user it uses what is there and the tests that need a missing service fail, loudly.
#
# pytest runs three times: every test marked neither machine nor serial, spread over
# NOVAKIT_TEST_JOBS workers (pytest-xdist; default: one per core; 0 runs them in one process), each
# worker with databases and a state directory of its own (tests/conftest.py); beside it, at the
# same time, the tests marked machine (the libvirt system daemon, the testbed, sshd, process
# storms) one after another in one process; then the serial ones alone. A -m given here narrows
# all three. Each prints its 30 slowest tests.
#
# NOVAKIT_TEST_FAST=1 (tests/fast.sh) is the everyday lane: no Debian packages, no pip install
# once .venv exists, no libvirtd, no guest image, only the tests not marked slow; PostgreSQL is
# the one NOVAKIT_TEST_PG_URL / NOVAKIT_TEST_PG2_URL name, else the tests' own servers if
# PostgreSQL is installed, else none (its variants then skip).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
FAST="${NOVAKIT_TEST_FAST:-}"

if [ "$(id -u)" = 0 ] && [ -z "$FAST" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends \
        postgresql libvirt-daemon-system libvirt-dev pkg-config qemu-system-x86 qemu-utils \
        openssh-server netcat-openbsd iproute2 cpio busybox-static ca-certificates gcc python3-dev python3-venv
fi

PYTHON="${PYTHON:-python3}"
new_venv=""
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    new_venv=1
fi
if [ -z "$FAST" ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[test,libvirt]"
    # openstack.cloud's modules and inventory plugin (tests/functional/service/test_openstack_cloud.py)
    # in a venv of their own: the collection the ansible package ships (2.5.0) reads
    # openstack.version, which openstacksdk removed in 4.15, and the openstack command the other
    # service tests run needs a newer openstacksdk (4.21 or later).
    [ -x .venv-openstack-cloud/bin/python ] || "$PYTHON" -m venv .venv-openstack-cloud
    .venv-openstack-cloud/bin/pip install -q "ansible>=11,<13" "openstacksdk>=1.0,<4.15"
elif [ -n "$new_venv" ] || ! .venv/bin/python -c 'import xdist' 2>/dev/null; then
    # No libvirt-python (it builds against Debian's libvirt-dev): the few tests that need it skip.
    .venv/bin/pip install -q -e ".[test]"
fi

# The tests' PostgreSQL servers' ports (NOVAKIT_PG_PORT, NOVAKIT_PG2_PORT): other ones let a second
# copy of the suite run on the same machine (its loopback address is shared).
PG2_PORT="${NOVAKIT_PG2_PORT:-55433}"
stop_pg=""
stop_pg2=""
started_libvirt=""
cleanup() {
    [ -n "$started_libvirt" ] && tests/services/libvirt.sh stop || true
    [ -n "$stop_pg" ] && tests/services/postgres.sh stop || true
    [ -n "$stop_pg2" ] && NOVAKIT_PG_INSTANCE=2 NOVAKIT_PG_PORT="$PG2_PORT" tests/services/postgres.sh stop || true
}
trap cleanup EXIT
have_pg() { ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; }
# Whether a server already answers on the port: one this run did not start, it does not stop.
answers() { "$PYTHON" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2)' "$1" 2>/dev/null; }

if [ -z "$FAST" ] || { [ -z "${NOVAKIT_TEST_PG_URL:-}" ] && have_pg; }; then
    answers "${NOVAKIT_PG_PORT:-55432}" || stop_pg=1
    NOVAKIT_TEST_PG_URL="$(tests/services/postgres.sh start)"
    export NOVAKIT_TEST_PG_URL
fi
if [ -z "$FAST" ] || { [ -z "${NOVAKIT_TEST_PG2_URL:-}" ] && have_pg; }; then
    # A second server: the cells tests put a cell's database on it, and stop and start it.
    answers "$PG2_PORT" || stop_pg2=1
    NOVAKIT_TEST_PG2_URL="$(NOVAKIT_PG_INSTANCE=2 NOVAKIT_PG_PORT="$PG2_PORT" tests/services/postgres.sh start)"
    export NOVAKIT_TEST_PG2_URL
fi
if [ -z "$FAST" ] && [ -x tests/services/libvirt.sh ]; then
    tests/services/libvirt.sh start
    started_libvirt=1
fi

# The tiny guest image the libvirt tests boot (Debian's cloud kernel + a busybox initramfs).
if [ "$(id -u)" = 0 ] && [ -z "$FAST" ]; then
    tests/images/build-tiny-image.sh .state/tiny-image
fi

# Lint, format and types first: cheap, and a failure here is a failure of the run.
# The collection's plugins are type-checked under their Ansible name (pyproject.toml's [tool.mypy]).
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy -p novakit -p ansible_collections.novakit.cloud.plugins

# The caller's -m (if any) narrows both runs; the fast lane leaves the slow tests out.
# Paths given (tests/unit, a file, a node id) replace the default, tests/.
mark=""
args=()
paths=()
while [ $# -gt 0 ]; do
    case "$1" in
        -m) mark="$2"; shift 2 ;;
        -m*) mark="${1#-m}"; shift ;;
        -*) args+=("$1"); shift ;;
        *) if [ -e "${1%%::*}" ]; then paths+=("$1"); else args+=("$1"); fi; shift ;;
    esac
done
[ ${#paths[@]} -gt 0 ] || paths=(tests)
if [ -n "$FAST" ]; then
    mark="${mark:+($mark) and }not slow"
else
    export NOVAKIT_REQUIRE_REAL=1
fi
only() { echo "${mark:+($mark) and }$1"; }

# pytest's "no tests ran" (5) is no failure: a selection may leave one of the two runs empty.
pytest_run() {
    local rc=0
    .venv/bin/python -m pytest -p no:cacheprovider --durations=30 "$@" || rc=$?
    [ "$rc" = 5 ] && rc=0
    return "$rc"
}
jobs="${NOVAKIT_TEST_JOBS:-auto}"
rc=0
# Two lanes at once: the tests marked machine (the system libvirtd, the testbed, storms) one after
# another in one process, and everything else spread over the workers; the machine lane's output
# is printed when both are done. Then the serial tests, alone.
lane_log="$(mktemp)"
pytest_run -m "$(only "machine and not serial")" "${args[@]}" "${paths[@]}" >"$lane_log" 2>&1 &
lane_pid=$!
pytest_run -n "$jobs" --dist loadgroup -m "$(only "not serial and not machine")" "${args[@]}" "${paths[@]}" || rc=$?
lane_rc=0
wait "$lane_pid" || lane_rc=$?
echo "=== the machine lane (run beside the parallel part) ==="
cat "$lane_log"
rm -f "$lane_log"
[ "$lane_rc" = 0 ] || rc=$lane_rc
pytest_run -m "$(only "serial")" "${args[@]}" "${paths[@]}" || rc=$?
exit "$rc"
