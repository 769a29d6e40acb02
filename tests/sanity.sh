#!/usr/bin/env bash
# ansible-test sanity on the collection as built and installed (ansible-test needs the collection at
# .../ansible_collections/novakit/cloud, and a real directory, not the checkout's symlink).
# Runs the tests that need neither docker nor the network. Usage: tests/sanity.sh [ansible-test args]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
BIN=$(dirname "$PY")
# ansible-test bootstraps pip in its sanity venvs with a script it downloads from a host that is
# not reachable offline; the same job done by Python's own ensurepip (then pip from PyPI) does.
PIP_VERSION=$("$PY" - <<'PYEOF'
import re, ansible_test, pathlib
text = (pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", text).group(1))
PYEOF
)
GET_PIP=$HOME/.ansible/test/cache/get_pip_${PIP_VERSION//./_}.py
if ! grep -qs "get-pip.py.s own options" "$GET_PIP"; then
  mkdir -p "$(dirname "$GET_PIP")"
  cat > "$GET_PIP" <<'PYEOF'
# Offline stand-in for get-pip.py (written by novakit's tests/sanity.sh): pip from ensurepip,
# then "pip install" with the arguments ansible-test gives get-pip.py.
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]  # get-pip.py's own options
if os.path.exists("/etc/ssl/certs/ca-certificates.crt"):  # ansible-test runs pip with a bare environment
    args = ["--cert", "/etc/ssl/certs/ca-certificates.crt", *args]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
PYEOF
fi
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
# The collection as a user gets it: the tarball galaxy.yml's allow list builds, installed.
"$BIN/ansible-galaxy" collection build --output-path "$STAGE/dist" "$ROOT" >/dev/null
# Only the stage counts as installed: with another novakit.cloud in ~/.ansible/collections, ansible-galaxy
# would find "nothing to do".
ANSIBLE_COLLECTIONS_PATH=$STAGE "$BIN/ansible-galaxy" collection install --offline -p "$STAGE" \
  "$STAGE"/dist/novakit-cloud-*.tar.gz >/dev/null
DEST=$STAGE/ansible_collections/novakit/cloud
[ -f "$DEST/MANIFEST.json" ] || { echo "sanity.sh: the built collection did not install into $STAGE" >&2; exit 1; }
mkdir -p "$DEST/tests/sanity"
# The modules run with novakit, which needs Python 3.11: test them there only.
cat > "$DEST/tests/config.yml" <<'YAML'
modules:
  python_requires: ">=3.11"
YAML
# The collection is Apache-2.0, not GPLv3: validate-modules' licence-header check does not apply.
VERSION=$("$BIN/python" -c 'import ansible.release as r; print(".".join(r.__version__.split(".")[:2]))')
for f in "$DEST"/plugins/modules/*.py "$DEST"/plugins/inventory/*.py "$DEST"/plugins/callback/*.py; do
  echo "${f#"$DEST"/} validate-modules:missing-gplv3-license"
done > "$DEST/tests/sanity/ignore-$VERSION.txt"
# The collection carries the novakit library (novakit/) so that it can be installed from the
# collection's files. The library is not plugin code: ruff and mypy hold it to its own rules, and
# ansible-test's pylint configuration for plugins (which forbids `_` as a name, for one) does not apply.
(cd "$DEST" && find novakit -name '*.py' | sort | sed 's/$/ pylint!skip/') >> "$DEST/tests/sanity/ignore-$VERSION.txt"
cd "$DEST"
TESTS=(--test validate-modules --test pep8 --test yamllint --test compile --test action-plugin-docs
       --test ansible-doc --test changelog --test empty-init --test ignores --test import
       --test line-endings --test no-assert --test no-get-exception --test no-illegal-filenames
       --test no-smart-quotes --test pylint --test replace-urlopen --test runtime-metadata --test shebang
       --test symlinks --test use-argspec-type-path --test use-compat-six --test boilerplate
       --test no-unwanted-files --test shellcheck)
# Keep only the tests this ansible-test knows.
KNOWN=$("$BIN/ansible-test" sanity --list-tests 2>/dev/null)
SELECTED=()
for ((i = 0; i < ${#TESTS[@]}; i += 2)); do
  name=${TESTS[i+1]}
  grep -qx "$name" <<<"$KNOWN" && SELECTED+=(--test "$name")
done
PATH="$BIN:$PATH" "$BIN/ansible-test" sanity --python 3.11 --color no "${SELECTED[@]}" "$@"
