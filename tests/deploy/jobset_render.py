"""The pods a JobSet creates, as Kubernetes would start them.

A JobSet (deploy/k8s/jobset/jobset.yaml), or a Kubeflow Trainer runtime
with a TrainJob applied to it (deploy/k8s/trainer/), becomes a list of
Pod records: the pod's host name and subdomain, its labels and
annotations as JobSet and the Job controller set them, and each
container's image, command, args and environment with fieldRef values and
$(VAR) references resolved the way the kubelet resolves them. The
validation checks what these pods would see (TF_CONFIG names exactly these
pods); tests/deploy/docker_job_test.sh runs them as containers.

Trainer v2's rules applied to a runtime (PlainML and Torch policies):
  - the JobSet is named like the TrainJob and lives in its namespace;
  - numNodes (the TrainJob's, else mlPolicy's) sets parallelism and
    completions of the replicated job whose template carries
    trainer.kubeflow.org/trainjob-ancestor-step: trainer;
  - trainer.image, command, args, env and resourcesPerNode apply to that
    job's container named "node" (env merged by name);
  - with mlPolicy.torch, that container also gets torchrun's variables
    after its own (so no $(VAR) of the runtime can name them): PET_NNODES,
    PET_NPROC_PER_NODE, PET_NODE_RANK (the completion index),
    PET_MASTER_ADDR and PET_MASTER_PORT, and the port 29400.
The kubelet expands $(VAR) in args and command from the container's env.

Command line: print the pods of a JobSet or runtime+TrainJob as JSON.
    jobset_render.py FILE [--trainjob FILE] [--name NAME]
"""

import argparse
import copy
import json
import math
import re
import sys

import yaml

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_CONTAINER = "node"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")

_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_FIELD_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


class RenderError(ValueError):
    """A manifest that does not describe pods this module can render."""


def load(path):
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    if len(docs) != 1:
        raise RenderError(f"{path}: expected one document, found {len(docs)}")
    return docs[0]


def trainer_job_name(spec):
    """The replicated job Trainer treats as the trainer step."""
    for rj in spec.get("replicatedJobs", []):
        labels = rj.get("template", {}).get("metadata", {}).get("labels", {})
        if labels.get(ANCESTOR_LABEL) == "trainer":
            return rj["name"]
    raise RenderError(f"no replicated job is labelled {ANCESTOR_LABEL}: trainer")


def _merge_env(base, extra):
    out = [e for e in base if e["name"] not in {x["name"] for x in extra}]
    return out + list(extra)


TORCH_PORT = 29400  # Trainer's constants.ContainerTrainerPort
TRAINER_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
               "PET_MASTER_ADDR", "PET_MASTER_PORT")


def _cpu_count(quantity):
    """A CPU quantity rounded up to whole CPUs (resource.Quantity.Value)."""
    text = str(quantity)
    if text.endswith("m"):
        return -(-int(text[:-1]) // 1000)
    return int(math.ceil(float(text)))


def _proc_per_node(policy, trainer):
    """PET_NPROC_PER_NODE as Trainer's torch plugin computes it: the
    TrainJob's numProcPerNode, else the policy's, else auto; with
    resourcesPerNode, auto (no GPU asked) and cpu become the CPU count of
    the limits, else of the requests (a missing one counts as 1)."""
    value = trainer.get("numProcPerNode", policy.get("numProcPerNode", "auto"))
    resources = trainer.get("resourcesPerNode")
    if resources is None:
        return str(value)
    if value == "auto":
        fallback = "auto"
        use_cpu = lambda res: not any("gpu" in k.lower() for k in res)
    elif value == "cpu":
        fallback = 1
        use_cpu = lambda res: "cpu" in res
    else:
        fallback = value
        use_cpu = lambda res: False

    def calculate(res):
        if res is None:
            return 1, False
        if use_cpu(res):
            return max(1, _cpu_count(res.get("cpu", 1))), True
        return fallback, False

    count, used = calculate(resources.get("limits"))
    if not used:
        count, _ = calculate(resources.get("requests"))
    return str(count)


def _torch_env(container, name, num_nodes, policy, trainer):
    env = [e for e in container.get("env", []) if e["name"] not in TRAINER_ENV]
    env += [{"name": "PET_NNODES", "value": str(num_nodes)},
            {"name": "PET_NPROC_PER_NODE",
             "value": _proc_per_node(policy, trainer)},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['"
                             f"{COMPLETION_INDEX_ANNOTATION}']"}}},
            {"name": "PET_MASTER_ADDR",
             "value": f"{name}-{TRAINER_CONTAINER}-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(TORCH_PORT)}]
    container["env"] = env
    ports = container.setdefault("ports", [])
    if all(p.get("containerPort") != TORCH_PORT for p in ports):
        ports.append({"containerPort": TORCH_PORT})


def apply_trainjob(runtime, trainjob, num_nodes=None):
    """(JobSet name, JobSet spec) Trainer would create for trainjob (or
    for none, with num_nodes given or mlPolicy's)."""
    return _apply(runtime, trainjob, num_nodes)


def _apply(runtime, trainjob, forced_nodes):
    """(JobSet name, JobSet spec) Trainer would create for trainjob."""
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    num_nodes = runtime["spec"].get("mlPolicy", {}).get("numNodes", 1)
    trainer = (trainjob or {}).get("spec", {}).get("trainer", {})
    num_nodes = forced_nodes or trainer.get("numNodes", num_nodes)
    policy = runtime["spec"].get("mlPolicy", {})
    name = (trainjob or {}).get("metadata", {}).get("name", "trainjob")
    node = trainer_job_name(spec)
    for rj in spec["replicatedJobs"]:
        if rj["name"] != node:
            continue
        job = rj["template"]["spec"]
        job["parallelism"] = job["completions"] = num_nodes
        containers = job["template"]["spec"]["containers"]
        named = [c for c in containers if c["name"] == TRAINER_CONTAINER]
        if not named:
            raise RenderError(f"replicated job {node} has no container "
                              f"named {TRAINER_CONTAINER}")
        c = named[0]
        for key in ("image", "command", "args"):
            if key in trainer:
                c[key] = list(trainer[key]) if key != "image" else trainer[key]
        if "env" in trainer:
            c["env"] = _merge_env(c.get("env", []), trainer["env"])
        if "resourcesPerNode" in trainer:
            c["resources"] = trainer["resourcesPerNode"]
        if "torch" in policy:
            _torch_env(c, name, num_nodes, policy["torch"], trainer)
    return name, spec


POD_IP = "127.0.0.1"  # status.podIP: the containers share the host's loopback


def _field_value(ref, labels, annotations):
    if ref.get("fieldPath") == "status.podIP":
        return POD_IP
    match = _FIELD_REF.match(ref.get("fieldPath", ""))
    if not match:
        raise RenderError(f"fieldRef {ref.get('fieldPath')!r} is not a label "
                          "or annotation this renderer knows")
    source = labels if match.group(1) == "labels" else annotations
    key = match.group(2)
    if key not in source:
        raise RenderError(f"fieldRef {ref['fieldPath']}: the pod has no such "
                          f"{match.group(1)[:-1]} (it has {sorted(source)})")
    return source[key]


def resolve_env(container, labels, annotations, outside=None):
    """{name: value} as the kubelet sets it: $(VAR) expands to a variable
    defined earlier in the list; an unknown reference stays as written.
    outside resolves configMapKeyRef/secretKeyRef (else RenderError)."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = _VAR_REF.sub(
                lambda m: env.get(m.group(1), m.group(0)), e["value"])
            continue
        source = e.get("valueFrom", {})
        if "fieldRef" in source:
            env[e["name"]] = _field_value(source["fieldRef"], labels, annotations)
        elif outside is not None:
            env[e["name"]] = outside(e)
        else:
            raise RenderError(f"env {e['name']}: valueFrom {sorted(source)} "
                              "needs objects outside the manifest")
    return env


def expand(words, env):
    """args or command with $(VAR) of env expanded, as the kubelet does."""
    if words is None:
        return None
    return [_VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), w)
            for w in words]


def pods(name, spec, namespace="default"):
    """Every pod of JobSet name with spec, in replicated-job order."""
    network = spec.get("network", {})
    subdomain = network.get("subdomain", name)
    hostnames = network.get("enableDNSHostnames", False)
    out = []
    for rj in spec.get("replicatedJobs", []):
        job = rj["template"]["spec"]
        for j in range(rj.get("replicas", 1)):
            for p in range(job.get("completions", job.get("parallelism", 1))):
                template = job["template"]
                labels = dict(template.get("metadata", {}).get("labels", {}))
                labels.update({JOBSET_NAME_LABEL: name,
                               REPLICATED_JOB_LABEL: rj["name"],
                               JOB_INDEX_LABEL: str(j)})
                annotations = dict(template.get("metadata", {}).get(
                    "annotations", {}))
                if job.get("completionMode") == "Indexed":
                    annotations[COMPLETION_INDEX_ANNOTATION] = str(p)
                host = f"{name}-{rj['name']}-{j}-{p}"
                containers = []
                for c in template["spec"]["containers"]:
                    env = resolve_env(c, labels, annotations)
                    containers.append({
                        "name": c["name"], "image": c.get("image"),
                        "command": expand(c.get("command"), env),
                        "args": expand(c.get("args", []), env),
                        "env": env,
                        "ports": c.get("ports", []),
                        "volumeMounts": c.get("volumeMounts", [])})
                out.append({"replicatedJob": rj["name"], "jobIndex": j,
                            "podIndex": p, "hostname": host,
                            "subdomain": subdomain if hostnames else None,
                            "fqdn": f"{host}.{subdomain}" if hostnames else None,
                            "namespace": namespace, "labels": labels,
                            "annotations": annotations,
                            "volumes": template["spec"].get("volumes", []),
                            "containers": containers})
    return out


def render(path, trainjob_path=None, name=None, num_nodes=None):
    """The pods of a JobSet file, or of a runtime file with a TrainJob (of
    num_nodes nodes when given)."""
    doc = load(path)
    kind = doc.get("kind")
    if kind == "JobSet":
        return pods(name or doc["metadata"]["name"], doc["spec"],
                    doc["metadata"].get("namespace", "default"))
    if kind in RUNTIME_KINDS:
        trainjob = load(trainjob_path) if trainjob_path else None
        job_name, spec = apply_trainjob(doc, trainjob, num_nodes)
        return pods(name or job_name, spec)
    raise RenderError(f"{path}: a {kind} is neither a JobSet nor a runtime")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a JobSet or a (Cluster)TrainingRuntime")
    parser.add_argument("--trainjob", help="a TrainJob to apply to a runtime")
    parser.add_argument("--name", help="the JobSet's name (default: its own, "
                        "or the TrainJob's)")
    parser.add_argument("--num-nodes", type=int, help="the TrainJob's numNodes "
                        "instead of its own")
    args = parser.parse_args()
    try:
        print(json.dumps(render(args.file, args.trainjob, args.name,
                                args.num_nodes), indent=1))
    except (RenderError, KeyError, OSError) as e:
        print(f"jobset_render: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
