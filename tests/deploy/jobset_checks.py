"""What a schema cannot check in the JobSet and Trainer v2 manifests.

For deploy/k8s/jobset/jobset.yaml, each runtime at 2, 3 and 8 nodes and
each TrainJob applied to the runtime it names (jobset_targets.py): what
every pod learns of the shape at start (the servers' --shard and
--num_shards, the workers' LOCKSTEP_SERVERS, PET_NNODES and PET_NODE_RANK)
names exactly the pods the JobSet creates; sizes agree; the JobSet Trainer
makes is strictly valid; the trainer job is labelled and has the container
named node; ports agree between the addresses, containerPorts, probes and
flags; the failure policy fits common/base/exit_codes.h; jobset.yaml is the
JobSet Trainer makes of the runtime; the mTLS runtime's TLS flags point
into mounted Secrets.
"""

import json
import os

import crd_schemas
import jobset_render as jr
import jobset_targets as jt
import manifests as m

PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
BASE_RUNTIME = "lockstep-ps"  # deploy/k8s/trainer/cluster-training-runtime.yaml
TLS_FILES = {"tls_cert": "tls.crt", "tls_key": "tls.key", "tls_ca": "ca.crt"}


def _setting(c, name):
    """The one value of --name in c's args or LOCKSTEP_NAME in its env (a
    rendered container: $(VAR) expanded), or None."""
    args = [a.split("=", 1)[1] for a in c["args"] if a.startswith(f"--{name}=")]
    if args:
        return args[-1]
    return c["env"].get(f"LOCKSTEP_{name.upper()}")


def check_shape(report, t):
    """What each pod learns of the job's shape at start names exactly the
    JobSet's pods: servers --workers=auto, --shard their index of
    --num_shards; workers LOCKSTEP_SERVERS (every server at the grpc port,
    in shard order), PET_NNODES and PET_NODE_RANK.
    Returns the number of workers."""
    pods = t["pods"]
    servers = [p for p in pods if p["replicatedJob"] == jt.PS_JOB]
    workers = [p for p in pods if p["replicatedJob"] != jt.PS_JOB]
    report.check(servers and workers and
                 None not in [p["fqdn"] for p in pods],
                 f"{t['what']}: servers and workers have stable DNS names "
                 f"(enableDNSHostnames): {[p['fqdn'] for p in pods]}")
    (server,) = jt.containers(t["spec"], jt.PS_JOB)
    grpc = jt.port_named(server, "grpc")
    want = ",".join(f"{p['fqdn']}:{grpc}" for p in servers)
    for index, pod in enumerate(servers):
        (c,) = pod["containers"]
        got = {k: _setting(c, k) for k in ("workers", "shard", "num_shards",
                                           "listen")}
        report.check(got == {"workers": "auto", "shard": str(index),
                             "num_shards": str(len(servers)),
                             "listen": f"0.0.0.0:{grpc}"},
                     f"{t['what']} pod {pod['hostname']}: the server learns W "
                     f"(--workers=auto) and is shard {index} of {len(servers)} "
                     f"on the grpc port {grpc} (got {got})")
    for index, pod in enumerate(workers):
        c = next(c for c in pod["containers"] if c["name"] == jr.TRAINER_CONTAINER)
        env = c["env"]
        got = {k: env.get(k) for k in ("LOCKSTEP_SERVERS", "PET_NNODES",
                                       "PET_NODE_RANK")}
        report.check(got == {"LOCKSTEP_SERVERS": want,
                             "PET_NNODES": str(len(workers)),
                             "PET_NODE_RANK": str(index)},
                     f"{t['what']} pod {pod['hostname']}: the worker is rank "
                     f"{index} of {len(workers)} and names every server "
                     f"({want}; got {got})")
    return len(workers)


def check_sizes(report, t, node, n_workers):
    job = jt.replicated_job(t["spec"], node)["template"]["spec"]
    report.check(job.get("completions") == job.get("parallelism") == n_workers,
                 f"{t['what']}: {node} completions = parallelism = "
                 f"{n_workers} workers")
    ps = jt.replicated_job(t["spec"], jt.PS_JOB)["template"]["spec"]
    report.check(ps.get("completions") == ps.get("parallelism"),
                 f"{t['what']}: every server shard starts at once")
    for c in jt.containers(t["spec"], jt.PS_JOB):
        res = c.get("resources", {})
        report.check(bool(res.get("limits")) and
                     res.get("requests") == res.get("limits"),
                     f"{t['what']}: the server's requests are its limits "
                     f"(Guaranteed: a throttled server stalls the barrier; "
                     f"got {res})")
    if t["runtime"] is None:
        return
    policy = t["runtime"]["spec"].get("mlPolicy", {})
    report.check("torch" in policy, f"{t['what']}: mlPolicy.torch, so that "
                 "Trainer sets PET_NNODES and PET_NODE_RANK")


def check_mode(report, t, node):
    """Workers that train by all-reduce carry the label the NetworkPolicy
    lets peers in by and are reached at their pod IP; workers on GPUs run
    the CUDA image with a GPU each (after a TrainJob's resourcesPerNode)."""
    for c in jt.containers(t["spec"], node):
        if c["name"] != jr.TRAINER_CONTAINER:
            continue
        words = list(c.get("command") or []) + list(c.get("args") or [])
        where = f"{t['what']} {node}/{c['name']}"
        labels = jt.pod_labels(t["spec"], node)
        if "--sync=allreduce" in words:
            host = [e for e in c.get("env", [])
                    if e["name"] == "LOCKSTEP_ALLREDUCE_HOST"]
            report.check(labels.get("lockstep/sync") == "allreduce" and
                         [e.get("valueFrom") for e in host] ==
                         [{"fieldRef": {"fieldPath": "status.podIP"}}],
                         f"{where}: an all-reduce worker is labelled "
                         "lockstep/sync: allreduce and reached at its pod IP "
                         "(LOCKSTEP_ALLREDUCE_HOST from status.podIP)")
        else:
            report.check("lockstep/sync" not in labels, f"{where}: a PS "
                         "worker carries no lockstep/sync label")
        if "--device=cuda" in words:
            gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            report.check("-cuda" in c.get("image", "") and gpus is not None
                         and int(gpus) >= 1,
                         f"{where}: a GPU worker runs the CUDA image with a "
                         f"GPU (image {c.get('image')}, nvidia.com/gpu {gpus})")


def check_volumes(report, t):
    """Every mount names a volume of its pod or a claim JobSet makes
    (volumeClaimPolicies), and every such claim is mounted."""
    claims = {c.get("metadata", {}).get("name")
              for policy in t["spec"].get("volumeClaimPolicies", [])
              for c in policy.get("templates", [])}
    mounted = set()
    for rj in t["spec"].get("replicatedJobs", []):
        pod = jt.pod_spec(t["spec"], rj["name"])
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for c in pod.get("containers", []):
            names = [mnt["name"] for mnt in c.get("volumeMounts", [])]
            mounted.update(names)
            missing = [n for n in names if n not in volumes | claims]
            report.check(not missing, f"{t['what']} {rj['name']}/{c['name']}: "
                         f"every mount has a volume or claim (missing {missing})")
    report.check(claims <= mounted, f"{t['what']}: every claim of "
                 f"volumeClaimPolicies is mounted ({sorted(claims)})")


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
    """jobset.yaml's spec is the JobSet Trainer makes of the
    ClusterTrainingRuntime for a TrainJob of its name and worker count."""
    jobset = jr.load(os.path.join(repo, jt.JOBSET_FILE))
    cluster = [d for (kind, name), (_, d) in jt.runtimes(repo).items()
               if (kind, name) == ("ClusterTrainingRuntime", BASE_RUNTIME)]
    if not report.check(len(cluster) == 1, f"the ClusterTrainingRuntime "
                        f"{BASE_RUNTIME} (the base of the overlays)"):
        return
    name = jobset["metadata"]["name"]
    node = jt.replicated_job(jobset["spec"], "node") or {}
    nodes = node.get("template", {}).get("spec", {}).get("completions")
    _, made = jr.apply_trainjob(cluster[0], {"metadata": {"name": name}}, nodes)
    diff = first_difference(_without_ancestor(jobset["spec"]),
                            _without_ancestor(made))
    report.check(diff is None, f"{jt.JOBSET_FILE}: its spec is the JobSet "
                 f"Trainer makes of the ClusterTrainingRuntime for a TrainJob "
                 f"named {name} of {nodes} nodes (first difference: "
                 f"{diff or 'none'})")


def check_rendered(report, t, versions):
    """A JobSet Trainer would make, strictly valid as the JobSet it is."""
    doc = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
           "metadata": {"name": t["name"]}, "spec": t["spec"]}
    report.errors(crd_schemas.crd_errors(doc, versions),
                  f"{t['what']}: the JobSet Trainer makes is valid (strict)")


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


def check_pdb(report, repo, jobset_target):
    """jobset/pdb.yaml keeps every pod of jobset.yaml from eviction."""
    path = os.path.join(repo, "deploy", "k8s", "jobset", "pdb.yaml")
    (pdb,) = m.load_docs(path)
    selector = pdb["spec"]["selector"]["matchLabels"]
    covered = [p for p in jobset_target["pods"]
               if m.labels_match(selector, p["labels"])]
    report.check(len(covered) == len(jobset_target["pods"]) ==
                 pdb["spec"].get("minAvailable"),
                 f"deploy/k8s/jobset/pdb.yaml: minAvailable "
                 f"{pdb['spec'].get('minAvailable')} = every pod of the JobSet "
                 f"({len(jobset_target['pods'])}), all selected "
                 f"({len(covered)})")


def check_jobsets(report, repo, binaries, versions):
    """All of the above for every target; returns the targets."""
    codes = m.exit_codes(repo)
    all_targets = jt.targets(report, repo)
    mtls = 0
    for t in all_targets:
        node = check_trainer_job(report, t)
        if node is None:
            continue
        n_workers = check_shape(report, t)
        check_sizes(report, t, node, n_workers)
        if t["runtime"] is not None:
            check_rendered(report, t, versions)
        check_ports(report, t, node, binaries)
        check_mode(report, t, node)
        check_volumes(report, t)
        check_failure_policy(report, t, node, codes)
        mtls += check_tls(report, t, node)
    report.check(mtls >= 2, f"an mTLS runtime and a TrainJob on it ({mtls} mTLS JobSets)")
    check_drift(report, repo)
    check_pdb(report, repo, all_targets[0])
    return all_targets
