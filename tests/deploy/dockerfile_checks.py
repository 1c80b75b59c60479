"""deploy/docker's Dockerfiles build what the manifests run.

Per image (manifests.IMAGE_DOCKERFILES: lockstep-server, -worker and
-python are targets of deploy/docker/Dockerfile, lockstep-worker-cuda is
Dockerfile.worker-cuda): the ENTRYPOINT program is built in the build
stage (cmake --target) and copied to the entrypoint path, or, for the
Python image, installed with the package and examples it runs; the final
stage runs as a non-root USER. Per file: the build stage is FROM
${BASE_IMAGE} (default lockstep-base:bookworm) and installs
install_deps.sh's build packages; no `# syntax=` line (BuildKit would fetch
that frontend from a registry); every context COPY source exists and every
top-level add_subdirectory() is copied. Every image a manifest names has
its Dockerfile target.
"""

import os
import re

import flag_checks
import dockerfiles as df
import kustomize
import manifests as m

BASE_IMAGE = "lockstep-base:bookworm"
# Images a Dockerfile may start a stage from besides ${BASE_IMAGE} and its
# own earlier stages: the CUDA worker's toolkit and runtime come from NVIDIA.
OTHER_BASES = {"Dockerfile.worker-cuda": ("nvidia/cuda:",)}

# install_deps.sh packages an image's builder does without: tests, test
# tooling and data (the worker image adds the data set itself).
NOT_FOR_BUILDERS = {
    "libgtest-dev", "libgmock-dev",      # LOCKSTEP_BUILD_TESTS=OFF
    "dataset-fashion-mnist",             # data, not a build input
    "python3-venv", "python3-yaml",      # tests/deploy tooling
    "iproute2",                          # tests/deploy/netns_job_test.sh
    "openssl",                           # deploy/tls/make_certs.sh (tests)
    "python3-matplotlib",                # lockstep_bench study's plots
    # The Python package (worker/python): the python-build stage installs
    # these on top of the build stage.
    "python3-dev", "pybind11-dev", "python3-numpy",
}


def cmake_targets(repo):
    """Executables, libraries and Python modules the CMakeLists.txt define."""
    names = set()
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if not d.startswith(("build", "."))]
        if "CMakeLists.txt" in files:
            with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
                names.update(re.findall(
                    r"(?:add_executable|add_library|pybind11_add_module)\(\s*"
                    r"([A-Za-z0-9_]+)", f.read()))
    return names


def _file_checks(report, repo, name, args, stages):
    where = f"deploy/docker/{name}"
    with open(os.path.join(repo, "deploy", "docker", name), encoding="utf-8") as f:
        text = f.read()
    report.check(not re.search(r"^#\s*syntax\s*=", text, re.M | re.I),
                 f"{where}: no `# syntax=` line (BuildKit would fetch it)")
    report.check(args.get("BASE_IMAGE") == BASE_IMAGE,
                 f"{where}: ARG BASE_IMAGE defaults to {BASE_IMAGE} "
                 f"(got {args.get('BASE_IMAGE')})")
    for i, st in enumerate(stages):
        # scratch: a stage that flattens an earlier one (COPY --from=S /).
        report.check(st["base"] == "${BASE_IMAGE}" or
                     st["base"] in [x["name"] for x in stages[:i]] or
                     (st["base"] == "scratch" and
                      any(cp["dest"] == "/" and cp["from"] for cp in st["copies"])) or
                     st["base"].startswith(OTHER_BASES.get(name, ())),
                     f"{where}: stage {st['name'] or i} is FROM ${{BASE_IMAGE}}, "
                     f"an earlier stage, scratch laid over with one, or "
                     f"{OTHER_BASES.get(name, 'nothing else')} "
                     f"(got {st['base']})")
    build = next((st for st in stages if st["name"] == "build"), None)
    if not report.check(build is not None and build["base"] == "${BASE_IMAGE}",
                        f"{where}: a build stage FROM ${{BASE_IMAGE}}"):
        return
    needed = m.install_deps_packages(repo) - NOT_FOR_BUILDERS
    report.check(bool(needed) and needed <= build["apt"],
                 f"{where}: the build stage installs install_deps.sh's build "
                 f"packages (missing: {sorted(needed - build['apt']) or 'none'})")
    targets = cmake_targets(repo)
    for st in stages:
        for t in st["targets"]:
            report.check(t in targets, f"{where}: stage {st['name']} builds {t}, "
                         "a CMake target")


def _copy_checks(report, repo, name, stages):
    where = f"deploy/docker/{name}"
    names = [st["name"] for st in stages]
    context = []
    for i, st in enumerate(stages):
        for cp in st["copies"]:
            if cp["from"] is None:
                context += [s.rstrip("/") for s in cp["sources"]]
                for src in cp["sources"]:
                    report.check(os.path.exists(os.path.join(repo, src)),
                                 f"{where}: COPY source {src} exists in the repository")
            else:
                report.check(cp["from"] in names[:i],
                             f"{where}: COPY --from={cp['from']} is an earlier stage")
    for d in [d for d in m.top_level_subdirs(repo) if d != "tests"] + ["CMakeLists.txt"]:
        report.check(any(d == s or d.startswith(s + "/") for s in context),
                     f"{where}: copies {d} (the top-level CMake configure reads it)")


def _stage_chain(stages, stage):
    out = []
    while stage is not None:
        out.append(stage)
        stage = stage["parent"]
    return out


def _built_and_copied(report, where, stages, copies, entry):
    binary = os.path.basename(entry[0])
    built = [st["name"] for st in stages if binary in st["targets"]]
    report.check(any(cp["dest"] == entry[0] and cp["from"] in built and
                     any(s.endswith("/" + binary) for s in cp["sources"])
                     for cp in copies),
                 f"{where}: {binary} is built (cmake --target in {built}) "
                 f"and copied to {entry[0]}")


def _python_entry(report, where, stages, chain, copies, binary):
    # A stage whose whole tree is laid over the image ("COPY --from=S /"),
    # python_closure.sh's or a flattened one's, brings what S installed and
    # what was laid over S in turn.
    seen, todo = list(chain), list(copies)
    while todo:
        cp = todo.pop()
        if cp["dest"] != "/":
            continue
        for st in stages:
            if st["name"] == cp["from"]:
                for laid in _stage_chain(stages, st):
                    if laid not in seen:
                        seen.append(laid)
                        todo += laid["copies"]
    apt = set().union(*(st["apt"] for st in seen))
    copies = [cp for st in seen for cp in st["copies"]]
    report.check(binary in apt, f"{where}: its ENTRYPOINT {binary} is a Debian "
                 "package it installs (or lays over it from a stage)")
    examples = flag_checks.PYTHON_EXAMPLES[0]
    report.check(any(cp["dest"] == examples and cp["from"] for cp in copies),
                 f"{where}: copies the examples to {examples}")


def _image_checks(report, repo, image, name, target, stages):
    where = f"deploy/docker/{name} target {target or '(final)'} ({image})"
    stage = stages[-1] if target is None else next(
        (st for st in stages if st["name"] == target), None)
    if not report.check(stage is not None, f"{where}: the stage exists"):
        return
    user = (df.inherited(stage, "user") or "").split(":")[0]
    report.check(user not in ("", "0", "root"), f"{where}: runs as a non-root USER ({user})")
    entry = df.inherited(stage, "entrypoint") or []
    if not report.check(bool(entry), f"{where}: has an exec-form ENTRYPOINT"):
        return
    chain = _stage_chain(stages, stage)
    copies = [cp for st in chain for cp in st["copies"]]
    if os.path.basename(entry[0]) in m.cmake_executables(repo):
        _built_and_copied(report, where, stages, copies, entry)
    else:
        _python_entry(report, where, stages, chain, copies,
                      os.path.basename(entry[0]))


def project_version(repo):
    """VERSION of CMakeLists.txt's project(), the images' tag."""
    with open(os.path.join(repo, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(\s*\w+\s+VERSION\s+([0-9.]+)", f.read())
    return match.group(1) if match else None


def manifest_images(repo):
    """Every image name a manifest under deploy/k8s gives."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("image"), str):
                found.add(node["image"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    for path in m.k8s_files(os.path.join(repo, "deploy", "k8s")):
        for doc in m.load_docs(path):
            walk(doc)
    for _, doc in kustomize.rendered(repo):
        walk(doc)
    return found


def check_dockerfiles(report, repo):
    docker_dir = os.path.join(repo, "deploy", "docker")
    files = sorted({name for name, _ in df.IMAGE_DOCKERFILES.values()})
    parsed = {}
    for name in files:
        path = os.path.join(docker_dir, name)
        if not report.check(os.path.isfile(path), f"deploy/docker/{name} exists"):
            continue
        parsed[name] = df.dockerfile_stages(path)
        _file_checks(report, repo, name, *parsed[name])
        _copy_checks(report, repo, name, parsed[name][1])
    for image, (name, target) in sorted(df.IMAGE_DOCKERFILES.items()):
        if name in parsed:
            _image_checks(report, repo, image, name, target, parsed[name][1])
    images = manifest_images(repo)
    version = project_version(repo)
    for image in sorted(images):
        report.check(df.image_name(image) in df.IMAGE_DOCKERFILES,
                     f"image {image} (named in deploy/k8s) has a Dockerfile "
                     "target in deploy/docker")
        report.check(image.rsplit("/", 1)[-1].endswith(f":{version}"),
                     f"image {image} is pinned to the project's version "
                     f"{version} (CMakeLists.txt), not latest: a node never "
                     "runs a stale image kept under the same tag")
    report.check(len(images) >= 3, f"deploy/k8s names images ({sorted(images)})")
