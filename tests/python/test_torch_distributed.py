"""lockstep.torch.DistributedOptimizer through real servers in the
summation mode, against plain PyTorch with one process and the whole
batch: AdamW, OneCycleLR, clipping after synchronize(), a frozen layer,
accumulated backward passes, and parameters that no worker or only some
workers used in a step."""

import os
import subprocess
import sys
import tempfile
import unittest

import harness

import numpy as np
import torch

PYTHON = sys.executable
SCRIPT = os.path.join(harness.WORKERS, "torch_dist_train.py")


class DistributedOptimizerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lockstep_dist_")
        out = os.path.join(cls.dir, "plain.npz")
        run = subprocess.run([PYTHON, SCRIPT, "--plain", f"--out={out}"],
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise AssertionError(run.stdout + run.stderr)
        cls.plain_log = run.stdout
        cls.plain = harness.read_npz(out)

    def run_workers(self, name, *flags):
        out = os.path.join(self.dir, name + "{rank}.npz")
        results, log = harness.run_job(
            PYTHON, "torch_dist_train.py",
            lambda r: [f"--out={out}", *flags], 2)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done 20 steps", output)
        self.assertIn("final version 20", log)
        return [harness.read_npz(out.format(rank=r)) for r in (0, 1)]

    def check(self, ranks):
        w0, w1 = ranks
        self.assertEqual(sorted(w0), sorted(self.plain))
        self.assertEqual(sorted(w1), sorted(self.plain))
        # The same mean gradient into the same optimizer: the same bits.
        for key in w0:
            np.testing.assert_array_equal(w0[key], w1[key], key)
        for key in self.plain:
            d = harness.max_relative_difference(w0[key], self.plain[key])
            self.assertLessEqual(d, 1e-5, key)
        # The frozen layer is rank 0's to the bit (rank 1 drew another).
        np.testing.assert_array_equal(w0["model.0.weight"],
                                      self.plain["model.0.weight"])

    def test_two_workers_end_with_the_weights_of_one_process(self):
        # The oracle clipped some steps, so clipping is exercised.
        self.assertRegex(self.plain_log, r"clipped [1-9]")
        self.check(self.run_workers("one_pass"))

    def test_accumulated_backward_passes_are_one_step(self):
        self.check(self.run_workers("two_passes", "--passes=2"))

    def test_a_step_without_backward_is_refused(self):
        results, _ = harness.run_job(
            PYTHON, "torch_dist_train.py", lambda r: ["--case=no_backward"],
            1)
        code, output = results[0]
        self.assertEqual(code, 0, output)
        self.assertIn("no_backward: FAILED_PRECONDITION: step() or "
                      "synchronize() without a backward pass", output)


class RoundsTest(unittest.TestCase):
    """DistributedOptimizer(..., sync="diloco"): the user's own optimizer
    takes the local steps (its rounds against lockstep_worker's: test_torch's
    CrossImplementationTest.test_diloco_rounds_of_the_users_own_optimizer)."""

    def test_two_workers_take_rounds_of_their_own_adam(self):
        out = os.path.join(tempfile.mkdtemp(), "w{rank}.safetensors")
        results, log = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: ["--distributed", "--optimizer=adam", "--lr=0.01",
                       "--sync=diloco", "--local_steps=5", "--steps=20",
                       f"--out={out}"], 2)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done version 4 ", output)
        self.assertIn("final version 4", log)
        w0, w1 = (harness.read_weights(out.format(rank=r)) for r in (0, 1))
        self.assertEqual(sorted(w0), sorted(w1))
        for name in w0:  # The servers' outer weights, on both.
            self.assertEqual(w0[name][1].tobytes(), w1[name][1].tobytes(),
                             name)

    def test_what_rounds_cannot_take_is_refused(self):
        import lockstep.torch as ls
        from lockstep import Cluster
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with self.assertRaises(ls.LockstepError) as e:
            ls.DistributedOptimizer(opt, model, sync="diloco",
                                    learning_rate=0.5)
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("runs the optimizer it wraps; it takes no "
                      "learning_rate", e.exception.message)
        # Its inner state is the torch optimizer's, not a named one's.
        with self.assertRaises(ls.LockstepError) as e:
            ls.DistributedOptimizer(opt, model, sync="diloco",
                                    inner_state_dir="/tmp")
        self.assertIn("save its state_dict", e.exception.message)
        server = harness.Server(1)
        try:
            opt = ls.DistributedOptimizer(
                opt, model, sync="localsgd", local_steps=2,
                cluster=Cluster(servers=[server.address], rank=0,
                                num_workers=1))
            with self.assertRaises(ls.LockstepError) as e:
                opt.synchronize()
            self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
            self.assertIn("averages no gradients", e.exception.message)
            opt.leave()
        finally:
            server.stop()


UNUSED = "torch_unused_train.py"


class UnusedParameterTest(unittest.TestCase):
    """A parameter no worker used in a step keeps .grad None, so AdamW skips
    it (no weight decay, no moments, no step count) as one process does;
    one only some workers used gets the mean with the others counting as
    zero, as DDP gives it. workers/torch_unused_train.py says which branch
    each step uses."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lockstep_unused_")
        out = os.path.join(cls.dir, "plain.npz")
        run = subprocess.run(
            [PYTHON, os.path.join(harness.WORKERS, UNUSED), "--plain",
             f"--out={out}"], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise AssertionError(run.stdout + run.stderr)
        cls.plain = harness.read_npz(out)

    def run_workers(self, passes):
        out = os.path.join(self.dir, f"passes{passes}_" + "{rank}.npz")
        results, log = harness.run_job(
            PYTHON, UNUSED, lambda r: [f"--out={out}", f"--passes={passes}"],
            2)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done 20 steps", output)
        self.assertIn("final version 20", log)
        return [harness.read_npz(out.format(rank=r)) for r in (0, 1)]

    def check_weights(self, ranks):
        plain = self.plain
        kept = sorted(k for k in plain if not k.startswith("local."))
        for w in ranks:
            # No AdamW state for `never` here either: it never stepped.
            self.assertEqual(sorted(k for k in w if not k.startswith(
                "local.")), kept)
            for key in ("never.weight", "never.bias"):
                # Bit-equal to rank 0's initial value, as in one process.
                np.testing.assert_array_equal(plain["model." + key],
                                              plain["init." + key], key)
                np.testing.assert_array_equal(w["model." + key],
                                              plain["init." + key], key)
        for key in kept:
            np.testing.assert_array_equal(ranks[0][key], ranks[1][key], key)
            if key.startswith("step."):  # Steps AdamW took, exactly.
                np.testing.assert_array_equal(ranks[0][key], plain[key], key)
            elif not key.startswith("init."):
                d = harness.max_relative_difference(ranks[0][key], plain[key])
                self.assertLessEqual(d, 1e-5, key)
        self.assertEqual(float(plain["step.some.weight"]), 7.0)
        self.assertEqual(float(plain["step.routed.weight"]), 15.0)

    def check_routed_gradients(self, ranks):
        r0, r1 = ranks
        half = np.float32(0.5)
        for w in ranks:  # Step 0: no worker used it; .grad stayed None.
            self.assertNotIn("local.0", w)
            self.assertNotIn("mean.0", w)
        self.assertNotIn("local.1", r1)  # Step 1: rank 0's only.
        self.assertNotIn("local.3", r0)  # Step 3: rank 1's only.
        expected = {1: r0["local.1"] * half,
                    2: (r0["local.2"] + r1["local.2"]) * half,
                    3: r1["local.3"] * half}
        for step, mean in expected.items():
            np.testing.assert_array_equal(r0[f"mean.{step}"], mean, step)
            np.testing.assert_array_equal(r1[f"mean.{step}"], mean, step)
            d = harness.max_relative_difference(mean,
                                                self.plain[f"mean.{step}"])
            self.assertLessEqual(d, 1e-5, step)

    def test_an_unused_parameter_is_skipped_as_in_one_process(self):
        ranks = self.run_workers(1)
        self.check_weights(ranks)
        self.check_routed_gradients(ranks)

    def test_accumulated_passes_skip_and_average_alike(self):
        ranks = self.run_workers(2)
        self.check_weights(ranks)
        self.check_routed_gradients(ranks)


class RefusalTest(unittest.TestCase):
    """Refused before any server is dialled."""

    def test_only_an_optimizer_is_wrapped(self):
        import lockstep.torch as ls
        model = torch.nn.Linear(2, 2)
        with self.assertRaises(ls.LockstepError) as e:
            ls.DistributedOptimizer(model.parameters(), model)
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("wraps a torch.optim.Optimizer", e.exception.message)

    def test_a_tensor_named_as_the_used_flags_is_refused(self):
        import lockstep.torch as ls
        model = torch.nn.Linear(2, 2)
        model.register_buffer("lockstep/used", torch.zeros(2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with self.assertRaises(ls.LockstepError) as e:
            ls.DistributedOptimizer(opt, model)
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("a tensor named 'lockstep/used'", e.exception.message)

    def test_the_summation_mode_is_sync_only(self):
        from lockstep.errors import LockstepError
        from lockstep.job import AVERAGE, Job
        for sync, backups in (("async", 0), ("ssp", 0), ("sync", 1)):
            with self.assertRaises(LockstepError) as e:
                Job([("w", (2,))], optimizer=AVERAGE, sync=sync,
                    backup_workers=backups)
            self.assertIn("summation mode runs in sync mode",
                          e.exception.message)


if __name__ == "__main__":
    unittest.main()
