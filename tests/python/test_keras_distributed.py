"""lockstep.keras.DistributedOptimizer through real servers in the
summation mode, against plain Keras with one process and the whole batch:
AdamW on a cosine schedule with warmup, clipped by global norm."""

import os
import subprocess
import sys
import tempfile
import unittest

import harness

import numpy as np

PYTHON = sys.executable
SCRIPT = os.path.join(harness.WORKERS, "keras_dist_train.py")


class DistributedOptimizerTest(unittest.TestCase):

    def test_two_workers_end_with_the_weights_of_one_process(self):
        d = tempfile.mkdtemp(prefix="lockstep_kdist_")
        plain_out = os.path.join(d, "plain.npz")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        run = subprocess.run([PYTHON, SCRIPT, "--plain", f"--out={plain_out}"],
                             capture_output=True, text=True, timeout=180,
                             env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("done 20 steps", run.stdout)
        plain = harness.read_npz(plain_out)
        out = os.path.join(d, "w{rank}.npz")
        results, log = harness.run_job(PYTHON, "keras_dist_train.py",
                                       lambda r: [f"--out={out}"], 2)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done 20 steps", output)
        self.assertIn("final version 20", log)
        w0, w1 = (harness.read_npz(out.format(rank=r)) for r in (0, 1))
        self.assertEqual(sorted(w0), sorted(plain))
        for key in w0:
            np.testing.assert_array_equal(w0[key], w1[key], key)
            d = harness.max_relative_difference(w0[key], plain[key])
            self.assertLessEqual(d, 1e-5, key)


if __name__ == "__main__":
    unittest.main()
