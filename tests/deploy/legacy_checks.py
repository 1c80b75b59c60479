"""The legacy manifests (deploy/k8s/legacy): the TFJob, structurally (no
schema has it), its pod templates against the PodTemplate schema; the
kustomization; and the Indexed Jobs' consistency: TF_CONFIG's cluster spec
names each Job pod by its stable DNS name and port, Job sizes,
PodDisruptionBudgets, Services, the NetworkPolicy and the probes agree,
failures are retried as common/base/exit_codes.h says and a restarted server
finds its checkpoints.
"""

import json
import os

from core_checks import schema_validate
import dockerfiles as df
import manifests as m
from report import name_of, rel

EXPECT_BINARY = {"PS": "lockstep_server", "Worker": "lockstep_worker",
                 "Chief": "lockstep_worker", "Master": "lockstep_worker"}
RUN_POLICY_FIELDS = {"cleanPodPolicy", "ttlSecondsAfterFinished",
                     "activeDeadlineSeconds", "backoffLimit",
                     "schedulingPolicy", "suspend", "managedBy"}


def _tfjob_spec(report, what, doc):
    report.check(doc.get("apiVersion") == "kubeflow.org/v1",
                 f"{what}: apiVersion kubeflow.org/v1")
    report.check(bool(doc.get("metadata", {}).get("name")), f"{what}: has a name")
    spec = doc.get("spec", {})
    report.check(set(spec) <= {"tfReplicaSpecs", "runPolicy", "successPolicy",
                               "enableDynamicWorker"},
                 f"{what}: spec fields {sorted(spec)} are TFJob v1 fields")
    run_policy = spec.get("runPolicy", {})
    report.check(set(run_policy) <= RUN_POLICY_FIELDS,
                 f"{what}: runPolicy fields {sorted(run_policy)} are known")
    report.check(run_policy.get("cleanPodPolicy", "Running") in ("All", "Running", "None"),
                 f"{what}: cleanPodPolicy is All, Running or None")
    report.check(spec.get("successPolicy", "") in ("", "AllWorkers"),
                 f"{what}: successPolicy is '' or AllWorkers")
    replicas = spec.get("tfReplicaSpecs", {})
    report.check({"PS", "Worker"} <= set(replicas) and
                 set(replicas) <= {"Chief", "Master", "PS", "Worker", "Evaluator"},
                 f"{what}: replica types {sorted(replicas)} include PS and Worker")
    return replicas


def _tfjob_replica(report, repo, rwhat, rtype, rs, versions):
    report.check(set(rs) <= {"replicas", "restartPolicy", "template"},
                 f"{rwhat}: fields {sorted(rs)} are ReplicaSpec fields")
    report.check(isinstance(rs.get("replicas"), int) and rs["replicas"] >= 1,
                 f"{rwhat}: replicas is a positive integer")
    report.check(rs.get("restartPolicy", "Never") in
                 ("Always", "OnFailure", "Never", "ExitCode"),
                 f"{rwhat}: restartPolicy is valid")
    template = rs.get("template", {})
    containers = template.get("spec", {}).get("containers", [])
    report.check("tensorflow" in [c.get("name") for c in containers],
                 f"{rwhat}: has the container named tensorflow "
                 "(the operator sets TF_CONFIG there)")
    schema_validate(report, f"{rwhat} pod template",
                    {"apiVersion": "v1", "kind": "PodTemplate",
                     "metadata": {"name": f"tfjob-{rtype.lower()}"},
                     "template": template}, versions)
    for c in containers:
        binary, _ = m.container_binary(c, os.path.join(repo, "deploy", "docker"))
        if rtype in EXPECT_BINARY:
            report.check(binary == EXPECT_BINARY[rtype],
                         f"{rwhat}: runs {EXPECT_BINARY[rtype]} (got {binary})")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        if rtype == "PS":
            report.check(ports.get("tfjob-port") == 2222,
                         f"{rwhat}: tfjob-port is 2222 (TF_CONFIG's ps port)")


def check_tfjob(report, repo, path, doc, versions):
    what = f"{rel(repo, path)} TFJob/{name_of(doc)}"
    for rtype, rs in _tfjob_spec(report, what, doc).items():
        _tfjob_replica(report, repo, f"{what} {rtype}", rtype, rs, versions)


def check_kustomization(report, k8s_dir):
    path = os.path.join(k8s_dir, "kustomization.yaml")
    if not report.check(os.path.isfile(path), f"{m.LEGACY_DIR}/kustomization.yaml exists"):
        return
    (doc,) = m.load_docs(path)
    listed = doc.get("resources", [])
    for r in listed:
        report.check(os.path.isfile(os.path.join(k8s_dir, r)),
                     f"kustomization: resource {r} exists")
    plain = [os.path.relpath(p, k8s_dir) for p in m.k8s_files(k8s_dir)
             if os.path.basename(p) not in ("kustomization.yaml", "tfjob.yaml")]
    for p in plain:
        report.check(p in listed, f"kustomization: lists {p}")
    report.check("tfjob.yaml" not in listed,
                 "kustomization: leaves tfjob.yaml out (it needs the Kubeflow "
                 "CRD; legacy/tfjob has its own)")


def component_of(labels):
    return labels.get("app.kubernetes.io/component")


def _job_shape(report, what, spec, n_addresses, comp):
    report.check(spec.get("completionMode") == "Indexed",
                 f"{what}: Indexed (completion index = shard / rank)")
    n = spec.get("completions")
    report.check(spec.get("parallelism") == n,
                 f"{what}: parallelism = completions = {n} (all at once)")
    report.check(spec["template"]["spec"].get("restartPolicy") in ("Never", "OnFailure"),
                 f"{what}: pods end (restartPolicy Never/OnFailure)")
    report.check(isinstance(spec.get("activeDeadlineSeconds"), int),
                 f"{what}: activeDeadlineSeconds bounds its life")
    report.check(n_addresses == n,
                 f"{what}: {n} completions = {n_addresses} cluster_spec.{comp} entries")
    return n


def _job_service(report, what, template, services, comp):
    sub = template["spec"].get("subdomain")
    svc = services.get(sub)
    if report.check(svc is not None, f"{what}: subdomain {sub} is a Service"):
        report.check(svc["spec"].get("clusterIP") == "None", f"Service/{sub}: headless")
        report.check(m.labels_match(svc["spec"].get("selector"),
                                    template["metadata"]["labels"]),
                     f"Service/{sub}: selects the {comp} pods")
    return sub


def _job_tf_config(report, k8s, doc, cluster, comp, sub):
    name = doc["metadata"]["name"]
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    for i, addr in enumerate(cluster.get(comp, [])):
        host, _, port = addr.rpartition(":")
        report.check(host == f"{name}-{i}.{sub}",
                     f"cluster_spec.{comp}[{i}] host {host} is pod {name}-{i}.{sub}")
        if comp == "ps":
            report.check(port.isdigit() and int(port) == ports.get("grpc"),
                         f"cluster_spec.ps[{i}] port {port} is the grpc containerPort")
    for i in range(doc["spec"].get("completions") or 0):
        env = k8s.env_for(container, index=i)
        try:
            tf = json.loads(env.get("TF_CONFIG") or "")
            report.check(tf.get("task") == {"type": comp, "index": i} and
                         tf.get("cluster") == cluster,
                         f"Job/{name} index {i}: TF_CONFIG has cluster_spec and "
                         f"task {{type {comp}, index {i}}}")
        except ValueError as e:
            report.fail(f"Job/{name} index {i}: TF_CONFIG is not JSON ({e}): "
                        f"{env.get('TF_CONFIG')!r}")


def _job_probes(report, what, container, comp):
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    declared = set(ports.values())
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = container.get(probe)
        if p is not None:
            report.check("grpc" in p and p["grpc"]["port"] in declared,
                         f"{what}: {probe} is a gRPC probe on a declared port")
    if comp == "worker":
        args = container.get("args", [])
        health = [a.split("=", 1)[1] for a in args if a.startswith("--health_port=")]
        probe_port = container.get("livenessProbe", {}).get("grpc", {}).get("port")
        report.check(health == [str(probe_port)],
                     f"{what}: --health_port {health} is the probed port {probe_port}")
        gpu = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        report.check(gpu is not None and int(gpu) >= 1, f"{what}: asks for nvidia.com/gpu")
        report.check(df.image_name(container.get("image", "")) == "lockstep-worker-cuda",
                     f"{what}: a GPU worker runs lockstep-worker-cuda "
                     f"(got {container.get('image')})")
    if comp == "ps":
        report.check(ports.get("grpc") in
                     [container.get(p, {}).get("grpc", {}).get("port")
                      for p in ("readinessProbe", "livenessProbe")],
                     f"{what}: probes grpc.health.v1 on the main port")


def _cluster_spec(report, k8s):
    cm = k8s.configmap("lockstep-config")
    if not report.check(cm is not None, "ConfigMap lockstep-config exists"):
        return None
    try:
        cluster = json.loads(cm["data"]["cluster_spec"])
        report.ok("cluster_spec is a JSON object")
        return cluster
    except (KeyError, ValueError) as e:
        report.fail(f"cluster_spec does not parse: {e}")
        return None


def check_jobs(report, k8s):
    """The Indexed Jobs against the ConfigMap's cluster spec and Services;
    returns {component: Job}."""
    cluster = _cluster_spec(report, k8s)
    if cluster is None:
        return {}
    services = {d["metadata"]["name"]: d for _, d in k8s.of_kind("Service")}
    jobs = {}
    for _, doc in k8s.of_kind("Job"):
        template = doc["spec"]["template"]
        comp = component_of(template["metadata"]["labels"])
        jobs[comp] = doc
        what = f"Job/{doc['metadata']['name']}"
        _job_shape(report, what, doc["spec"], len(cluster.get(comp, [])), comp)
        sub = _job_service(report, what, template, services, comp)
        _job_tf_config(report, k8s, doc, cluster, comp, sub)
        (container,) = template["spec"]["containers"]
        _job_probes(report, what, container, comp)
    report.check(set(jobs) == {"ps", "worker"}, "a ps Job and a worker Job")
    return jobs


def check_pdbs_and_policy(report, k8s, jobs):
    for _, pdb in k8s.of_kind("PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        owners = [d for d in jobs.values()
                  if m.labels_match(sel, d["spec"]["template"]["metadata"]["labels"])]
        name = pdb["metadata"]["name"]
        if report.check(len(owners) == 1, f"PodDisruptionBudget/{name}: selects one Job's pods"):
            report.check(pdb["spec"].get("minAvailable") == owners[0]["spec"]["completions"],
                         f"PodDisruptionBudget/{name}: minAvailable = completions")
    if "ps" not in jobs:
        return
    worker_labels = jobs.get("worker", {}).get("spec", {}).get(
        "template", {}).get("metadata", {}).get("labels", {})
    for _, np_ in k8s.of_kind("NetworkPolicy"):
        _legacy_policy(report, np_, jobs["ps"]["spec"]["template"], worker_labels)


def _legacy_policy(report, np_, ps_t, worker_labels):
    name = np_["metadata"]["name"]
    report.check(m.labels_match(np_["spec"]["podSelector"]["matchLabels"],
                                ps_t["metadata"]["labels"]),
                 f"NetworkPolicy/{name}: selects the servers")
    (c,) = ps_t["spec"]["containers"]
    declared = {p["containerPort"] for p in c.get("ports", [])}
    grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
    froms = {}
    for rule in np_["spec"].get("ingress", []):
        for port in rule.get("ports", []):
            report.check(port["port"] in declared,
                         f"NetworkPolicy/{name}: port {port['port']} is a server port")
            froms.setdefault(port["port"], []).extend(rule.get("from", []))
    peers = froms.get(grpc_port, [])
    report.check(any(m.labels_match(p.get("podSelector", {}).get("matchLabels"),
                                    worker_labels) for p in peers),
                 f"NetworkPolicy/{name}: workers reach the grpc port")
    report.check(all(p.get("podSelector", {}).get("matchLabels") for p in peers),
                 f"NetworkPolicy/{name}: no peer on the grpc port is unrestricted")


def _failure_policy(report, where, policy, container, codes):
    fail_codes = set()
    for rule in policy.get("rules", []):
        on = rule.get("onExitCodes")
        if rule.get("action") == "FailJob" and on:
            report.check(on.get("containerName") == container["name"],
                         f"{where}: FailJob rule names the container")
            if on.get("operator") == "In":
                fail_codes |= set(on.get("values", []))
    report.check(codes["kExitPermanent"] in fail_codes,
                 f"{where}: exit {codes['kExitPermanent']} (permanent) fails the job")
    report.check(not fail_codes & {codes["kExitRetryable"], codes["kExitTerminated"]},
                 f"{where}: exits {codes['kExitRetryable']} and "
                 f"{codes['kExitTerminated']} are retried")


def _server_checkpoints(report, k8s, where, spec, container, restart):
    """The server's --checkpoint_dir is a writable volume that a restart
    keeps: an emptyDir only with restartPolicy OnFailure."""
    args = list(container.get("args", []))
    files = k8s.flagfiles(spec, container)
    for arg in list(args):
        if arg.startswith("--flagfile="):
            for p in arg.split("=", 1)[1].split(","):
                args += m.flagfile_args(files.get(p, ""))
    dirs = m.flag_values(args, "checkpoint_dir")
    if not report.check(len(dirs) == 1, f"{where}: the server keeps checkpoints "
                        f"(--checkpoint_dir: {dirs})"):
        return
    found = m.volume_under(dirs[0], container, spec)
    if not report.check(found is not None and not found[0].get("readOnly"),
                        f"{where}: {dirs[0]} is on a writable volume"):
        return
    kind = "emptyDir" if "emptyDir" in found[1] else "volume"
    report.check(kind != "emptyDir" or restart == "OnFailure",
                 f"{where}: its checkpoints outlive a restart ({kind}, "
                 f"restartPolicy {restart})")


def check_restarts(report, repo, k8s):
    """Failures are retried as docs/faults.md's exit codes say, and a
    restarted server finds its checkpoints."""
    codes = m.exit_codes(repo)
    if not report.check({"kExitPermanent", "kExitRetryable", "kExitTerminated"}
                        <= set(codes), "common/base/exit_codes.h names the permanent, "
                        "retryable and SIGTERM exit codes"):
        return
    for path, owner, doc, template, rtype in k8s.pod_templates():
        where = f"{rel(repo, path)} {owner}"
        spec = template.get("spec", {})
        (container,) = spec.get("containers", [])
        component = component_of(template.get("metadata", {}).get("labels", {}))
        restart = (spec.get("restartPolicy") if rtype is None else
                   doc["spec"]["tfReplicaSpecs"][rtype].get("restartPolicy"))
        backoff = (doc["spec"].get("backoffLimit") if rtype is None else
                   doc["spec"].get("runPolicy", {}).get("backoffLimit"))
        report.check(isinstance(backoff, int) and backoff > 0,
                     f"{where}: backoffLimit {backoff} lets a failure be retried")
        policy = doc["spec"].get("podFailurePolicy") if rtype is None else None
        if policy is not None:
            report.check(restart == "Never", f"{where}: podFailurePolicy with "
                         "restartPolicy Never (Kubernetes requires it)")
            _failure_policy(report, where, policy, container, codes)
        elif component == "worker":
            report.check(restart == "OnFailure",
                         f"{where}: a failed worker is restarted (OnFailure)")
        if component == "ps":
            _server_checkpoints(report, k8s, where, spec, container, restart)


def check_legacy(report, repo, versions):
    k8s_dir = os.path.join(repo, m.LEGACY_DIR)
    k8s = m.Manifests(k8s_dir)
    for path, doc in k8s.of_kind("TFJob"):
        check_tfjob(report, repo, path, doc, versions)
    report.check(len(k8s.of_kind("TFJob")) == 1, f"{m.LEGACY_DIR} has one TFJob example")
    check_kustomization(report, k8s_dir)
    jobs = check_jobs(report, k8s)
    check_pdbs_and_policy(report, k8s, jobs)
    check_restarts(report, repo, k8s)
    return k8s
