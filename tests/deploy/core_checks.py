"""Core Kubernetes kinds against the Kubernetes JSON schemas, strictly.

kubernetes-validate with strict=True: an unknown field is an error, for
each pinned Kubernetes version. The kinds no schema has (TFJob, the
Kustomization, the Trainer v2 and JobSet CRDs) are left to
legacy_checks.py and crd_schemas.py.
"""

import kubernetes_validate

import manifests as m
from report import name_of, rel

CRD_KINDS = {"JobSet", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"}
# PodMonitor: prometheus-operator's, checked by netpol_checks.py.
NOT_IN_SCHEMAS = {"TFJob", "Kustomization", "PodMonitor"} | CRD_KINDS


def schema_errors(doc, version):
    """[] if doc validates strictly against Kubernetes version, else why."""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
        return []
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"Kubernetes {version}: {path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"Kubernetes {version} has no schema for it ({e})"]


def schema_validate(report, what, doc, versions):
    for v in versions:
        report.errors(schema_errors(doc, v),
                      f"{what}: valid against Kubernetes {v} (strict)")


def all_docs(k8s_dir):
    """(path, doc) of every YAML document under deploy/k8s."""
    return [(p, d) for p in m.k8s_files(k8s_dir) for d in m.load_docs(p)]


def check_core_schemas(report, repo, docs, versions):
    for path, doc in docs:
        kind = m.kind_of(doc)
        if kind not in NOT_IN_SCHEMAS:
            schema_validate(report, f"{rel(repo, path)} {kind}/{name_of(doc)}",
                            doc, versions)
    kinds = {m.kind_of(d) for _, d in docs}
    unknown = kinds - NOT_IN_SCHEMAS - {
        "ConfigMap", "Secret", "Service", "Job", "PodDisruptionBudget",
        "NetworkPolicy"}
    report.check(not unknown, f"deploy/k8s uses only kinds the checks know "
                 f"(unknown: {sorted(unknown) or 'none'})")
