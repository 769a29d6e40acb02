#!/usr/bin/env bash
# The everyday lane (README, "Run the tests"): lint, types and every test not marked slow
# (no real guests, playbooks, testbed or process storms), spread over the cores, in a few
# minutes. Installs no Debian package and starts no libvirtd; uses the PostgreSQL servers that
# NOVAKIT_TEST_PG_URL / NOVAKIT_TEST_PG2_URL name, else starts the tests' own if PostgreSQL is
# installed, else runs without (its variants skip). CI runs tests/run.sh, the whole suite.
#
#   bash tests/fast.sh [pytest args]      e.g. bash tests/fast.sh -k cells
exec env NOVAKIT_TEST_FAST=1 bash "$(dirname "$0")/run.sh" "$@"
