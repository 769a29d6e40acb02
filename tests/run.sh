#!/usr/bin/env bash
# The test command (README): installs what the tests need, starts the real services
# (PostgreSQL, libvirtd) as the tests' own, runs the whole suite, stops what it started.
#
#   bash tests/run.sh [pytest args]
#
# As root on a fresh Debian machine it first installs Debian's packages; as another
# user it uses what is there and the tests that need a missing service fail, loudly.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends \
        postgresql libvirt-daemon-system libvirt-dev pkg-config qemu-system-x86 qemu-utils \
        openssh-server netcat-openbsd cpio busybox-static ca-certificates gcc python3-dev python3-venv
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test,libvirt]"

NOVAKIT_TEST_PG_URL="$(tests/services/postgres.sh start)"
export NOVAKIT_TEST_PG_URL
# A second server: the cells tests put a cell's database on it, and stop and start it.
NOVAKIT_TEST_PG2_URL="$(NOVAKIT_PG_INSTANCE=2 NOVAKIT_PG_PORT=55433 tests/services/postgres.sh start)"
export NOVAKIT_TEST_PG2_URL
started_libvirt=""
if [ -x tests/services/libvirt.sh ]; then
    tests/services/libvirt.sh start
    started_libvirt=1
fi
cleanup() {
    [ -n "$started_libvirt" ] && tests/services/libvirt.sh stop || true
    tests/services/postgres.sh stop || true
    NOVAKIT_PG_INSTANCE=2 NOVAKIT_PG_PORT=55433 tests/services/postgres.sh stop || true
}
trap cleanup EXIT

# The tiny guest image the libvirt tests boot (Debian's cloud kernel + a busybox initramfs).
if [ "$(id -u)" = 0 ]; then
    tests/images/build-tiny-image.sh .state/tiny-image
fi

# Lint, format and types first: cheap, and a failure here is a failure of the run.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy novakit

export NOVAKIT_REQUIRE_REAL=1
.venv/bin/python -m pytest -p no:cacheprovider "$@" tests
