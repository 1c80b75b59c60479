"""lockstep.average: a script's metrics averaged over the workers through
the servers, exactly (means by hand), and ranks that disagree told so at
once rather than left waiting."""

import subprocess
import sys
import unittest

import harness

PYTHON = sys.executable
SCRIPT = """
import os, sys, torch, lockstep, lockstep.torch as ls
rank = int(os.environ["LOCKSTEP_RANK"])
m = torch.nn.Linear(3, 2)
opt = ls.SyncOptimizer(m, optimizer="sgd", lr=0.1)
opt.zero_grad(); m(torch.ones(4, 3)).sum().backward(); opt.step()
print("mean", lockstep.average([rank + 1.0, 10.0 * rank], name="loss,acc"))
print("mean", lockstep.current_job().average([0.5 * rank]))
if sys.argv[1] == "disagree":
    lockstep.average([1.0], name=f"rank {rank}'s")
print("done", flush=True)
"""


class AverageTest(unittest.TestCase):

    def run_job(self, mode):
        server = harness.Server(2)
        try:
            procs = [subprocess.Popen(
                [PYTHON, "-c", SCRIPT, mode],
                env=harness.worker_env([server.address], r, 2),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for r in range(2)]
            return harness.finish(procs, timeout_s=90)
        finally:
            server.stop()

    def test_the_mean_over_the_workers(self):
        for code, out in self.run_job("agree"):
            self.assertEqual(code, 0, out)
            # (1 + 2) / 2 and (0 + 10) / 2; then (0 + 0.5) / 2.
            self.assertIn("mean [1.5, 5.0]\nmean [0.25]\ndone", out)

    def test_workers_that_average_different_things_are_told(self):
        for code, out in self.run_job("disagree"):
            self.assertEqual(code, 2, out)
            self.assertIn("mean [1.5, 5.0]\nmean [0.25]\n", out)
            self.assertIn("FAILED_PRECONDITION: the workers average different "
                          "things in round 2", out)
            self.assertNotIn("done", out)


if __name__ == "__main__":
    unittest.main()
