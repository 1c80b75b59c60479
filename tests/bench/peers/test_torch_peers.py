#!/usr/bin/python3
"""torch_peers.py's programs, run small: each exits 0 and prints its figures,
the two synchronous MLP trainers reach the same accuracy, and bad input is
refused before anything starts. Exits 77 (ctest: skipped) without torch."""
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_peers.py")
TIMEOUT_S = 240


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)


def figures(stdout):
    lines = [l for l in stdout.splitlines() if l.strip()]
    if not lines:
        raise AssertionError("no output")
    return {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.e+]+)", lines[-1])}


class CommTest(unittest.TestCase):
    def check_comm(self, program):
        done = run(program, "--workers=3", "--params=5000", "--iters=5")
        self.assertEqual(done.returncode, 0, done.stderr)
        got = figures(done.stdout)
        self.assertEqual(got["workers"], 3)
        self.assertGreater(got["step_seconds"], 0)
        self.assertLess(got["step_seconds"], 10)
        return got

    def test_allreduce(self):
        got = self.check_comm("allreduce-comm")
        self.assertGreater(got["algbw_gbytes_per_sec"], 0)

    def test_rpc_ps(self):
        self.check_comm("rpc-ps-comm")


class MlpTest(unittest.TestCase):
    def test_ddp_and_rpc_ps_learn_alike(self):
        accuracies = {}
        for program in ("ddp-mlp", "rpc-ps-mlp"):
            done = run(program, "--workers=2", "--epochs=2", "--max_steps=150")
            self.assertEqual(done.returncode, 0, done.stderr)
            got = figures(done.stdout)
            self.assertGreater(got["examples_per_sec"], 0)
            accuracies[program] = got["test_accuracy"]
        # 300 synchronous Adam steps of 2 x 64 reach about 0.8; both trainers
        # average the same gradients of the same batches.
        self.assertGreater(accuracies["ddp-mlp"], 0.7)
        self.assertAlmostEqual(accuracies["ddp-mlp"], accuracies["rpc-ps-mlp"],
                               delta=0.01)


class RefusalTest(unittest.TestCase):
    def test_unknown_program(self):
        done = run("horovod")
        self.assertEqual(done.returncode, 2)
        self.assertIn("invalid choice: 'horovod'", done.stderr)

    def test_missing_data(self):
        done = run("ddp-mlp", "--data_dir=/nonexistent")
        self.assertEqual(done.returncode, 2)
        self.assertIn("no /nonexistent/train-images-idx3-ubyte.gz", done.stderr)

    def test_one_epoch_is_refused(self):
        done = run("rpc-ps-mlp", "--epochs=1")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--epochs must be at least 2", done.stderr)


if __name__ == "__main__":
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: this Python has no torch (Debian's python3-torch)")
        sys.exit(77)
    unittest.main(verbosity=2)
