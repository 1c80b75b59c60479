#!/usr/bin/env python3
"""The source tree's layout rules (docs/architecture.md), checked in a blink:

- no source file over 400 lines;
- a folder of common/ includes only itself and the folders its CMakeLists.txt
  names on its "May depend on:" line;
- no file names the folder outside the repository that the design documents
  came from.

Prints each violation and exits 1; exits 0 with a count of what it checked.
  tests/lint/layout.py [REPO]
"""
import os
import re
import subprocess
import sys

MAX_LINES = 400
SOURCES = (".h", ".cc", ".cu", ".cuh", ".inc", ".py", ".sh", ".proto")
INCLUDE = re.compile(r'^#include "common/([a-z_]+)/', re.M)


def tracked(repo):
    out = subprocess.run(["git", "-C", repo, "ls-files", "-z"],
                         capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def allowed_folders(cmake_text, folders):
    """The common/ folders named on the "May depend on:" line(s)."""
    match = re.search(r"^# May depend on:(.*?)(?=\n[^#]|\Z)", cmake_text,
                      re.M | re.S)
    if not match:
        return None
    named = re.findall(r"\b([a-z_]+)/", match.group(1))
    return {n for n in named if n in folders}


def main(argv):
    repo = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    files = tracked(repo)
    problems = []
    outside = ".." + "/" + "shared"
    for path in files:
        full = os.path.join(repo, path)
        if not os.path.isfile(full):
            continue
        try:
            text = open(full, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        if path.endswith(SOURCES) and text.count("\n") > MAX_LINES:
            problems.append(f"{path}: {text.count(chr(10))} lines "
                            f"(at most {MAX_LINES})")
        if outside in text:
            problems.append(f"{path}: names {outside}")
    common = os.path.join(repo, "common")
    folders = {d for d in os.listdir(common)
               if os.path.isdir(os.path.join(common, d))}
    loose = [f for f in os.listdir(common)
             if os.path.isfile(os.path.join(common, f))
             and f != "CMakeLists.txt"]
    problems += [f"common/{f}: outside every folder of common/" for f in loose]
    for folder in sorted(folders):
        cmake = os.path.join(common, folder, "CMakeLists.txt")
        allowed = allowed_folders(open(cmake).read(), folders) if \
            os.path.exists(cmake) else None
        if allowed is None:
            problems.append(f"common/{folder}/CMakeLists.txt: no "
                            "\"# May depend on:\" line")
            continue
        for name in sorted(os.listdir(os.path.join(common, folder))):
            if not name.endswith((".h", ".cc", ".inc")):
                continue
            text = open(os.path.join(common, folder, name)).read()
            for used in sorted(set(INCLUDE.findall(text))):
                if used != folder and used not in allowed:
                    problems.append(
                        f"common/{folder}/{name}: includes common/{used}/, "
                        f"which common/{folder}/ may not depend on")
    for p in problems:
        print(p)
    print(f"layout: {len(files)} files, {len(folders)} folders of common/; "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
