"""Reads deploy/k8s the way Kubernetes would, and the facts of the repository
the checks compare it with (CMake targets, install_deps.sh's packages,
exit codes, the flags a binary takes); dockerfiles.py reads deploy/docker.

Manifests indexes the legacy Indexed Jobs and TFJob (deploy/k8s/legacy);
jobset_render.py renders the JobSet and Trainer v2 manifests.

Shared by the offline checks (validate_manifests.py) and netns_job_test.sh
(through `render`, which writes what each pod would run: its binary, its
arguments with flag files materialized, and its TF_CONFIG with the
Kubernetes $(VAR) expansion done for a completion index). Needs PyYAML only.
"""

import argparse
import os
import re
import subprocess
import sys

import yaml

from dockerfiles import dockerfile_for_image, parse_dockerfile

# The environment variables the binaries read (anything else a manifest sets
# must feed another variable or an argument through $(VAR)).
BINARY_ENV = {"TF_CONFIG", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE"}
# Kubeflow Trainer's torch policy sets these too; Lockstep reads neither.
TRAINER_ONLY_ENV = {"PET_MASTER_ADDR", "PET_MASTER_PORT"}

# Flags the manifests use before the binaries have them. Each entry names
# the issue that brings the flag; the validation accepts these even when
# --helpfull does not list them, and says so. When a flag lands, the check
# prints "now accepted: drop it from COMING_FLAGS" -- then delete the line.
COMING_FLAGS = {
    "lockstep_server": {},
    "lockstep_worker": {},
}

# The plain-Kubernetes Indexed Jobs and the TFJob, under deploy/k8s.
LEGACY_DIR = os.path.join("deploy", "k8s", "legacy")

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def load_docs(path):
    """Every non-empty YAML document of a file."""
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def k8s_files(k8s_dir):
    """Every YAML file under k8s_dir (a deploy/k8s folder), sorted,
    kustomization included; not the overlays' and components' patches
    (kustomize.py builds those folders)."""
    out = []
    for root, dirs, files in os.walk(k8s_dir):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in
                   (os.path.join(k8s_dir, "overlays"),
                    os.path.join(k8s_dir, "components"))]
        for name in files:
            if name.endswith((".yaml", ".yml")):
                out.append(os.path.join(root, name))
    return sorted(out)


def kind_of(doc):
    return doc.get("kind", "")


def labels_match(selector, labels):
    """A matchLabels selector (a plain dict) against a label set."""
    return all(labels.get(k) == v for k, v in (selector or {}).items())


# ---- CMake ----------------------------------------------------------------


def cmake_executables(repo):
    """Names given to add_executable() in the repository's CMakeLists.txt."""
    names = set()
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if not d.startswith(("build", "."))]
        if "CMakeLists.txt" in files:
            with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
                names.update(re.findall(r"add_executable\(\s*([A-Za-z0-9_]+)",
                                        f.read()))
    return names


def install_deps_packages(repo):
    """The Debian packages deploy/local/install_deps.sh installs."""
    path = os.path.join(repo, "deploy", "local", "install_deps.sh")
    with open(path, encoding="utf-8") as f:
        match = re.search(r"^packages=\((.*?)^\)", f.read(), re.M | re.S)
    if not match:
        return set()
    words = re.sub(r"#.*", "", match.group(1)).split()
    return set(words)


def top_level_subdirs(repo):
    """add_subdirectory() arguments of the root CMakeLists.txt."""
    with open(os.path.join(repo, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.findall(r"^\s*add_subdirectory\(\s*([^\s)]+)", f.read(), re.M)


def exit_codes(repo):
    """{constant: value} of common/base/exit_codes.h (kExitPermanent = 2,
    ...)."""
    out = {}
    path = os.path.join(repo, "common", "base", "exit_codes.h")
    with open(path, encoding="utf-8") as f:
        for line in f:
            match = re.match(r"inline constexpr int (kExit\w+) = (\d+);", line)
            if match:
                out[match.group(1)] = int(match.group(2))
    return out


def flag_values(args, name):
    """The values of every --name=VALUE in args."""
    return [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]


def env_flags(repo):
    """The flags the binaries also read from LOCKSTEP_<NAME>
    (common/flags/env_flags.cc's list)."""
    with open(os.path.join(repo, "common", "flags", "env_flags.cc"),
              encoding="utf-8") as f:
        text = f.read()
    body = text[text.index("kAll[]"):]
    return re.findall(r'"([a-z_0-9]+)"', body[:body.index("};")])


def setting(container, name):
    """What a Lockstep binary in `container` takes for --name: the command
    line's values, else a literal LOCKSTEP_NAME value (the command line wins
    over the environment, common/flags/env_flags.h)."""
    values = flag_values(container.get("args", []), name)
    if values or f"--{name}" in container.get("args", []):
        return values or ["true"]
    var = "LOCKSTEP_" + name.upper()
    return [e["value"] for e in container.get("env", [])
            if e.get("name") == var and e.get("value")]


def volume_under(path, container, pod_spec):
    """(volumeMount, volume) of the one mount path lies under, or None."""
    mounts = [mnt for mnt in container.get("volumeMounts", [])
              if (path + "/").startswith(mnt["mountPath"].rstrip("/") + "/")]
    if len(mounts) != 1:
        return None
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    return mounts[0], volumes.get(mounts[0]["name"], {})


# ---- binaries -------------------------------------------------------------


def accepted_flags(binary):
    """Flag names listed by `binary --helpfull` (absl prints, exits 1)."""
    run = subprocess.run([binary, "--helpfull"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=30, check=False)
    text = run.stdout.decode("utf-8", "replace")
    flags = set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", text, re.M))
    if not flags:
        raise RuntimeError(f"{binary} --helpfull listed no flags:\n{text[:500]}")
    return flags


def flag_name(arg):
    """'--foo=1' -> 'foo'; None for a non-flag argument."""
    if not arg.startswith("-"):
        return None
    return arg.lstrip("-").split("=", 1)[0]


def flag_known(name, accepted):
    """absl also takes --noNAME for a boolean NAME."""
    return name in accepted or (name.startswith("no") and name[2:] in accepted)


# ---- pods -----------------------------------------------------------------


class Manifests:
    """The documents under k8s_dir (deploy/k8s/legacy), indexed for the
    checks and the renderer."""

    def __init__(self, k8s_dir):
        self.k8s_dir = k8s_dir
        self.docs = []  # (path, doc)
        for path in k8s_files(k8s_dir):
            for doc in load_docs(path):
                self.docs.append((path, doc))

    def of_kind(self, kind):
        return [(p, d) for p, d in self.docs if kind_of(d) == kind]

    def configmap(self, name):
        for _, d in self.of_kind("ConfigMap"):
            if d["metadata"]["name"] == name:
                return d
        return None

    def pod_templates(self):
        """(path, owner description, owner doc, pod template, replica type)."""
        out = []
        for path, d in self.docs:
            kind = kind_of(d)
            name = d.get("metadata", {}).get("name", "?")
            if kind in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
                out.append((path, f"{kind}/{name}", d, d["spec"]["template"], None))
            elif kind == "TFJob":
                for rtype, spec in d["spec"].get("tfReplicaSpecs", {}).items():
                    out.append((path, f"TFJob/{name} {rtype}", d,
                                spec.get("template", {}), rtype))
        return out

    def env_for(self, container, index=None):
        """The container's environment after Kubernetes' $(VAR) expansion.

        configMapKeyRef reads the ConfigMaps here; a fieldRef to the
        completion-index annotation takes `index`. Anything else unresolved
        stays None (a TFJob's TF_CONFIG, set by the operator, is absent).
        """
        env = {}
        for var in container.get("env", []):
            name = var["name"]
            if "value" in var:
                env[name] = _VAR_REF.sub(
                    lambda m: env[m.group(1)] if env.get(m.group(1)) is not None
                    else m.group(0), var["value"])
                continue
            src = var.get("valueFrom", {})
            value = None
            if "configMapKeyRef" in src:
                ref = src["configMapKeyRef"]
                cm = self.configmap(ref["name"])
                if cm is not None:
                    value = cm.get("data", {}).get(ref["key"])
            elif "fieldRef" in src:
                path = src["fieldRef"]["fieldPath"]
                if COMPLETION_INDEX_ANNOTATION in path and index is not None:
                    value = str(index)
            env[name] = value
        return env

    def flagfiles(self, pod_spec, container):
        """{mounted path: content} of every ConfigMap key the container sees."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        out = {}
        for m in container.get("volumeMounts", []):
            vol = volumes.get(m["name"], {})
            if "configMap" not in vol:
                continue
            cm = self.configmap(vol["configMap"]["name"])
            if cm is None:
                continue
            items = vol["configMap"].get("items")
            keys = ([(i["key"], i["path"]) for i in items] if items
                    else [(k, k) for k in cm.get("data", {})])
            for key, rel in keys:
                out[os.path.join(m["mountPath"], rel)] = cm["data"][key]
        return out


def flagfile_args(content):
    """The arguments of an absl flag file: one a line, '#' comments."""
    out = []
    for line in content.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def container_binary(container, docker_dir):
    """(binary name, entrypoint args) the container runs, or (None, why)."""
    if container.get("command"):
        return os.path.basename(container["command"][0]), container["command"][1:]
    found = dockerfile_for_image(docker_dir, container.get("image", ""))
    if found is None:
        return None, f"no deploy/docker Dockerfile for image {container.get('image')}"
    entry = parse_dockerfile(*found)["entrypoint"]
    if not entry:
        return None, f"{found[0]} target {found[1]} has no ENTRYPOINT"
    return os.path.basename(entry[0]), entry[1:]


# ---- render (for the network-namespace test) -------------------------------


def _left_out(pod, binary, accepted, arg):
    """True (and says so) for a COMING_FLAGS flag the binary lacks yet."""
    fname = flag_name(arg.strip())
    if (fname and not flag_known(fname, accepted)
            and fname in COMING_FLAGS.get(binary, {})):
        print(f"render: {pod}: leaving out {arg.strip()} "
              f"({binary} does not take it yet)", file=sys.stderr)
        return True
    return False


def _render_flagfile(out_dir, path, content, keep):
    """Copies a flag file under out_dir with the lines keep() accepts."""
    dest = os.path.join(out_dir, "files", path.lstrip("/"))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    kept = [line for line in content.splitlines() if keep(line)]
    with open(dest, "w", encoding="utf-8") as f:
        f.write("\n".join(kept) + "\n")
    return dest


def _render_args(out_dir, pod, binary, accepted, argv, files):
    def keep(arg):
        return not _left_out(pod, binary, accepted, arg)
    args = []
    for arg in argv:
        if arg.startswith("--flagfile="):
            local = [_render_flagfile(out_dir, p, files[p], keep)
                     for p in arg.split("=", 1)[1].split(",")]
            args.append("--flagfile=" + ",".join(local))
        elif keep(arg):
            args.append(arg)
    return args


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def render(repo, bin_dir, out_dir):
    """Writes, for every pod of the Indexed Jobs in deploy/k8s/legacy:

    out_dir/pods            one line a pod: NAME DNS_NAME BINARY
    out_dir/NAME.tf_config  its TF_CONFIG
    out_dir/NAME.args       its arguments, one a line; flag files are copied
                            to out_dir/files/... and the paths rewritten; a
                            flag from COMING_FLAGS the binary does not take
                            yet is left out (and said on stderr)
    """
    k8s = Manifests(os.path.join(repo, LEGACY_DIR))
    docker_dir = os.path.join(repo, "deploy", "docker")
    flags_cache = {}
    pods = []
    for _, owner, doc, template, rtype in k8s.pod_templates():
        if (rtype is not None or kind_of(doc) != "Job" or
                doc["spec"].get("completionMode") != "Indexed"):
            continue
        spec = template["spec"]
        (container,) = spec["containers"]
        binary, entry_args = container_binary(container, docker_dir)
        if binary is None:
            raise SystemExit(f"{owner}: {entry_args}")
        if binary not in flags_cache:
            flags_cache[binary] = accepted_flags(os.path.join(bin_dir, binary))
        argv = list(entry_args) + list(container.get("args", []))
        for i in range(doc["spec"]["completions"]):
            name = f"{doc['metadata']['name']}-{i}"
            dns = f"{name}.{spec['subdomain']}" if spec.get("subdomain") else name
            args = _render_args(out_dir, name, binary, flags_cache[binary], argv,
                                k8s.flagfiles(spec, container))
            _write(os.path.join(out_dir, name + ".tf_config"),
                   k8s.env_for(container, index=i).get("TF_CONFIG") or "")
            _write(os.path.join(out_dir, name + ".args"),
                   "".join(a + "\n" for a in args))
            pods.append(f"{name} {dns} {binary}")
    _write(os.path.join(out_dir, "pods"), "".join(p + "\n" for p in pods))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="write what each Job pod runs")
    r.add_argument("--repo", required=True)
    r.add_argument("--bin-dir", required=True)
    r.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "render":
        os.makedirs(args.out, exist_ok=True)
        render(args.repo, args.bin_dir, args.out)


if __name__ == "__main__":
    main()
