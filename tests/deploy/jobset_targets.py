"""The JobSets the repository's manifests make, for the checks: the plain
JobSet (deploy/k8s/jobset/jobset.yaml), each Trainer runtime for TrainJobs
of 2, 3 and 8 nodes, and each TrainJob applied to the runtime it names
(jobset_render.py)."""

import os

import jobset_render as jr
import kustomize
import manifests as m
from report import name_of, rel

JOBSET_FILE = os.path.join("deploy", "k8s", "jobset", "jobset.yaml")
TRAINER_DIR = os.path.join("deploy", "k8s", "trainer")
TRAINJOBS_DIR = os.path.join("deploy", "k8s", "trainjobs")
PS_JOB = "ps"
SHAPES = (2, 3, 8)  # numNodes each runtime is rendered and checked at


def trainer_docs(repo):
    """(path, doc) of every document under deploy/k8s/trainer and
    deploy/k8s/trainjobs, and of every overlay kustomize builds (path: the
    overlay's folder)."""
    files = [p for d in (TRAINER_DIR, TRAINJOBS_DIR)
             for p in m.k8s_files(os.path.join(repo, d))]
    return ([(p, doc) for p in files for doc in m.load_docs(p)] +
            kustomize.rendered(repo))


def runtimes(repo):
    """{(kind, name): (path, doc)} of the Trainer runtimes."""
    return {(m.kind_of(d), name_of(d)): (p, d) for p, d in trainer_docs(repo)
            if m.kind_of(d) in jr.RUNTIME_KINDS}


def _target(what, name, spec, runtime=None, trainjob=None):
    return {"what": what, "name": name, "spec": spec, "runtime": runtime,
            "trainjob": trainjob, "pods": jr.pods(name, spec)}


def runtime_of(repo, trainjob):
    """(path, runtime doc) a TrainJob's runtimeRef names, or None."""
    ref = trainjob.get("spec", {}).get("runtimeRef", {})
    return runtimes(repo).get((ref.get("kind", "ClusterTrainingRuntime"),
                               ref.get("name")))


def targets(report, repo):
    """Every JobSet to check, as dicts: what, name, spec (the JobSet spec),
    runtime and trainjob (docs or None), pods (jobset_render's)."""
    out = []
    path = os.path.join(repo, JOBSET_FILE)
    doc = jr.load(path)
    out.append(_target(f"{JOBSET_FILE} JobSet/{name_of(doc)}", name_of(doc),
                       doc["spec"]))
    for (kind, name), (rpath, runtime) in sorted(runtimes(repo).items()):
        for nodes in SHAPES:
            job_name, spec = jr.apply_trainjob(runtime, None, nodes)
            out.append(_target(f"{rel(repo, rpath)} {kind}/{name} at "
                               f"numNodes={nodes}", job_name, spec,
                               runtime=runtime))
    for tpath, trainjob in trainer_docs(repo):
        if m.kind_of(trainjob) != "TrainJob":
            continue
        what = f"{rel(repo, tpath)} TrainJob/{name_of(trainjob)}"
        found = runtime_of(repo, trainjob)
        ref = trainjob.get("spec", {}).get("runtimeRef", {})
        if not report.check(found is not None and ref.get("apiGroup") ==
                            "trainer.kubeflow.org", f"{what}: runtimeRef "
                            f"{ref.get('kind')}/{ref.get('name')} is a runtime "
                            f"of that kind in {TRAINER_DIR}"):
            continue
        job_name, spec = jr.apply_trainjob(found[1], trainjob)
        out.append(_target(f"{what} on {m.kind_of(found[1])}/{name_of(found[1])}",
                           job_name, spec, runtime=found[1], trainjob=trainjob))
    return out


def replicated_job(spec, name):
    return next((rj for rj in spec.get("replicatedJobs", []) if rj["name"] == name),
                None)


def containers(spec, rj_name):
    """The raw container specs of a replicated job's pod template."""
    rj = replicated_job(spec, rj_name) or {}
    return rj.get("template", {}).get("spec", {}).get("template", {}).get(
        "spec", {}).get("containers", [])


def pod_spec(spec, rj_name):
    rj = replicated_job(spec, rj_name) or {}
    return rj.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})


def port_named(container, name):
    return next((p["containerPort"] for p in container.get("ports", [])
                 if p.get("name") == name), None)


def pod_labels(spec, rj_name):
    rj = replicated_job(spec, rj_name) or {}
    return rj.get("template", {}).get("spec", {}).get("template", {}).get(
        "metadata", {}).get("labels", {})
