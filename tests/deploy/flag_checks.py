"""Every flag and environment variable a container gets is one its program
reads.

Flags: every argument of every container (the legacy Jobs and TFJob with
their flag files, the JobSet, the runtimes, each TrainJob applied to its
runtime, and the Dockerfiles' ENTRYPOINT/CMD) is a flag the binary of
that image lists in --helpfull (or is in manifests.COMING_FLAGS); a
Python container's script exists in worker/python/examples and its
arguments are options the script's argparse defines. Environment: every
variable is read by the program or feeds one that is through $(VAR).
"""

import ast
import glob
import os
import re

import dockerfiles as df
import manifests as m
from report import rel

# Image name -> the program its containers run.
IMAGE_PROGRAM = {"lockstep-server": "lockstep_server",
                 "lockstep-worker": "lockstep_worker",
                 "lockstep-worker-cuda": "lockstep_worker",
                 "lockstep-python": "python3"}
PYTHON_EXAMPLES = ("/opt/lockstep/examples", os.path.join("worker", "python", "examples"))


def python_env(repo):
    """The variables the lockstep Python package reads (env.get("X"),
    env["X"], or a helper's (env, "X"))."""
    names = set()
    for path in glob.glob(os.path.join(repo, "worker", "python", "lockstep", "*.py")):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(
                r"env(?:\.get\(|\[|, )\"([A-Z_]+)\"", f.read()))
    return names


def script_options(path):
    """The option strings of every add_argument call in a Python script."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            out.update(a.value for a in node.args if isinstance(a, ast.Constant)
                       and isinstance(a.value, str) and a.value.startswith("-"))
    return out


class FlagChecker:
    def __init__(self, report, repo, bins):
        self.report, self.repo, self.bins = report, repo, bins
        self.docker_dir = os.path.join(repo, "deploy", "docker")
        self.accepted = {}
        env_flags = m.env_flags(repo)
        self.env = {b: set(m.BINARY_ENV) |
                    {"LOCKSTEP_" + f.upper() for f in env_flags
                     if m.flag_known(f, self.flags_of(b))} for b in bins}
        self.env["python3"] = python_env(repo)

    def flags_of(self, binary):
        if binary not in self.accepted:
            self.accepted[binary] = m.accepted_flags(self.bins[binary])
        return self.accepted[binary]

    def arg(self, where, binary, arg):
        name = m.flag_name(arg)
        if name is None:
            self.report.fail(f"{where}: {arg!r} is not a --flag")
        elif m.flag_known(name, self.flags_of(binary)):
            self.report.ok(f"{where}: {binary} takes --{name}")
        elif name in m.COMING_FLAGS.get(binary, {}):
            self.report.ok(f"{where}: --{name} allowed: coming in "
                           f"{m.COMING_FLAGS[binary][name]}")
        else:
            self.report.fail(f"{where}: {binary} has no flag --{name}")

    def script(self, where, argv):
        """argv: the script's path in the image, then its arguments."""
        inside, local = PYTHON_EXAMPLES
        path = argv[0] if argv else ""
        here = os.path.join(self.repo, local, os.path.relpath(path, inside))
        if not self.report.check(path.startswith(inside + "/") and os.path.isfile(here),
                                 f"{where}: runs {path}, a script of {local}"):
            return
        options = script_options(here)
        for a in argv[1:]:
            name = a.split("=", 1)[0]
            self.report.check(name in options, f"{where}: {os.path.basename(path)}"
                              f" defines {name} (argparse)")

    def container(self, where, c, files=None):
        binary, entry_args = m.container_binary(c, self.docker_dir)
        want = IMAGE_PROGRAM.get(df.image_name(c.get("image", "")))
        if not self.report.check(binary == want and binary in self.env,
                                 f"{where}: image {c.get('image')} runs {want} "
                                 f"(the container runs {binary})"):
            return
        argv = list(entry_args) + list(c.get("args", []))
        if binary == "python3":
            self.script(where, argv)
        for a in argv if binary != "python3" else []:
            self.arg(where, binary, a)
            for p in (a.split("=", 1)[1].split(",") if a.startswith("--flagfile=") else []):
                if self.report.check(p in (files or {}),
                                     f"{where}: flag file {p} is a mounted ConfigMap key"):
                    for farg in m.flagfile_args(files[p]):
                        self.arg(f"{where} {p}", binary, farg)
        self.env_vars(where, binary, c)

    def env_vars(self, where, binary, c):
        env = c.get("env", [])
        texts = [e.get("value", "") for e in env] + list(c.get("args", []))
        for e in env:
            n = e["name"]
            if n in m.TRAINER_ONLY_ENV:
                continue  # Trainer's, in every trainer pod it makes
            used = n in self.env[binary] or any(f"$({n})" in t for t in texts)
            self.report.check(used, f"{where}: env {n} is read by {binary} "
                              "or feeds one that is")

    def dockerfiles(self):
        for image, (name, target) in sorted(df.IMAGE_DOCKERFILES.items()):
            info = df.parse_dockerfile(os.path.join(self.docker_dir, name), target)
            binary = os.path.basename((info["entrypoint"] or [""])[0])
            if binary not in self.bins:
                continue
            for a in info["entrypoint"][1:] + (info["cmd"] or []):
                self.arg(f"deploy/docker/{name} {image} ENTRYPOINT/CMD", binary, a)

    def coming(self):
        for binary, flags in sorted(m.COMING_FLAGS.items()):
            for flag in sorted(flags):
                if binary in self.bins and flag in self.flags_of(binary):
                    self.report.note(f"{binary} now accepts --{flag}: drop it from "
                                     "COMING_FLAGS in tests/deploy/manifests.py")


def check_flags_and_env(report, repo, bins, legacy, targets):
    """legacy: manifests.Manifests of deploy/k8s/legacy; targets: the
    JobSet targets of jobset_targets.py."""
    fc = FlagChecker(report, repo, bins)
    for path, owner, _, template, _ in legacy.pod_templates():
        spec = template.get("spec", {})
        for c in spec.get("containers", []):
            fc.container(f"{rel(repo, path)} {owner} container {c['name']}", c,
                         legacy.flagfiles(spec, c))
    for t in targets:
        for rj in t["spec"].get("replicatedJobs", []):
            pod = rj["template"]["spec"]["template"]["spec"]
            for c in pod.get("containers", []):
                fc.container(f"{t['what']} {rj['name']}/{c['name']}", c)
    fc.dockerfiles()
    fc.coming()
    return fc
