"""How a Python job ends, as its workers tell the servers: ranks that ran
uneven data end it within seconds with an error naming the rank that ran
out (never a wait for the step timeout), a job whose workers failed ends
as failed (never as done), and an even job ends cleanly."""

import os
import subprocess
import sys
import tempfile
import unittest

import harness

PYTHON = sys.executable
# argv: rank 0's steps, rank 1's steps, the step to raise at (-1: none).
SCRIPT = """
import os, sys, torch, lockstep.torch as ls
rank = int(os.environ["LOCKSTEP_RANK"])
steps, fail_at = int(sys.argv[1 + rank]), int(sys.argv[3])
torch.manual_seed(0)
m = torch.nn.Linear(3, 2)
opt = ls.SyncOptimizer(m, optimizer="sgd", lr=0.1)
x = torch.ones(4, 3)
for s in range(steps):
    opt.zero_grad(); m(x).sum().backward(); opt.step()
    if s == fail_at:
        raise ValueError(f"bad batch at step {s}")
print("trained", steps, "steps", flush=True)
"""


# argv: a file whose existence lets the script end (after one step).
LEAVE_AFTER_SERVER_GONE = """
import os, sys, time, torch, lockstep.torch as ls
m = torch.nn.Linear(3, 2)
opt = ls.SyncOptimizer(m, optimizer="sgd", lr=0.1)
opt.zero_grad(); m(torch.ones(4, 3)).sum().backward(); opt.step()
print("stepped", flush=True)
for _ in range(1200):
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.05)
"""


class JobEndTest(unittest.TestCase):

    def run_job(self, steps0, steps1, fail_at=-1):
        # A step timeout far past the test's deadline: an end that waited
        # for it would be killed and fail the test.
        server = harness.Server(2, ["--step_timeout_s=600"])
        try:
            procs = [subprocess_worker(server.address, r,
                                       [str(steps0), str(steps1),
                                        str(fail_at)]) for r in range(2)]
            results = harness.finish(procs, timeout_s=90)
            code = server.wait(30)
            return results, code, server.log()
        finally:
            server.stop()

    def test_uneven_data_ends_the_job_naming_the_rank_that_ran_out(self):
        (code0, out0), (code1, out1), server, log = self.flatten(
            *self.run_job(6, 5))
        self.assertEqual(code1, 0, out1)
        self.assertIn("trained 5 steps", out1)
        self.assertEqual(code0, 2, out0)  # Permanent: retrying cannot help.
        self.assertNotIn("trained", out0)
        self.assertIn("FAILED_PRECONDITION: Push of step 5 of chunk 0: rank 1 "
                      "finished its training and left the job at version 5",
                      out0)
        self.assertIn("different numbers of steps", out0)
        self.assertEqual(server, 1, log)
        self.assertIn("every worker has left, but the job failed: rank 0: "
                      "LockstepError: FAILED_PRECONDITION: Push of step 5 of "
                      "chunk 0: rank 1 finished", log)

    def test_a_job_whose_workers_failed_is_not_reported_done(self):
        (code0, out0), (code1, out1), server, log = self.flatten(
            *self.run_job(8, 8, fail_at=3))
        for code, out in ((code0, out0), (code1, out1)):
            self.assertEqual(code, 1, out)
            self.assertIn("ValueError: bad batch at step 3", out)
        self.assertEqual(server, 1, log)
        self.assertIn("every worker has left, but the job failed: rank 0: "
                      "ValueError: bad batch at step 3; rank 1: ValueError: "
                      "bad batch at step 3", log)

    def test_an_even_job_ends_cleanly(self):
        (code0, out0), (code1, out1), server, log = self.flatten(
            *self.run_job(5, 5))
        for code, out in ((code0, out0), (code1, out1)):
            self.assertEqual(code, 0, out)
            self.assertIn("trained 5 steps", out)
        self.assertEqual(server, 0, log)
        self.assertIn("every worker has left\n", log)
        self.assertNotIn("the job failed", log)

    def test_a_leave_that_fails_at_exit_is_said_not_raised(self):
        # The servers are gone when the script ends: its leave at exit
        # fails, which is said on stderr; the script's own end stands.
        server = harness.Server(1)
        go = os.path.join(tempfile.mkdtemp(), "go")
        try:
            proc = subprocess.Popen(
                [PYTHON, "-c", LEAVE_AFTER_SERVER_GONE, go],
                env=harness.worker_env([server.address], 0, 1),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(proc.stdout.readline(), "stepped\n")
        finally:
            server.stop()
        open(go, "w").close()
        out = proc.communicate(timeout=60)[0]
        self.assertEqual(proc.returncode, 0, out)
        self.assertIn("lockstep worker 0: could not leave the job", out)
        self.assertNotIn("NameError", out)

    @staticmethod
    def flatten(results, server_code, log):
        return results[0], results[1], server_code, log


def subprocess_worker(address, rank, args):
    return subprocess.Popen([PYTHON, "-c", SCRIPT, *args],
                            env=harness.worker_env([address], rank, 2),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


if __name__ == "__main__":
    unittest.main()
