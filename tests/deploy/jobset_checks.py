"""What a schema cannot check in the JobSet and Trainer v2 manifests.

For deploy/k8s/jobset/jobset.yaml, each runtime and each TrainJob applied
to the runtime it names (jobset_targets.py): the TF_CONFIG of every pod
names exactly the pods the JobSet creates; sizes agree (mlPolicy.numNodes,
the node job's completions, TF_CONFIG's workers, a TrainJob's numNodes);
the trainer job is labelled and has the container named node; ports agree
between TF_CONFIG, containerPorts, probes and flags; the failure policy
fits common/base/exit_codes.h; jobset.yaml is the runtime's template; the mTLS
runtime's TLS flags point into mounted Secrets.
"""

import json
import os

import jobset_render as jr
import jobset_targets as jt
import manifests as m

TF_TYPE = {jt.PS_JOB: "ps"}  # any other replicated job: the trainer's
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
TLS_FILES = {"tls_cert": "tls.crt", "tls_key": "tls.key", "tls_ca": "ca.crt"}


def _tf_configs(report, t):
    """[(pod, TF_CONFIG dict)] of every container that has one."""
    out = []
    for pod in t["pods"]:
        for c in pod["containers"]:
            try:
                out.append((pod, json.loads(c["env"]["TF_CONFIG"])))
            except (KeyError, ValueError) as e:
                report.fail(f"{t['what']} pod {pod['hostname']} container "
                            f"{c['name']}: no TF_CONFIG that parses ({e})")
    return out


def check_tf_config(report, t):
    pods = t["pods"]
    hosts = {tf: [p["fqdn"] for p in pods if TF_TYPE.get(p["replicatedJob"],
                                                         "worker") == tf]
             for tf in ("ps", "worker")}
    report.check(all(hosts.values()) and None not in hosts["ps"] + hosts["worker"],
                 f"{t['what']}: servers and workers have stable DNS names "
                 f"(enableDNSHostnames): {hosts}")
    (server,) = jt.containers(t["spec"], jt.PS_JOB)
    grpc = jt.port_named(server, "grpc")
    want = {"ps": [f"{h}:{grpc}" for h in hosts["ps"]], "worker": hosts["worker"]}
    configs = _tf_configs(report, t)
    for pod, tf in configs:
        cluster = tf.get("cluster", {})
        got = {"ps": cluster.get("ps"),
               "worker": [w.rpartition(":")[0] for w in cluster.get("worker", [])]}
        kind = TF_TYPE.get(pod["replicatedJob"], "worker")
        rj = jt.replicated_job(t["spec"], pod["replicatedJob"])
        index = pod["jobIndex"] * rj["template"]["spec"]["completions"] + pod["podIndex"]
        report.check(got == want and set(cluster) == {"ps", "worker"} and
                     tf.get("task") == {"type": kind, "index": index},
                     f"{t['what']} pod {pod['hostname']}: TF_CONFIG names exactly "
                     f"the JobSet's pods (ps at the grpc port {grpc}) and task "
                     f"{kind} {index} (got {tf})")
    report.check(bool(configs), f"{t['what']}: its pods carry TF_CONFIG")
    return len(want["worker"])


def check_sizes(report, t, node, n_workers):
    job = jt.replicated_job(t["spec"], node)["template"]["spec"]
    report.check(job.get("completions") == job.get("parallelism") == n_workers,
                 f"{t['what']}: {node} completions = parallelism = "
                 f"{n_workers} TF_CONFIG workers")
    ps = jt.replicated_job(t["spec"], jt.PS_JOB)["template"]["spec"]
    report.check(ps.get("completions") == ps.get("parallelism"),
                 f"{t['what']}: every server shard starts at once")
    if t["runtime"] is None:
        return
    template_job = jt.replicated_job(t["runtime"]["spec"]["template"]["spec"],
                                     node)["template"]["spec"]
    num_nodes = t["runtime"]["spec"].get("mlPolicy", {}).get("numNodes")
    report.check(num_nodes == template_job.get("completions") == n_workers,
                 f"{t['what']}: mlPolicy.numNodes {num_nodes} = the template's "
                 f"{node} completions = {n_workers} TF_CONFIG workers")
    if t["trainjob"] is not None:
        asked = t["trainjob"]["spec"].get("trainer", {}).get("numNodes", num_nodes)
        report.check(asked == num_nodes, f"{t['what']}: numNodes {asked} is "
                     f"the runtime's {num_nodes} (S and W are fixed per runtime)")


def check_trainer_job(report, t):
    """The trainer step's name, or None when no job carries the label."""
    try:
        node = jr.trainer_job_name(t["spec"])
    except jr.RenderError as e:
        report.fail(f"{t['what']}: {e}")
        return None
    report.ok(f"{t['what']}: replicated job {node} has {jr.ANCESTOR_LABEL}: trainer")
    names = [c["name"] for c in jt.containers(t["spec"], node)]
    report.check(jr.TRAINER_CONTAINER in names,
                 f"{t['what']}: {node} has the container named "
                 f"{jr.TRAINER_CONTAINER} (Trainer applies trainer.* there)")
    return node


def _metrics(report, where, c):
    declared = jt.port_named(c, "metrics")
    flags = m.setting(c, "metrics_port")
    report.check(flags == ([str(declared)] if declared else []),
                 f"{where}: --metrics_port {flags} = the metrics containerPort "
                 f"{declared}")


def check_ports(report, t, node, binaries):
    """The probes call the grpc port, or --health_port where the server has
    one (kubelet probes speak plaintext only)."""
    (server,) = jt.containers(t["spec"], jt.PS_JOB)
    grpc = jt.port_named(server, "grpc")
    health = m.setting(server, "health_port")
    want = int(health[0]) if len(health) == 1 else grpc
    probed = [server.get(p, {}).get("grpc", {}).get("port") for p in PROBES]
    report.check(grpc is not None and probed == [want] * len(PROBES),
                 f"{t['what']}: the server's startup, readiness and liveness "
                 f"probes are gRPC on port {want} (grpc {grpc}, --health_port "
                 f"{health}; got {probed})")
    for rj in (jt.PS_JOB, node):
        for c in jt.containers(t["spec"], rj):
            if binaries(c) in ("lockstep_server", "lockstep_worker"):
                _metrics(report, f"{t['what']} {rj}/{c['name']}", c)


def _worker_policy(report, where, job, codes):
    pod = job["template"]["spec"]
    fail = set()
    rules = job.get("podFailurePolicy", {}).get("rules", [])
    for rule in rules:
        on = rule.get("onExitCodes")
        if rule.get("action") == "FailJob" and on:
            report.check(on.get("operator") == "In" and
                         on.get("containerName") == jr.TRAINER_CONTAINER,
                         f"{where}: FailJob names exit codes In container node")
            fail |= set(on.get("values", []))
    report.check(fail == {codes["kExitPermanent"]},
                 f"{where}: FailJob exactly on exit {codes['kExitPermanent']} "
                 f"(permanent), not {codes['kExitRetryable']} or "
                 f"{codes['kExitTerminated']} (got {sorted(fail)})")
    report.check(bool(rules) and pod.get("restartPolicy") == "Never",
                 f"{where}: a podFailurePolicy with restartPolicy Never")
    report.check(job.get("completionMode") == "Indexed" and
                 (job.get("backoffLimitPerIndex") or 0) > 0 and
                 job.get("maxFailedIndexes") == 0,
                 f"{where}: Indexed, backoffLimitPerIndex > 0 (a rank is "
                 "retried alone), maxFailedIndexes 0")


def _server_policy(report, where, job):
    pod = job["template"]["spec"]
    (c,) = pod["containers"]
    args = c.get("args", [])
    report.check(pod.get("restartPolicy") == "OnFailure" and
                 (job.get("backoffLimit") or 0) > 0,
                 f"{where}: restartPolicy OnFailure with backoffLimit > 0")
    report.check(m.flag_values(args, "exit_when_done") == ["true"],
                 f"{where}: --exit_when_done=true (the JobSet completes)")
    dirs = m.setting(c, "checkpoint_dir")
    found = m.volume_under(dirs[0], c, pod) if len(dirs) == 1 else None
    report.check(found is not None and not found[0].get("readOnly") and
                 not {"secret", "configMap"} & set(found[1]),
                 f"{where}: --checkpoint_dir {dirs} is on a writable volume")


def check_failure_policy(report, t, node, codes):
    spec = t["spec"]
    _worker_policy(report, f"{t['what']} {node}",
                   jt.replicated_job(spec, node)["template"]["spec"], codes)
    _server_policy(report, f"{t['what']} {jt.PS_JOB}",
                   jt.replicated_job(spec, jt.PS_JOB)["template"]["spec"])
    depends = jt.replicated_job(spec, node).get("dependsOn")
    report.check(depends == [{"name": jt.PS_JOB, "status": "Ready"}],
                 f"{t['what']}: {node} dependsOn {jt.PS_JOB} Ready (got {depends})")
    success = spec.get("successPolicy", {})
    report.check(success.get("operator") == "All" and
                 not success.get("targetReplicatedJobs"),
                 f"{t['what']}: successPolicy All (every pod exits 0)")
    rules = spec.get("failurePolicy", {}).get("rules", [])
    report.check(any(r.get("action") == "FailJobSet" and "PodFailurePolicy" in
                     r.get("onJobFailureReasons", []) for r in rules),
                 f"{t['what']}: a permanent exit fails the JobSet (FailJobSet "
                 "on PodFailurePolicy)")


def _without_ancestor(spec):
    out = json.loads(json.dumps(spec))
    for rj in out.get("replicatedJobs", []):
        rj.get("template", {}).get("metadata", {}).get("labels", {}).pop(
            jr.ANCESTOR_LABEL, None)
    return out


def first_difference(a, b, path=""):
    """The first path where a and b differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = first_difference(a.get(k), b.get(k), f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path or '.'}: {a!r} vs {b!r}"


def check_drift(report, repo):
    """jobset.yaml's spec is the ClusterTrainingRuntime's template."""
    jobset = jr.load(os.path.join(repo, jt.JOBSET_FILE))
    cluster = [d for (kind, _), (_, d) in jt.runtimes(repo).items()
               if kind == "ClusterTrainingRuntime"]
    if not report.check(len(cluster) == 1, "one ClusterTrainingRuntime"):
        return
    diff = first_difference(_without_ancestor(jobset["spec"]),
                            _without_ancestor(cluster[0]["spec"]["template"]["spec"]))
    report.check(diff is None, f"{jt.JOBSET_FILE}: its spec is the "
                 f"ClusterTrainingRuntime's template spec (first difference: "
                 f"{diff or 'none'})")


def _tls_file(report, where, c, pod, flag):
    paths = m.setting(c, flag)
    found = m.volume_under(paths[0], c, pod) if len(paths) == 1 else None
    secret = (found or ({}, {}))[1].get("secret")
    key = os.path.basename(paths[0]) if paths else None
    items = [i["key"] for i in (secret or {}).get("items", [])]
    report.check(secret is not None and key == TLS_FILES[flag] and
                 (not items or key in items),
                 f"{where}: --{flag} {paths} is key {TLS_FILES[flag]} of a "
                 "mounted Secret volume")


def _uses_tls(spec):
    return any(m.setting(c, "tls_cert")
               for rj in spec.get("replicatedJobs", [])
               for c in jt.containers(spec, rj["name"]))


def check_tls(report, t, node):
    """An mTLS runtime (TLS flags in its template) and whatever a TrainJob
    makes of it: every container's TLS files in mounted Secrets, the
    servers' identities and plaintext health port, the workers' server
    name; else servers --insecure."""
    template = t["runtime"]["spec"]["template"]["spec"] if t["runtime"] else t["spec"]
    mtls = _uses_tls(template)
    for rj, need in ((jt.PS_JOB, ("worker_identities", "admin_identities",
                                  "health_port")),
                     (node, ("tls_server_name",))):
        pod = jt.pod_spec(t["spec"], rj)
        for c in jt.containers(t["spec"], rj):
            where = f"{t['what']} {rj}/{c['name']}"
            if not mtls:
                if rj == jt.PS_JOB:
                    report.check(m.setting(c, "insecure") == ["true"],
                                 f"{where}: no TLS, so the server says "
                                 "--insecure (or LOCKSTEP_INSECURE=true)")
                continue
            for flag in TLS_FILES:
                _tls_file(report, where, c, pod, flag)
            for flag in need:
                report.check(len(m.setting(c, flag)) == 1,
                             f"{where}: mTLS needs --{flag}")
            report.check(not m.setting(c, "insecure"), f"{where}: no --insecure with mTLS")
    return mtls


def check_jobsets(report, repo, binaries):
    """All of the above for every target; returns the targets."""
    codes = m.exit_codes(repo)
    all_targets = jt.targets(report, repo)
    mtls = 0
    for t in all_targets:
        node = check_trainer_job(report, t)
        if node is None:
            continue
        n_workers = check_tf_config(report, t)
        check_sizes(report, t, node, n_workers)
        check_ports(report, t, node, binaries)
        check_failure_policy(report, t, node, codes)
        mtls += check_tls(report, t, node)
    report.check(mtls >= 2, f"an mTLS runtime and a TrainJob on it ({mtls} mTLS JobSets)")
    check_drift(report, repo)
    return all_targets
