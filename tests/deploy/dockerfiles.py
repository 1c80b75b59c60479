"""Reads deploy/docker's Dockerfiles the way Docker would: instructions
with continuations joined, per stage its base, copies, CMake targets
built, apt packages, and ENTRYPOINT/CMD/USER (inherited from the stage it
is FROM); and which Dockerfile target builds each lockstep image.
"""

import json
import os
import re
import shlex


def dockerfile_instructions(path):
    """(INSTRUCTION, rest) pairs with continuations joined, comments dropped."""
    out = []
    pending = ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if pending and line.lstrip().startswith("#"):
                continue  # comment lines inside a continuation are dropped
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            parts = line.strip().split(None, 1)
            out.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
    return out


def exec_form(rest):
    """The argv of an exec-form ENTRYPOINT/CMD, or a shell-split shell form."""
    rest = rest.strip()
    if rest.startswith("["):
        return json.loads(rest)
    return shlex.split(rest)


def _new_stage(rest, stages):
    words = rest.split()
    name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
    parent = next((st for st in stages if st["name"] == words[0]), None)
    return {"name": name, "base": words[0] if words else "",
            "parent": parent, "copies": [], "targets": [], "apt": set(),
            "entrypoint": None, "cmd": None, "user": None}


def _copy(rest, index):
    words = shlex.split(rest)
    paths = [w for w in words if not w.startswith("--")]
    froms = [w.split("=", 1)[1] for w in words if w.startswith("--from=")]
    return {"from": froms[-1] if froms else None, "sources": paths[:-1],
            "dest": paths[-1], "stage": index}


def _stage_instruction(stage, instr, rest, index):
    if instr == "COPY":
        stage["copies"].append(_copy(rest, index))
    elif instr == "RUN":
        stage["targets"] += re.findall(r"--target[ =]+((?:[A-Za-z0-9_]+[ ]*)+)",
                                       rest)
        for cmd in re.split(r"&&|;", rest):
            words = cmd.split()
            if words[:2] == ["apt-get", "install"]:
                stage["apt"].update(w for w in words[2:] if not w.startswith("-"))
    elif instr in ("ENTRYPOINT", "CMD"):
        stage[instr.lower()] = exec_form(rest)
        if instr == "ENTRYPOINT":
            stage["cmd"] = None  # a new ENTRYPOINT resets an inherited CMD
    elif instr == "USER":
        stage["user"] = rest.strip()


def dockerfile_stages(path):
    """({ARG: default} before the first FROM, [stage]) of a Dockerfile. A
    stage: name, base, parent (the stage it is FROM, or None), copies,
    targets (CMake targets built), apt (packages installed), entrypoint,
    cmd and user as set in that stage itself."""
    args, stages = {}, []
    for instr, rest in dockerfile_instructions(path):
        if instr == "FROM":
            stages.append(_new_stage(rest, stages))
        elif instr == "ARG" and not stages:
            key, _, default = rest.strip().partition("=")
            args[key] = default
        elif stages:
            _stage_instruction(stages[-1], instr, rest, len(stages) - 1)
    for st in stages:
        st["targets"] = [t for group in st["targets"] for t in group.split()]
    return args, stages


def inherited(stage, key):
    """A stage's USER/ENTRYPOINT/CMD, as inherited from the stage it is
    built FROM when it sets none itself."""
    while stage is not None:
        if stage[key] is not None:
            return stage[key]
        if key == "cmd" and stage["entrypoint"] is not None:
            return None
        stage = stage["parent"]
    return None


def parse_dockerfile(path, target=None):
    """The facts the checks need from one Dockerfile, for the stage named
    target (default: the final stage): entrypoint, cmd and user of that
    stage; stages (names), copies, targets and apt ({stage: packages}) of
    the whole file."""
    _, stages = dockerfile_stages(path)
    chosen = stages[-1] if target is None else next(
        (st for st in stages if st["name"] == target), None)
    if chosen is None:
        raise ValueError(f"{path} has no stage named {target}")
    apt = {}
    for st in stages:
        apt.setdefault(st["name"], set()).update(st["apt"])
    return {"stages": [st["name"] for st in stages],
            "copies": [c for st in stages for c in st["copies"]],
            "targets": [t for st in stages for t in st["targets"]],
            "apt": apt,
            "entrypoint": inherited(chosen, "entrypoint"),
            "cmd": inherited(chosen, "cmd"),
            "user": inherited(chosen, "user")}


# Image name (without registry or tag) -> (Dockerfile, target stage or None
# for the final one) in deploy/docker.
IMAGE_DOCKERFILES = {
    "lockstep-server": ("Dockerfile", "server"),
    "lockstep-worker": ("Dockerfile", "worker"),
    "lockstep-python": ("Dockerfile", "python"),
    "lockstep-worker-cuda": ("Dockerfile.worker-cuda", None),
}


def image_name(image):
    """registry/lockstep-worker:tag -> lockstep-worker."""
    return image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]


def dockerfile_for_image(docker_dir, image):
    """(deploy/docker path, target) that builds an image, or None."""
    entry = IMAGE_DOCKERFILES.get(image_name(image))
    if entry is None:
        return None
    path = os.path.join(docker_dir, entry[0])
    return (path, entry[1]) if os.path.isfile(path) else None
