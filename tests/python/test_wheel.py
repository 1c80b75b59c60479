"""The package as a user gets it: `pip wheel ./worker/python`, the wheel
installed into a fresh venv, and 2-worker PyTorch jobs started by the
venv's own lockstep_launch from a folder outside the source tree, with no
PYTHONPATH and nothing from the build tree: SyncOptimizer's, and AdamW with
OneCycleLR through DistributedOptimizer against plain PyTorch.

ctest runs it with Debian's python3 (whose torch the venv sees through
--system-site-packages). LOCKSTEP_WHEEL_DIR holds the wheel, the venvs and
the wheel's CMake build. The build backend and pybind11 (pinned, from
PyPI) sit in a builder venv made once, and pip builds without isolation:
pip's isolated environment is new each time, and a new pybind11 path would
recompile the module on every run. So a rerun compiles only what changed.
LOCKSTEP_CXX_LAUNCHER (the build's compiler launcher, e.g. ccache) is
passed on.
"""

import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.realpath(os.path.join(HERE, "..", ".."))
WHEEL_DIR = os.environ.get("LOCKSTEP_WHEEL_DIR", "")
COMMANDS = ("lockstep_launch", "lockstep_server", "lockstep_worker",
            "lockstep_ctl")
BACKEND = ("scikit-build-core==1.1.2", "pybind11==3.1.0")


def clean_env(venv):
    """The environment of a user whose venv is active: no PYTHONPATH, no
    build tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LOCKSTEP_BIN_DIR", "VIRTUAL_ENV")
           and not k.startswith(("LOCKSTEP_", "TF_CONFIG"))}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = venv
    return env


def safetensors_names(path):
    """The tensor names in a safetensors file's header (its own format:
    8 bytes of little-endian length, then JSON)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return sorted(n for n in header if n != "__metadata__")


class WheelTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not WHEEL_DIR:
            raise RuntimeError("set LOCKSTEP_WHEEL_DIR (ctest does)")
        builder = cls.builder()
        cls.venv = os.path.join(WHEEL_DIR, "venv")
        dist = os.path.join(WHEEL_DIR, "dist")
        for path in (cls.venv, dist):
            shutil.rmtree(path, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv",
                        "--system-site-packages", cls.venv], check=True,
                       timeout=120)
        python = os.path.join(cls.venv, "bin", "python")
        build = [builder, "-m", "pip", "wheel", "--no-deps",
                 "--no-build-isolation", "--disable-pip-version-check",
                 os.path.join(SOURCE, "worker", "python"), "-w", dist,
                 "--config-settings=build-dir=" +
                 os.path.join(WHEEL_DIR, "cmake")]
        launcher = os.environ.get("LOCKSTEP_CXX_LAUNCHER", "")
        if launcher:
            build.append("--config-settings=cmake.define."
                         f"CMAKE_CXX_COMPILER_LAUNCHER={launcher}")
        start = time.monotonic()
        run = subprocess.run(build, capture_output=True, text=True,
                             timeout=1500, env=clean_env(cls.venv))
        if run.returncode != 0:
            raise RuntimeError(f"pip wheel failed:\n{run.stdout}{run.stderr}")
        print(f"pip wheel: {time.monotonic() - start:.0f} s", file=sys.stderr)
        wheels = glob.glob(os.path.join(dist, "lockstep-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one wheel in {dist}: {wheels}")
        cls.wheel = wheels[0]
        # numpy (its one dependency) is Debian's, seen through the venv.
        subprocess.run([python, "-m", "pip", "install", "--no-index",
                        "--disable-pip-version-check", "-q", cls.wheel],
                       check=True, timeout=300, env=clean_env(cls.venv))
        cls.outside = tempfile.mkdtemp(prefix="lockstep_wheel_")

    @staticmethod
    def builder():
        """The builder venv's python, made (again) unless its stamp says
        it holds BACKEND."""
        venv = os.path.join(WHEEL_DIR, "builder")
        python = os.path.join(venv, "bin", "python")
        stamp = os.path.join(venv, ".lockstep-stamp")
        want = " ".join(BACKEND)
        if os.path.exists(stamp) and open(stamp).read() == want:
            return python
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True,
                       timeout=120)
        run = subprocess.run([python, "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", *BACKEND],
                             capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            raise RuntimeError(f"could not install {want} from PyPI:\n"
                               f"{run.stdout}{run.stderr}")
        with open(stamp, "w") as f:
            f.write(want)
        return python

    def run_here(self, args, timeout_s=120):
        return subprocess.run(args, cwd=self.outside, capture_output=True,
                              text=True, timeout=timeout_s,
                              env=clean_env(self.venv))

    def test_the_commands_are_on_the_venvs_path(self):
        for name in COMMANDS:
            path = shutil.which(name, path=clean_env(self.venv)["PATH"])
            self.assertEqual(path, os.path.join(self.venv, "bin", name))

    def test_the_version_is_the_projects(self):
        with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
            version = re.search(r"project\(lockstep VERSION ([0-9.]+)",
                                f.read()).group(1)
        self.assertIn(f"lockstep-{version}-", os.path.basename(self.wheel))
        run = self.run_here([
            "python", "-c",
            "import importlib.metadata, lockstep; print(lockstep.__version__, "
            "importlib.metadata.version('lockstep'), lockstep.__file__)"])
        self.assertEqual(run.returncode, 0, run.stderr)
        ours, metadata, where = run.stdout.split()
        self.assertEqual((ours, metadata), (version, version))
        site = os.path.join(os.path.realpath(self.venv), "lib")
        self.assertTrue(os.path.realpath(where).startswith(site), where)

    def test_two_workers_train_from_outside_the_source_tree(self):
        # The tests' PyTorch worker, copied out: 20 SGD steps of an MLP on
        # 640 synthetic examples, batch 16 per worker (one epoch).
        script = os.path.join(self.outside, "train.py")
        shutil.copy(os.path.join(HERE, "workers", "torch_train.py"), script)
        out = os.path.join(self.outside, "w{rank}.safetensors")
        run = self.run_here(
            ["lockstep_launch", "--workers=2", "--ps=1", "--", "python",
             script, "--steps=20", "--batch=16", f"--out={out}"], 300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for rank in range(2):
            prefix = f"[worker{rank}] "
            lines = [l[len(prefix):] for l in run.stdout.splitlines()
                     if l.startswith(prefix)]
            steps = [int(l.split()[1]) for l in lines
                     if l.startswith("step ")]
            self.assertEqual(steps, list(range(20)), run.stdout)
            self.assertIn("done version 20 rejoins 0", lines, run.stdout)
        w0, w1 = (out.format(rank=r) for r in range(2))
        self.assertEqual(safetensors_names(w0),
                         ["0.bias", "0.weight", "2.bias", "2.weight"])
        # Both workers end with the same weights, bit for bit.
        with open(w0, "rb") as a, open(w1, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_adamw_and_one_cycle_match_plain_pytorch(self):
        # Issue 36's user: torch.optim.AdamW and OneCycleLR wrapped by
        # DistributedOptimizer on 2 workers, against one plain PyTorch
        # process with the doubled batch (the tests' oracle script).
        import numpy as np
        script = os.path.join(self.outside, "dist_train.py")
        shutil.copy(os.path.join(HERE, "workers", "torch_dist_train.py"),
                    script)
        plain = os.path.join(self.outside, "plain.npz")
        run = self.run_here(["python", script, "--plain", f"--out={plain}"])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        out = os.path.join(self.outside, "d{rank}.npz")
        run = self.run_here(["lockstep_launch", "--workers=2", "--ps=1", "--",
                             "python", script, f"--out={out}"], 300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with np.load(plain) as p, np.load(out.format(rank=0)) as w0, \
                np.load(out.format(rank=1)) as w1:
            self.assertEqual(sorted(w0.files), sorted(p.files))
            for key in p.files:
                np.testing.assert_array_equal(w0[key], w1[key], key)
                scale = float(np.abs(p[key]).max())
                if scale > 0:
                    self.assertLessEqual(
                        float(np.abs(w0[key] - p[key]).max()) / scale, 1e-5,
                        key)


if __name__ == "__main__":
    unittest.main(verbosity=2)
