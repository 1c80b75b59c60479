"""lockstep.torch.SyncOptimizer never gives a silently wrong result: what it
cannot honour is refused at once, saying what to do, and frozen
parameters and every buffer are rank 0's and exported."""

import os
import subprocess
import sys
import tempfile
import unittest

import harness

import numpy as np
import torch

PYTHON = sys.executable
PREAMBLE = ("import torch, lockstep.torch as ls\n"
            "m = torch.nn.Linear(3, 2)\n"
            "opt = ls.SyncOptimizer(m, optimizer='sgd', lr=0.1)\n"
            "x = torch.ones(4, 3)\n"
            "opt.zero_grad(); m(x).sum().backward(); opt.step()\n"
            "print('step 0 taken', flush=True)\n"
            "opt.zero_grad()\n")


class SilentWrongTest(unittest.TestCase):

    def run_one_worker(self, code):
        server = harness.Server(1)
        try:
            return subprocess.run(
                [PYTHON, "-c", PREAMBLE + code], capture_output=True,
                text=True, timeout=60,
                env=harness.worker_env([server.address], 0, 1))
        finally:
            server.stop()

    def test_clipping_after_backward_is_refused(self):
        # The gradient left during backward: clipping it afterwards would
        # change nothing the servers see.
        run = self.run_one_worker(
            "m(x).sum().backward()\n"
            "torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3)\n"
            "opt.step()\n")
        self.assertIn("step 0 taken", run.stdout)
        self.assertEqual(run.returncode, 2, run.stderr)  # Permanent.
        self.assertIn("FAILED_PRECONDITION: a gradient changed after "
                      "backward() had pushed it", run.stderr)
        self.assertIn("DistributedOptimizer", run.stderr)

    def test_a_step_without_backward_is_refused(self):
        run = self.run_one_worker("opt.step()\n")
        self.assertIn("step 0 taken", run.stdout)
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("FAILED_PRECONDITION: step() without a backward pass",
                      run.stderr)

    def test_parameters_instead_of_the_model_say_what_to_do(self):
        import lockstep.torch as ls
        model = torch.nn.Linear(2, 2)
        with self.assertRaises(ls.LockstepError) as e:
            ls.SyncOptimizer(model.parameters())
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("takes the torch.nn.Module, got generator",
                      e.exception.message)
        self.assertIn("DistributedOptimizer(optimizer, model)",
                      e.exception.message)

    def test_frozen_layer_is_rank_0s_and_the_file_loads_strictly(self):
        out = os.path.join(tempfile.mkdtemp(), "w{rank}.safetensors")
        results, _ = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: harness.train_args(out, model="bn", batch=16,
                                         steps=5) + ["--freeze"], 2)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done version 5", output)
        # Rank 0's initial first layer (each rank drew its own).
        torch.manual_seed(1000)
        initial = torch.nn.Linear(20, 16)
        from safetensors.torch import load_file
        for rank in (0, 1):
            state = load_file(out.format(rank=rank))
            np.testing.assert_array_equal(state["0.weight"].numpy(),
                                          initial.weight.detach().numpy())
            model = torch.nn.Sequential(
                torch.nn.Linear(20, 16), torch.nn.BatchNorm1d(16),
                torch.nn.ReLU(), torch.nn.Linear(16, 4))
            model.load_state_dict(state, strict=True)
            self.assertEqual(int(model[1].num_batches_tracked), 5)


if __name__ == "__main__":
    unittest.main()
