"""Offline checks of deploy/k8s and deploy/docker (run by validate_manifests.sh).

1. Every Kubernetes manifest validates, strictly (unknown fields are
   errors), against the Kubernetes JSON schemas of each pinned version; the
   TFJob, a CRD the schemas lack, is checked structurally and its pod
   templates against the PodTemplate schema; kustomization.yaml lists every
   plain manifest.
2. The pieces agree: TF_CONFIG's cluster spec names each Job pod by its
   stable DNS name and port, Job sizes, PodDisruptionBudgets, Services,
   the NetworkPolicy and the probes match one another, and every rendered
   TF_CONFIG parses with the right role and index.
3. Every flag a manifest or Dockerfile passes (flag files included) is one
   the binary lists in --helpfull, or is in manifests.COMING_FLAGS; every
   environment variable is read by the binary or feeds one that is.
4. Every path a Dockerfile copies from the build context exists, every
   binary it builds or runs is a CMake target, it copies every top-level
   source directory CMake configures, its build stage installs the build
   packages of deploy/local/install_deps.sh, and its final stage runs as
   non-root.

Prints one line per finding and exits 1 if any check failed.
"""

import argparse
import json
import os
import re
import sys

import kubernetes_validate

import manifests as m

NOT_IN_SCHEMAS = {"TFJob", "Kustomization"}


class Report:
    def __init__(self):
        self.failures = 0
        self.passes = 0

    def ok(self, what):
        self.passes += 1
        print(f"ok    {what}")

    def fail(self, what):
        self.failures += 1
        print(f"FAIL  {what}")

    def note(self, what):
        print(f"note  {what}")

    def check(self, cond, what):
        (self.ok if cond else self.fail)(what)
        return cond


def rel(repo, path):
    return os.path.relpath(path, repo)


def schema_validate(report, what, doc, versions):
    for v in versions:
        try:
            kubernetes_validate.validate(doc, v, strict=True)
            report.ok(f"{what}: valid against Kubernetes {v} (strict)")
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            report.fail(f"{what}: Kubernetes {v}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            report.fail(f"{what}: Kubernetes {v} has no schema for it ({e})")


def check_schemas(report, repo, k8s, versions):
    for path, doc in k8s.docs:
        kind = m.kind_of(doc)
        what = f"{rel(repo, path)} {kind}/{doc.get('metadata', {}).get('name', '?')}"
        if kind not in NOT_IN_SCHEMAS:
            schema_validate(report, what, doc, versions)


def check_tfjob(report, repo, path, doc, versions):
    what = f"{rel(repo, path)} TFJob/{doc.get('metadata', {}).get('name', '?')}"
    report.check(doc.get("apiVersion") == "kubeflow.org/v1",
                 f"{what}: apiVersion kubeflow.org/v1")
    report.check(bool(doc.get("metadata", {}).get("name")), f"{what}: has a name")
    spec = doc.get("spec", {})
    allowed_spec = {"tfReplicaSpecs", "runPolicy", "successPolicy",
                    "enableDynamicWorker"}
    report.check(set(spec) <= allowed_spec,
                 f"{what}: spec fields {sorted(spec)} are TFJob v1 fields")
    run_policy = spec.get("runPolicy", {})
    report.check(set(run_policy) <= {"cleanPodPolicy", "ttlSecondsAfterFinished",
                                     "activeDeadlineSeconds", "backoffLimit",
                                     "schedulingPolicy", "suspend", "managedBy"},
                 f"{what}: runPolicy fields {sorted(run_policy)} are known")
    report.check(run_policy.get("cleanPodPolicy", "Running") in ("All", "Running", "None"),
                 f"{what}: cleanPodPolicy is All, Running or None")
    report.check(spec.get("successPolicy", "") in ("", "AllWorkers"),
                 f"{what}: successPolicy is '' or AllWorkers")
    replicas = spec.get("tfReplicaSpecs", {})
    report.check({"PS", "Worker"} <= set(replicas) and
                 set(replicas) <= {"Chief", "Master", "PS", "Worker", "Evaluator"},
                 f"{what}: replica types {sorted(replicas)} include PS and Worker")
    expect_binary = {"PS": "lockstep_server", "Worker": "lockstep_worker",
                     "Chief": "lockstep_worker", "Master": "lockstep_worker"}
    for rtype, rs in replicas.items():
        rwhat = f"{what} {rtype}"
        report.check(set(rs) <= {"replicas", "restartPolicy", "template"},
                     f"{rwhat}: fields {sorted(rs)} are ReplicaSpec fields")
        report.check(isinstance(rs.get("replicas"), int) and rs["replicas"] >= 1,
                     f"{rwhat}: replicas is a positive integer")
        report.check(rs.get("restartPolicy", "Never") in
                     ("Always", "OnFailure", "Never", "ExitCode"),
                     f"{rwhat}: restartPolicy is valid")
        template = rs.get("template", {})
        names = [c.get("name") for c in template.get("spec", {}).get("containers", [])]
        report.check("tensorflow" in names,
                     f"{rwhat}: has the container named tensorflow "
                     "(the operator sets TF_CONFIG there)")
        schema_validate(report, f"{rwhat} pod template",
                        {"apiVersion": "v1", "kind": "PodTemplate",
                         "metadata": {"name": f"tfjob-{rtype.lower()}"},
                         "template": template}, versions)
        for c in template.get("spec", {}).get("containers", []):
            binary, _ = m.container_binary(c, os.path.join(repo, "deploy", "docker"))
            if rtype in expect_binary:
                report.check(binary == expect_binary[rtype],
                             f"{rwhat}: runs {expect_binary[rtype]} (got {binary})")
            ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
            if rtype == "PS":
                report.check(ports.get("tfjob-port") == 2222,
                             f"{rwhat}: tfjob-port is 2222 (TF_CONFIG's ps port)")


def check_kustomization(report, repo, k8s_dir):
    path = os.path.join(k8s_dir, "kustomization.yaml")
    if not report.check(os.path.isfile(path), "deploy/k8s/kustomization.yaml exists"):
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
                 "kustomization: leaves tfjob.yaml out (it needs the Kubeflow CRD)")


def component_of(labels):
    return labels.get("app.kubernetes.io/component")


def check_consistency(report, repo, k8s):
    cm = k8s.configmap("lockstep-config")
    if not report.check(cm is not None, "ConfigMap lockstep-config exists"):
        return
    try:
        cluster = json.loads(cm["data"]["cluster_spec"])
        report.ok("cluster_spec is a JSON object")
    except (KeyError, ValueError) as e:
        report.fail(f"cluster_spec does not parse: {e}")
        return
    services = {d["metadata"]["name"]: d for _, d in k8s.of_kind("Service")}
    jobs = {}
    for _, doc in k8s.of_kind("Job"):
        name = doc["metadata"]["name"]
        spec = doc["spec"]
        template = spec["template"]
        labels = template["metadata"]["labels"]
        comp = component_of(labels)
        jobs[comp] = doc
        what = f"Job/{name}"
        report.check(spec.get("completionMode") == "Indexed",
                     f"{what}: Indexed (completion index = shard / rank)")
        n = spec.get("completions")
        report.check(spec.get("parallelism") == n,
                     f"{what}: parallelism = completions = {n} (all at once)")
        report.check(template["spec"].get("restartPolicy") in ("Never", "OnFailure"),
                     f"{what}: pods end (restartPolicy Never/OnFailure)")
        report.check(isinstance(spec.get("activeDeadlineSeconds"), int),
                     f"{what}: activeDeadlineSeconds bounds its life")
        addresses = cluster.get(comp, [])
        report.check(len(addresses) == n,
                     f"{what}: {n} completions = {len(addresses)} cluster_spec.{comp} entries")
        sub = template["spec"].get("subdomain")
        svc = services.get(sub)
        if report.check(svc is not None, f"{what}: subdomain {sub} is a Service"):
            report.check(svc["spec"].get("clusterIP") == "None",
                         f"Service/{sub}: headless")
            report.check(m.labels_match(svc["spec"].get("selector"), labels),
                         f"Service/{sub}: selects the {comp} pods")
        (container,) = template["spec"]["containers"]
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        for i, addr in enumerate(addresses):
            host, _, port = addr.rpartition(":")
            report.check(host == f"{name}-{i}.{sub}",
                         f"cluster_spec.{comp}[{i}] host {host} is pod {name}-{i}.{sub}")
            if comp == "ps":
                report.check(port.isdigit() and int(port) == ports.get("grpc"),
                             f"cluster_spec.ps[{i}] port {port} is the grpc containerPort")
        for i in range(n or 0):
            env = k8s.env_for(container, index=i)
            try:
                tf = json.loads(env.get("TF_CONFIG") or "")
                report.check(tf.get("task") == {"type": comp, "index": i} and
                             tf.get("cluster") == cluster,
                             f"{what} index {i}: TF_CONFIG has cluster_spec and "
                             f"task {{type {comp}, index {i}}}")
            except ValueError as e:
                report.fail(f"{what} index {i}: TF_CONFIG is not JSON ({e}): "
                            f"{env.get('TF_CONFIG')!r}")
        # Probes hit declared ports.
        declared = set(ports.values())
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = container.get(probe)
            if p is None:
                continue
            report.check("grpc" in p and p["grpc"]["port"] in declared,
                         f"{what}: {probe} is a gRPC probe on a declared port")
        if comp == "worker":
            args = container.get("args", [])
            health = [a.split("=", 1)[1] for a in args if a.startswith("--health_port=")]
            probe_port = container.get("livenessProbe", {}).get("grpc", {}).get("port")
            report.check(health == [str(probe_port)],
                         f"{what}: --health_port {health} is the probed port {probe_port}")
            gpu = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            report.check(gpu is not None and int(gpu) >= 1,
                         f"{what}: asks for nvidia.com/gpu")
        if comp == "ps":
            report.check(ports.get("grpc") in
                         [p.get("grpc", {}).get("port") for p in
                          (container.get("readinessProbe", {}),
                           container.get("livenessProbe", {}))],
                         f"{what}: probes grpc.health.v1 on the main port")
    report.check(set(jobs) == {"ps", "worker"}, "a ps Job and a worker Job")
    for _, pdb in k8s.of_kind("PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        owners = [d for d in jobs.values()
                  if m.labels_match(sel, d["spec"]["template"]["metadata"]["labels"])]
        name = pdb["metadata"]["name"]
        if report.check(len(owners) == 1, f"PodDisruptionBudget/{name}: selects one Job's pods"):
            report.check(pdb["spec"].get("minAvailable") == owners[0]["spec"]["completions"],
                         f"PodDisruptionBudget/{name}: minAvailable = completions")
    if "ps" in jobs:
        for _, np_ in k8s.of_kind("NetworkPolicy"):
            name = np_["metadata"]["name"]
            ps_t = jobs["ps"]["spec"]["template"]
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
            worker_labels = jobs.get("worker", {}).get("spec", {}).get(
                "template", {}).get("metadata", {}).get("labels", {})
            report.check(any(m.labels_match(p.get("podSelector", {}).get("matchLabels"),
                                            worker_labels) for p in peers),
                         f"NetworkPolicy/{name}: workers reach the grpc port")
            report.check(all(p.get("podSelector", {}).get("matchLabels") for p in peers),
                         f"NetworkPolicy/{name}: no peer on the grpc port is unrestricted")


def exit_codes(repo):
    """{constant: value} of common/exit_codes.h (kExitPermanent = 2, ...)."""
    out = {}
    with open(os.path.join(repo, "common", "exit_codes.h")) as f:
        for line in f:
            match = re.match(r"inline constexpr int (kExit\w+) = (\d+);", line)
            if match:
                out[match.group(1)] = int(match.group(2))
    return out


def check_restarts(report, repo, k8s):
    """Failures are retried as docs/faults.md's exit codes say, and a
    restarted server finds its checkpoints."""
    codes = exit_codes(repo)
    if not report.check({"kExitPermanent", "kExitRetryable",
                         "kExitTerminated"} <= set(codes),
                        "common/exit_codes.h names the permanent, retryable "
                        "and SIGTERM exit codes"):
        return
    for path, owner, doc, template, rtype in k8s.pod_templates():
        where = f"{rel(repo, path)} {owner}"
        spec = template.get("spec", {})
        (container,) = spec.get("containers", [])
        component = template.get("metadata", {}).get("labels", {}).get(
            "app.kubernetes.io/component")
        restart = (spec.get("restartPolicy") if rtype is None else
                   doc["spec"]["tfReplicaSpecs"][rtype].get("restartPolicy"))
        backoff = (doc["spec"].get("backoffLimit") if rtype is None else
                   doc["spec"].get("runPolicy", {}).get("backoffLimit"))
        report.check(isinstance(backoff, int) and backoff > 0,
                     f"{where}: backoffLimit {backoff} lets a failure be retried")
        policy = doc["spec"].get("podFailurePolicy") if rtype is None else None
        if policy is not None:
            report.check(restart == "Never",
                         f"{where}: podFailurePolicy with restartPolicy Never "
                         "(Kubernetes requires it)")
            fail_codes = set()
            for rule in policy.get("rules", []):
                on = rule.get("onExitCodes")
                if rule.get("action") == "FailJob" and on:
                    report.check(on.get("containerName") == container["name"],
                                 f"{where}: FailJob rule names the container")
                    if on.get("operator") == "In":
                        fail_codes |= set(on.get("values", []))
            report.check(codes["kExitPermanent"] in fail_codes,
                         f"{where}: exit {codes['kExitPermanent']} (permanent) "
                         "fails the job")
            report.check(not fail_codes & {codes["kExitRetryable"],
                                          codes["kExitTerminated"]},
                         f"{where}: exits {codes['kExitRetryable']} and "
                         f"{codes['kExitTerminated']} are retried")
        elif component == "worker":
            report.check(restart == "OnFailure",
                         f"{where}: a failed worker is restarted (OnFailure)")
        if component != "ps":
            continue
        # The server's --checkpoint_dir is a writable volume that a restart
        # keeps: an emptyDir only with restartPolicy OnFailure (a new pod
        # gets a new, empty one).
        args = list(container.get("args", []))
        files = k8s.flagfiles(spec, container)
        for arg in list(args):
            if arg.startswith("--flagfile="):
                for p in arg.split("=", 1)[1].split(","):
                    args += m.flagfile_args(files.get(p, ""))
        dirs = [a.split("=", 1)[1] for a in args
                if a.startswith("--checkpoint_dir=")]
        if not report.check(len(dirs) == 1,
                            f"{where}: the server keeps checkpoints "
                            f"(--checkpoint_dir: {dirs})"):
            continue
        mounts = [mnt for mnt in container.get("volumeMounts", [])
                  if (dirs[0] + "/").startswith(mnt["mountPath"].rstrip("/") + "/")]
        if not report.check(len(mounts) == 1 and not mounts[0].get("readOnly"),
                            f"{where}: {dirs[0]} is on a writable volume"):
            continue
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        volume = volumes.get(mounts[0]["name"], {})
        report.check("emptyDir" not in volume or restart == "OnFailure",
                     f"{where}: its checkpoints outlive a restart ("
                     f"{'emptyDir' if 'emptyDir' in volume else 'volume'}, "
                     f"restartPolicy {restart})")


def check_flags_and_env(report, repo, k8s, bins):
    docker_dir = os.path.join(repo, "deploy", "docker")
    accepted = {}

    def flags_of(binary):
        if binary not in accepted:
            accepted[binary] = m.accepted_flags(bins[binary])
        return accepted[binary]

    coming_used = set()

    def check_arg(where, binary, arg):
        name = m.flag_name(arg)
        if name is None:
            report.fail(f"{where}: {arg!r} is not a --flag")
            return
        if m.flag_known(name, flags_of(binary)):
            report.ok(f"{where}: {binary} takes --{name}")
        elif name in m.COMING_FLAGS.get(binary, {}):
            coming_used.add((binary, name))
            report.ok(f"{where}: --{name} allowed: coming in "
                      f"{m.COMING_FLAGS[binary][name]}")
        else:
            report.fail(f"{where}: {binary} has no flag --{name}")

    for path, owner, _, template, _ in k8s.pod_templates():
        spec = template.get("spec", {})
        for c in spec.get("containers", []):
            where = f"{rel(repo, path)} {owner} container {c['name']}"
            binary, entry_args = m.container_binary(c, docker_dir)
            if not report.check(binary in bins, f"{where}: runs {binary}"):
                continue
            files = k8s.flagfiles(spec, c)
            for arg in list(entry_args) + list(c.get("args", [])):
                check_arg(where, binary, arg)
                if arg.startswith("--flagfile="):
                    for p in arg.split("=", 1)[1].split(","):
                        if not report.check(p in files,
                                            f"{where}: flag file {p} is a mounted ConfigMap key"):
                            continue
                        for farg in m.flagfile_args(files[p]):
                            check_arg(f"{where} {p}", binary, farg)
            env = c.get("env", [])
            names = [e["name"] for e in env]
            texts = [e.get("value", "") for e in env] + list(c.get("args", []))
            for n in names:
                used = n in m.BINARY_ENV or any(f"$({n})" in t for t in texts)
                report.check(used, f"{where}: env {n} is read by {binary} "
                                   "or feeds one that is")
    for name in sorted(os.listdir(docker_dir)):
        if not name.startswith("Dockerfile."):
            continue
        info = m.parse_dockerfile(os.path.join(docker_dir, name))
        if not info["entrypoint"]:
            continue
        binary = os.path.basename(info["entrypoint"][0])
        if binary not in bins:
            continue
        for arg in info["entrypoint"][1:] + (info["cmd"] or []):
            check_arg(f"deploy/docker/{name} ENTRYPOINT/CMD", binary, arg)
    for binary, flags in sorted(m.COMING_FLAGS.items()):
        if binary not in bins:
            continue
        for flag in sorted(flags):
            if flag in flags_of(binary):
                report.note(f"{binary} now accepts --{flag}: drop it from "
                            "COMING_FLAGS in tests/deploy/manifests.py")


# install_deps.sh packages an image's builder does without: tests, test
# tooling and data (the worker image adds the data set itself).
NOT_FOR_BUILDERS = {
    "libgtest-dev", "libgmock-dev",      # LOCKSTEP_BUILD_TESTS=OFF
    "dataset-fashion-mnist",             # data, not a build input
    "python3-venv", "python3-yaml",      # tests/deploy tooling
    "iproute2",                          # tests/deploy/netns_job_test.sh
    "openssl",                           # deploy/tls/make_certs.sh (tests)
    "python3-matplotlib",                # lockstep_bench study's plots
    # The Python package (worker/python), which the images do not carry
    # yet: without these CMake leaves it out (LOCKSTEP_PYTHON=AUTO).
    "python3-dev", "pybind11-dev", "python3-numpy",
}


def check_dockerfiles(report, repo):
    docker_dir = os.path.join(repo, "deploy", "docker")
    targets = m.cmake_executables(repo)
    subdirs = [d for d in m.top_level_subdirs(repo) if d != "tests"]
    names = sorted(n for n in os.listdir(docker_dir) if n.startswith("Dockerfile."))
    report.check({"Dockerfile.server", "Dockerfile.worker"} <= set(names),
                 "deploy/docker has Dockerfile.server and Dockerfile.worker")
    for name in names:
        where = f"deploy/docker/{name}"
        info = m.parse_dockerfile(os.path.join(docker_dir, name))
        report.check(len(info["stages"]) >= 2, f"{where}: multi-stage")
        context_copies = []
        for cp in info["copies"]:
            if cp["from"] is None:
                for src in cp["sources"]:
                    context_copies.append(src.rstrip("/"))
                    report.check(os.path.exists(os.path.join(repo, src)),
                                 f"{where}: COPY source {src} exists in the repository")
            else:
                report.check(cp["from"] in info["stages"][:cp["stage"]],
                             f"{where}: COPY --from={cp['from']} is an earlier stage")
        for d in subdirs:
            report.check(any(d == s or d.startswith(s + "/") for s in context_copies),
                         f"{where}: copies {d}/ (a top-level add_subdirectory)")
        report.check("CMakeLists.txt" in context_copies,
                     f"{where}: copies the top-level CMakeLists.txt")
        needed = m.install_deps_packages(repo) - NOT_FOR_BUILDERS
        builder = info["apt"].get("build", set())
        report.check(bool(needed) and needed <= builder,
                     f"{where}: the build stage installs install_deps.sh's build "
                     f"packages (missing: {sorted(needed - builder) or 'none'})")
        for t in info["targets"]:
            report.check(t in targets, f"{where}: builds {t}, a CMake executable target")
        entry = info["entrypoint"] or []
        if report.check(bool(entry), f"{where}: has an exec-form ENTRYPOINT"):
            binary = os.path.basename(entry[0])
            report.check(binary in targets,
                         f"{where}: ENTRYPOINT runs {binary}, a CMake executable target")
            report.check(binary in info["targets"],
                         f"{where}: builds the {binary} it runs")
            final_copies = [cp for cp in info["copies"]
                            if cp["stage"] == len(info["stages"]) - 1]
            report.check(any(cp["dest"] == entry[0] and cp["from"] is not None and
                             any(s.endswith("/" + binary) for s in cp["sources"])
                             for cp in final_copies),
                         f"{where}: the final stage copies {binary} to {entry[0]} "
                         "from the builder")
        user = (info["user"] or "").split(":")[0]
        report.check(user not in ("", "0", "root"),
                     f"{where}: final stage runs as a non-root USER ({info['user']})")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--server", required=True, help="lockstep_server binary")
    parser.add_argument("--worker", required=True, help="lockstep_worker binary")
    parser.add_argument("--k8s-versions", default="1.29.0",
                        help="comma-separated Kubernetes versions")
    parser.add_argument("--quiet", action="store_true", help="print failures only")
    args = parser.parse_args()
    repo = os.path.abspath(args.repo)
    versions = [v for v in args.k8s_versions.split(",") if v]
    bins = {"lockstep_server": args.server, "lockstep_worker": args.worker}
    for b, p in bins.items():
        if not os.access(p, os.X_OK):
            print(f"FAIL  {b} not found at {p} (build it first)")
            return 1
    report = Report()
    if args.quiet:
        report.ok = lambda what: setattr(report, "passes", report.passes + 1)
    k8s_dir = os.path.join(repo, "deploy", "k8s")
    k8s = m.Manifests(k8s_dir)
    check_schemas(report, repo, k8s, versions)
    for path, doc in k8s.of_kind("TFJob"):
        check_tfjob(report, repo, path, doc, versions)
    report.check(len(k8s.of_kind("TFJob")) == 1, "deploy/k8s has one TFJob example")
    check_kustomization(report, repo, k8s_dir)
    check_consistency(report, repo, k8s)
    check_restarts(report, repo, k8s)
    check_flags_and_env(report, repo, k8s, bins)
    check_dockerfiles(report, repo)
    print(f"validate_manifests: {report.passes} passed, {report.failures} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
