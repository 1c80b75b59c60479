"""Offline checks of deploy/k8s and deploy/docker (run by validate_manifests.sh).

0. kustomize: every kustomization under deploy/k8s builds with kubectl
   kustomize, and every manifest there comes out of one unchanged; the
   overlays' documents join everything below.
1. core_checks: every core Kubernetes document validates strictly (unknown
   fields are errors) against the Kubernetes JSON schemas of each pinned
   version.
2. crd_schemas: every JobSet, TrainJob, TrainingRuntime and
   ClusterTrainingRuntime validates strictly against kubeflow-trainer-api's
   models, its Job templates against the Kubernetes schemas; mutated copies
   prove the checker rejects unknown fields and wrong types.
3. legacy_checks: the TFJob, the kustomization and the Indexed Jobs of
   deploy/k8s/legacy agree with one another.
4. jobset_checks, netpol_checks: the JobSet and every TrainJob on its
   runtime agree on the shape each pod learns, sizes, ports, failure
   policy, TLS; the JobSets Trainer makes at 2, 3 and 8 nodes are valid; the
   NetworkPolicy admits exactly what the job needs.
5. flag_checks: every flag, script option and environment variable is one
   the program reads.
6. dockerfile_checks: the Dockerfiles build and run what the manifests name.

Prints one line per finding, then the totals, and exits 1 if any failed.
"""

import argparse
import os
import sys

import core_checks
import crd_schemas
import dockerfile_checks
import flag_checks
import jobset_checks
import kustomize
import legacy_checks
import manifests
import netpol_checks
from report import Report, rel


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--server", required=True, help="lockstep_server binary")
    parser.add_argument("--worker", required=True, help="lockstep_worker binary")
    parser.add_argument("--k8s-versions", default="1.29.0",
                        help="comma-separated Kubernetes versions")
    parser.add_argument("--quiet", action="store_true", help="print failures only")
    return parser.parse_args()


def main():
    args = parse_args()
    repo = os.path.abspath(args.repo)
    versions = [v for v in args.k8s_versions.split(",") if v]
    bins = {"lockstep_server": args.server, "lockstep_worker": args.worker}
    for b, p in bins.items():
        if not os.access(p, os.X_OK):
            print(f"FAIL  {b} not found at {p} (build it first)")
            return 1
    report = Report(quiet=args.quiet)
    docs = core_checks.all_docs(os.path.join(repo, "deploy", "k8s"))
    try:
        docs += kustomize.rendered(repo)
        kustomize.check_every_manifest(report, repo)
    except kustomize.KustomizeError as e:
        report.fail(str(e))
        print(report.totals())
        return 1
    core_checks.check_core_schemas(report, repo, docs, versions)
    crd_schemas.check_crds(report, repo, docs, versions)
    legacy = legacy_checks.check_legacy(report, repo, versions)
    docker_dir = os.path.join(repo, "deploy", "docker")

    def program(container):
        return manifests.container_binary(container, docker_dir)[0]
    targets = jobset_checks.check_jobsets(report, repo, program, versions)
    netpol_checks.check_network_policy(report, repo, targets)
    flag_checks.check_flags_and_env(report, repo, bins, legacy, targets)
    dockerfile_checks.check_dockerfiles(report, repo)
    print(report.totals())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
