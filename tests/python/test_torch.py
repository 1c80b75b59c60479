"""lockstep.torch through real servers: equivalence with one big batch and
with plain PyTorch, refusals, sync modes and the examples (faults, outputs
and job features: test_torch_jobs.py)."""

import os
import subprocess
import sys
import tempfile
import unittest

import harness

import numpy as np
import torch

PYTHON = sys.executable




class EquivalenceTest(unittest.TestCase):
    """W workers x batch B give the weights of 1 worker x W*B."""

    def run_weights(self, workers, batch, optimizer, lr, model="mlp"):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        results, log = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: harness.train_args(out if r == 0 else None, optimizer=optimizer,
                                 lr=lr, batch=batch, steps=20, model=model),
            workers)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done version 20", output)
        self.assertIn("final version 20", log)
        return harness.read_weights(out)

    def check(self, optimizer, lr, model="mlp"):
        one = self.run_weights(1, 64, optimizer, lr, model)
        for workers in (2, 4):
            many = self.run_weights(workers, 64 // workers, optimizer, lr, model)
            self.assertEqual(sorted(one), sorted(many))
            for name in one:
                d = harness.max_relative_difference(many[name][1], one[name][1])
                self.assertLessEqual(d, 1e-5, f"{workers} workers, {name}")

    def test_sgd(self):
        self.check("sgd", 0.1)

    def test_adam(self):
        self.check("adam", 0.001)

    def test_batch_norm_state_ends_the_same_on_every_worker(self):
        # Each worker normalizes with its own batch (as MirroredStrategy
        # does), so W x B differs from 1 x W*B; the running statistics
        # travel as state and every replica ends with the workers' mean.
        out = os.path.join(tempfile.mkdtemp(), "w{rank}.safetensors")
        results, _ = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: harness.train_args(out, model="bn", batch=16, steps=10), 2)
        for code, output in results:
            self.assertEqual(code, 0, output)
        w0 = harness.read_weights(out.format(rank=0))
        w1 = harness.read_weights(out.format(rank=1))
        self.assertEqual(sorted(w0), sorted(w1))
        self.assertIn("1.running_mean", w0)
        for name in w0:
            np.testing.assert_array_equal(w0[name][1], w1[name][1], name)
        # The statistics moved from their initial zeros and ones.
        self.assertGreater(np.abs(w0["1.running_mean"][1]).max(), 1e-3)


class CrossImplementationTest(unittest.TestCase):
    """A PyTorch worker and lockstep_worker end with the same weights."""

    def test_sgd(self):
        self.check("sgd", 0.1)

    def test_adam(self):
        self.check("adam", 0.001)

    def test_diloco_rounds(self):
        # The Python worker's rounds are lockstep_worker's: SGD on the
        # worker for 5 steps, then the servers' Nesterov step on the change.
        self.check("sgd", 0.1, ["--sync=diloco", "--local_steps=5"])

    def test_diloco_rounds_saving_their_inner_state(self):
        from lockstep import _native
        # inner_state_dir changes nothing of the rounds (momentum SGD, as
        # lockstep_worker's), and holds the momentum by version: 20 steps
        # in rounds of 5 make versions 1 to 4, the newest 3 kept.
        folder = tempfile.mkdtemp()
        self.check("momentum", 0.05, ["--sync=diloco", "--local_steps=5",
                                      f"--inner_state_dir={folder}"])
        names = sorted(os.listdir(folder))
        self.assertEqual(names, [f"inner-rank0-v{v}.safetensors"
                                 for v in (2, 3, 4)])
        saved = {n: v for n, _, v in _native.read_safetensors(
            os.path.join(folder, names[-1]))}
        self.assertEqual(sorted(saved), ["momentum"])
        self.assertEqual(saved["momentum"].size,
                         784 * 128 + 128 + 128 * 10 + 10)
        self.assertGreater(float(np.abs(saved["momentum"]).max()), 0.0)

    def test_diloco_rounds_of_the_users_own_optimizer(self):
        # DistributedOptimizer over torch.optim.SGD: the user's optimizer
        # takes the local steps, and the rounds are lockstep_worker's.
        self.check("sgd", 0.1, ["--sync=diloco", "--local_steps=5"],
                   python_only=["--distributed"])

    def check(self, optimizer, lr, rounds=(), python_only=()):
        from lockstep import _native
        tmp = tempfile.mkdtemp()
        # One set of initial weights for both: PyTorch's own initializer,
        # written the way lockstep_worker's Mlp names and lays them out
        # (kernels [in, out], nn.Linear's weights [out, in]).
        torch.manual_seed(5)
        layers = [torch.nn.Linear(784, 128), torch.nn.Linear(128, 10)]
        tensors, flat = [], []
        for i, layer in enumerate(layers):
            kernel = layer.weight.detach().t().contiguous()
            tensors += [(f"dense_{i}/kernel", list(kernel.shape)),
                        (f"dense_{i}/bias", list(layer.bias.shape))]
            flat += [kernel.reshape(-1), layer.bias.detach()]
        initial = os.path.join(tmp, "initial.safetensors")
        _native.write_safetensors(initial, tensors, torch.cat(flat).numpy())

        cpp = os.path.join(tmp, "cpp.safetensors")
        server = harness.Server(1)
        try:
            run = subprocess.run(
                [harness.binary("lockstep_worker"),
                 f"--servers={server.address}", "--workers=1", "--rank=0",
                 "--layers=784,128,10", "--data_dir=" + harness.FASHION,
                 f"--optimizer={optimizer}", f"--lr={lr}", "--batch_size=32",
                 "--seed=42", "--max_steps=20", "--progress=none",
                 f"--init_weights={initial}", f"--dump_weights={cpp}",
                 *rounds],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        finally:
            server.stop()
        py = os.path.join(tmp, "py.safetensors")
        results, _ = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: harness.train_args(py, data="fashion", batch=32, steps=20,
                                 optimizer=optimizer, lr=lr,
                                 init_from_lockstep=initial) + list(rounds) +
            list(python_only), 1)
        self.assertEqual(results[0][0], 0, results[0][1])
        if rounds:  # 20 steps in rounds of 5: version 4.
            self.assertIn("done version 4 ", results[0][1])
        c, p = harness.read_weights(cpp), harness.read_weights(py)
        start = harness.read_weights(initial)
        pairs = [("dense_0/kernel", "0.weight"), ("dense_0/bias", "0.bias"),
                 ("dense_1/kernel", "2.weight"), ("dense_1/bias", "2.bias")]
        for cpp_name, py_name in pairs:
            values = c[cpp_name][1]
            mine = p[py_name][1].reshape(p[py_name][0])
            if cpp_name.endswith("kernel"):
                mine = mine.T
            mine = np.ascontiguousarray(mine).reshape(-1)
            # Training moved the weights, and both moved them alike.
            self.assertGreater(
                harness.max_relative_difference(values, start[cpp_name][1]),
                1e-3, cpp_name)
            d = harness.max_relative_difference(mine, values)
            print(f"{optimizer} {cpp_name}: {d:.3g}", file=sys.stderr)
            self.assertLessEqual(d, 1e-5, cpp_name)


class RefusalTest(unittest.TestCase):

    def test_a_different_model_is_refused_naming_the_tensor(self):
        server = harness.Server(2)
        try:
            first = harness.start_worker(PYTHON, "torch_train.py",
                                         harness.train_args(steps=5), [server.address],
                                         0, 2)
            second = harness.start_worker(
                PYTHON, "torch_train.py", harness.train_args(steps=5, model="other"),
                [server.address], 1, 2)
            (code, output), = harness.finish([second], 60)
            self.assertEqual(code, 2, output)  # Permanent.
            self.assertIn("FAILED_PRECONDITION", output)
            self.assertIn("0.weight", output)
            first.kill()
            harness.finish([first], 30)
        finally:
            server.stop()

    def test_a_second_backward_in_one_step_raises(self):
        server = harness.Server(1)
        try:
            code = ("import torch, lockstep.torch as ls\n"
                    "m = torch.nn.Linear(3, 2)\n"
                    "opt = ls.SyncOptimizer(m, optimizer='sgd', lr=0.1)\n"
                    "x = torch.ones(4, 3)\n"
                    "m(x).sum().backward()\n"
                    "m(x).sum().backward()\n")
            run = subprocess.run(
                [PYTHON, "-c", code], capture_output=True, text=True,
                timeout=60, env=harness.worker_env([server.address], 0, 1))
            self.assertEqual(run.returncode, 2, run.stderr)
            self.assertIn("handed over twice in step 0", run.stderr)
        finally:
            server.stop()

    def test_a_nan_gradient_raises_and_changes_nothing(self):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        server = harness.Server(1, [f"--weights_file={out}"])
        try:
            (code, output), = harness.finish([harness.start_worker(
                PYTHON, "torch_train.py", harness.train_args(steps=5, nan_at=3),
                [server.address], 0, 1)], 60)
            self.assertEqual(code, 2, output)  # Permanent.
            self.assertIn("INVALID_ARGUMENT", output)
            self.assertIn("step 2 loss", output)
            self.assertNotIn("step 3 loss", output)
            # The only worker left saying it failed: the server ends the job
            # as failed, saving version 3, in which the NaN was never summed.
            self.assertEqual(server.wait(30), 1, server.log())
            self.assertIn("every worker has left, but the job failed: rank 0: "
                          "LockstepError: INVALID_ARGUMENT", server.log())
            self.assertIn("weights of version 3 in", server.log())
            weights = np.concatenate(
                [v for _, v in harness.read_weights(out).values()])
            self.assertGreater(weights.size, 0)
            self.assertTrue(np.isfinite(weights).all())
        finally:
            server.stop()


class SyncModesTest(unittest.TestCase):
    """Async and SSP jobs of Python workers run to their end."""

    def check(self, mode, versions):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        results, log = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: harness.train_args(out if r == 0 else None, steps=10, sync=mode),
            2)
        for code, output in results:
            self.assertEqual(code, 0, output)
        # Each worker stops once the version it sees reaches 10.
        final = int(log.split("final version ")[1].split()[0])
        self.assertIn(final, versions)
        if mode == "async":  # Every push is a version of its own.
            pushes = sum(o.count("loss") for _, o in results)
            self.assertEqual(pushes, final)
        weights = np.concatenate([v for _, v in
                                  harness.read_weights(out).values()])
        self.assertTrue(np.isfinite(weights).all())

    def test_async(self):
        self.check("async", range(10, 12))

    def test_ssp(self):
        self.check("ssp", range(10, 12))


class ExamplesTest(unittest.TestCase):
    """The examples run through lockstep_launch, as docs/python.md shows."""

    EXAMPLES = os.path.join(harness.HERE, "..", "..", "worker", "python",
                            "examples")

    def launch(self, script, *args):
        run = subprocess.run(
            [harness.binary("lockstep_launch"), "--workers=2", "--",
             PYTHON, os.path.join(self.EXAMPLES, script), *args],
            capture_output=True, text=True, timeout=400)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        return run.stdout

    def test_the_mlp_learns_fashion_mnist_in_an_epoch(self):
        out = self.launch("torch_mlp.py", "--epochs=1")
        self.assertIn("[worker0] Epoch 1/1", out)
        lines = [l for l in out.splitlines()
                 if l.startswith("[worker0] Test accuracy")]
        self.assertEqual(len(lines), 1, out)
        self.assertGreaterEqual(float(lines[0].split()[3]), 0.8)
        self.assertIn("final version 468", out)

    def test_resnet20_trains_with_its_batch_norm_state(self):
        out = self.launch("torch_resnet20.py", "--synthetic=512",
                          "--batch_size=16", "--max_steps=4")
        self.assertIn("[worker0] Test accuracy", out)
        self.assertIn("final version 4", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
