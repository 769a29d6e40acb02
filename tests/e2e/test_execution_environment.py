"""The execution environment of meta/awx/execution-environment.yml, as ansible-builder generates it.

There is no container runtime here, so the test stops where the image build would start: it
builds the collection tarball from this checkout, runs the real ``ansible-builder create`` on the
repository's EE definition, reads the generated Containerfile and scripts, and then runs the
generated build's install steps itself, in order, in a fresh virtual environment standing in for
the image's Python: the base stage's ansible-core/ansible-runner, the galaxy stage's collection
install into /usr/share/ansible/collections, the builder stage's introspect, the pip install of
what introspect found. /usr/share is an overlay in a mount namespace of the test's own, so the
collection lands at the path the image has (requirements.txt names it) and nothing of it is
seen outside. A playbook of the installed collection then runs, by FQCN, with that Python only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from novakit.context import RequestContext
from tests.conftest import OPERATOR_ENV, need_real
from tests.e2e.prepared import BASE_CONFIG, api_for

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COLLECTION = "/usr/share/ansible/collections/ansible_collections/novakit/cloud"
INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    novakit_flavors:
      - {name: m1.small, vcpus: 1, ram: 2048, disk: 20}
    novakit_images:
      - {name: tiny, location: "", disk_format: qcow2}
  hosts:
    localhost:
  children:
    novakit_compute:
      hosts:
        compute-ee:
          novakit_driver: fake
          novakit_driver_options: {vcpus: 4, memory_mb: 8192, local_gb: 100}
"""
# The generated build's install steps, run in the order of the Containerfile's stages. Inside a
# mount namespace of its own (unshare), with /usr/share an overlay whose writes go to $WORK.
STEPS = r"""
set -euo pipefail
PS4='+ [$SECONDS s] '; set -x
mount -t overlay overlay -o "lowerdir=/usr/share,upperdir=$WORK/upper,workdir=$WORK/overlay" /usr/share
# base stage: the image's Python, with pip, ansible-core and ansible-runner ($ANSIBLE_INSTALL_REFS)
$PYTHON -m venv "$VENV"
"$VENV/bin/python" -m pip install -q $ANSIBLE_INSTALL_REFS
# galaxy stage, from the build context's _build (WORKDIR /build)
cd "$CONTEXT/_build"
ANSIBLE_GALAXY_DISABLE_GPG_VERIFY=1 "$VENV/bin/ansible-galaxy" collection install \
  -r requirements.yml --collections-path /usr/share/ansible/collections
# builder stage: introspect the installed collections
"$VENV/bin/python" -m pip install -q bindep pyyaml packaging
mkdir -p "$WORK/src"
"$VENV/bin/python" scripts/introspect.py introspect \
  --write-bindep="$WORK/src/bindep.txt" --write-pip="$WORK/src/requirements.txt"
# what assemble (builder) and install-from-bindep (final) install with pip
"$VENV/bin/python" -m pip install -q -r "$WORK/src/requirements.txt"
# bindep's lists: the final image installs "bindep -l newline", the builder "bindep -b compile"
cd "$WORK/src"
"$VENV/bin/bindep" -l newline > "$WORK/runtime-packages.txt"
"$VENV/bin/bindep" -l newline compile > "$WORK/compile-packages.txt"
# What the image's Python holds, and a playbook of the installed collection, from elsewhere.
cd "$WORK/elsewhere"
"$VENV/bin/python" -c '
import importlib.metadata as m, importlib.util, json, novakit
d = m.distribution("novakit")
print(json.dumps({"file": novakit.__file__, "version": d.version,
                  "direct_url": json.loads(d.read_text("direct_url.json") or "{}"),
                  "libvirt": importlib.util.find_spec("libvirt") is not None}))' > "$WORK/library.json"
ls -a "$COLLECTION" > "$WORK/collection-files.txt"
"$VENV/bin/ansible-playbook" -i "$WORK/hosts.yml" novakit.cloud.compute_node
"$VENV/bin/ansible-playbook" -i "$WORK/hosts.yml" novakit.cloud.boot -e server_name=ee -e count=2
"""


def stages(containerfile: str) -> dict[str, list[str]]:
    """The Containerfile's lines by build stage name (FROM ... AS name)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in containerfile.splitlines():
        if m := re.match(r"FROM \S+ AS (\w+)$", line):
            current = m.group(1)
        out.setdefault(current, []).append(line)
    return out


@pytest.fixture
def root_with_namespaces() -> None:
    if os.geteuid() != 0:
        need_real("the execution environment test mounts an overlay in a mount namespace: run it as root")
    if shutil.which("unshare") is None:
        need_real("the execution environment test needs unshare (util-linux)")


def test_execution_environment_builds_from_the_repository(root_with_namespaces: None, tmp_path: Path) -> None:
    ee = tmp_path / "ee"
    ee.mkdir()
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    build = subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", "--output-path", ee, ROOT],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    tarball = ee / f"novakit-cloud-{version}.tar.gz"
    assert tarball.is_file(), build.stdout
    # The repository's definition, next to the tarball as its comment says to build it.
    definition = yaml.safe_load((ROOT / "meta" / "awx" / "execution-environment.yml").read_text())
    assert definition["additional_build_files"] == [{"src": tarball.name, "dest": "collections"}]
    assert definition["dependencies"]["galaxy"]["collections"] == [
        {"name": f"collections/{tarball.name}", "type": "file"}
    ]
    shutil.copy(ROOT / "meta" / "awx" / "execution-environment.yml", ee)

    create = subprocess.run(
        [BIN / "ansible-builder", "create", "-f", "execution-environment.yml", "-c", "context"]
        + ["--output-filename", "Containerfile"],
        cwd=ee,
        capture_output=True,
        text=True,
    )
    assert create.returncode == 0, create.stdout + create.stderr
    context = ee / "context"
    assert (context / "_build" / "collections" / tarball.name).is_file()
    steps = stages((context / "Containerfile").read_text())
    assert {"base", "galaxy", "builder", "final"} <= set(steps), list(steps)
    galaxy_install = [s for s in steps["galaxy"] if "ansible-galaxy collection install" in s]
    assert galaxy_install and '--collections-path "/usr/share/ansible/collections"' in galaxy_install[0]
    assert "RUN /output/scripts/assemble" in steps["builder"]
    # The final image installs the runtime lists that assemble wrote (and no compile profile of
    # its own): the galaxy stage's collections, then install-from-bindep.
    final = steps["final"]
    assert "COPY --from=galaxy /usr/share/ansible /usr/share/ansible" in final
    assert "RUN /output/scripts/install-from-bindep && rm -rf /output/wheels" in final
    assert not [s for s in final if "assemble" in s or "bindep" in s.replace("install-from-bindep", "")]
    assert final.index("COPY --from=galaxy /usr/share/ansible /usr/share/ansible") < final.index(
        "RUN /output/scripts/install-from-bindep && rm -rf /output/wheels"
    )
    # Which bindep lists the generated scripts install where.
    scripts = context / "_build" / "scripts"
    assemble = (scripts / "assemble").read_text()
    assert "bindep -l newline | sort >> /output/bindep/run.txt" in assemble
    assert "compile_packages=$(bindep -b compile)" in assemble
    assert "PACKAGES=$(cat /output/bindep/run.txt)" in (scripts / "install-from-bindep").read_text()
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="(.*)"$', (context / "Containerfile").read_text(), re.M)
    assert refs, "no ansible-core/ansible-runner install in the base stage"

    had_share_ansible = Path("/usr/share/ansible").exists()
    work = tmp_path / "work"
    for sub in ("upper", "overlay", "elsewhere", "home"):
        (work / sub).mkdir(parents=True)
    (work / "hosts.yml").write_text(INVENTORY)
    (tmp_path / "novakit.toml").write_text(BASE_CONFIG)
    state = tmp_path / "state"
    novakit_env = {
        **OPERATOR_ENV,
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(tmp_path / "novakit.toml"),
    }
    (tmp_path / "steps.sh").write_text(STEPS)
    env = {
        # The machine's way to PyPI (PIP_* settings, its pip cache), nothing of this checkout's venv.
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip"),
        # No bytecode compiling of what pip installs: it changes no installed file's content and
        # costs a minute on a busy machine.
        "PIP_NO_COMPILE": "1",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(work / "home"),
        "LANG": "C.UTF-8",
        "PYTHON": shutil.which("python3", path="/usr/bin:/bin") or "python3",
        "VENV": str(work / "venv"),
        "WORK": str(work),
        "CONTEXT": str(context),
        "COLLECTION": COLLECTION,
        "ANSIBLE_INSTALL_REFS": refs.group(1),
        # The image's collections only (an EE has no other); no host key prompts.
        "ANSIBLE_COLLECTIONS_PATH": "/usr/share/ansible/collections",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        **novakit_env,
    }
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", str(tmp_path / "steps.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (tmp_path / "steps.log").write_text(run.stdout + run.stderr)  # each step with its second
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]

    # What introspect found: the library from the installed collection's files, by a direct
    # reference (no index is asked for novakit), and no libvirt-python.
    requirements = [
        line.split("#")[0].strip()
        for line in (work / "src" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert f"novakit @ file://{COLLECTION}" in requirements, requirements
    assert [r for r in requirements if re.match(r"novakit\b", r)] == [f"novakit @ file://{COLLECTION}"]
    assert not [r for r in requirements if "libvirt" in r], requirements
    # The runtime image gets the SSH client only; the compile profile adds nothing (no compiler,
    # no -dev/-devel package, which a UBI base image may not even have).
    runtime = (work / "runtime-packages.txt").read_text().split()
    assert runtime == ["openssh-client"], runtime
    assert (work / "compile-packages.txt").read_text().split() == runtime
    library = json.loads((work / "library.json").read_text())
    assert library["file"].startswith(str(work / "venv")), library  # installed, not this checkout
    assert library["direct_url"]["url"] == f"file://{COLLECTION}", library
    assert library["version"] == version
    assert library["libvirt"] is False
    # What pip built the library from: the installed collection's own files.
    assert {"plugins", "roles", "playbooks", "novakit", "pyproject.toml"} <= set(
        (work / "collection-files.txt").read_text().split()
    )
    # The collection went to the overlay's upper layer; nothing of it is left on this machine.
    assert (work / "upper" / COLLECTION.removeprefix("/usr/share/") / "MANIFEST.json").is_file()
    assert Path("/usr/share/ansible").exists() == had_share_ansible

    # The playbook ran with that Python: both servers active on the fake host it registered.
    api = api_for(novakit_env)
    servers = api.list(RequestContext.admin())
    assert sorted(s["name"] for s in servers) == ["ee-1", "ee-2"], run.stdout[-3000:]
    assert {(s["status"], s["host"]) for s in servers} == {("ACTIVE", "compute-ee")}
