"""lockstep.torch through real servers: equivalence, cross-implementation,
refusals, faults and the safetensors round trip."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness

import numpy as np
import torch

PYTHON = sys.executable


def train_args(out=None, **kw):
    args = []
    for k, v in kw.items():
        args.append(f"--{k}={v}")
    if out:
        args.append(f"--out={out}")
    return args


class EquivalenceTest(unittest.TestCase):
    """W workers x batch B give the weights of 1 worker x W*B."""

    def run_weights(self, workers, batch, optimizer, lr, model="mlp"):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        results, log = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: train_args(out if r == 0 else None, optimizer=optimizer,
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
            lambda r: train_args(out, model="bn", batch=16, steps=10), 2)
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

    def check(self, optimizer, lr):
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
                 f"--init_weights={initial}", f"--dump_weights={cpp}"],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        finally:
            server.stop()
        py = os.path.join(tmp, "py.safetensors")
        results, _ = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: train_args(py, data="fashion", batch=32, steps=20,
                                 optimizer=optimizer, lr=lr,
                                 init_from_lockstep=initial), 1)
        self.assertEqual(results[0][0], 0, results[0][1])
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
                                         train_args(steps=5), [server.address],
                                         0, 2)
            second = harness.start_worker(
                PYTHON, "torch_train.py", train_args(steps=5, model="other"),
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
        import lockstep.torch as ls
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
        server = harness.Server(1)
        try:
            (code, output), = harness.finish([harness.start_worker(
                PYTHON, "torch_train.py", train_args(steps=5, nan_at=3),
                [server.address], 0, 1)], 60)
            self.assertEqual(code, 2, output)  # Permanent.
            self.assertIn("INVALID_ARGUMENT", output)
            self.assertIn("step 2 loss", output)
            self.assertNotIn("step 3 loss", output)
            # The server still holds version 3: a new worker goes on from
            # there, and the NaN was never summed.
            (code, output), = harness.finish([harness.start_worker(
                PYTHON, "torch_train.py", train_args(out, steps=5),
                [server.address], 0, 1)], 60)
            self.assertEqual(code, 0, output)
            self.assertNotIn("step 2 loss", output)
            self.assertIn("step 3 loss", output)
            self.assertIn("done version 5", output)
            weights = np.concatenate(
                [v for _, v in harness.read_weights(out).values()])
            self.assertTrue(np.isfinite(weights).all())
        finally:
            server.stop()


class FaultTest(unittest.TestCase):

    def test_a_worker_killed_and_restarted_rejoins_and_the_job_finishes(self):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        server = harness.Server(2)
        try:
            args = train_args(steps=40, step_sleep_ms=50)
            first = harness.start_worker(PYTHON, "torch_train.py",
                                         train_args(out, steps=40,
                                                    step_sleep_ms=50),
                                         [server.address], 0, 2)
            victim = harness.start_worker(PYTHON, "torch_train.py", args,
                                          [server.address], 1, 2)
            # Kill it once it has taken a few steps.
            deadline = time.monotonic() + 60
            seen = ""
            while "step 5 loss" not in seen and time.monotonic() < deadline:
                line = victim.stdout.readline()
                if not line:
                    break
                seen += line
            self.assertIn("step 5 loss", seen)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(30)
            again = harness.start_worker(PYTHON, "torch_train.py", args,
                                         [server.address], 1, 2)
            (c0, o0), (c1, o1) = harness.finish([first, again], 180)
            self.assertEqual(c0, 0, o0)
            self.assertEqual(c1, 0, o1)
            self.assertIn("done version 40", o0)
            self.assertIn("done version 40", o1)
            self.assertEqual(server.wait(30), 0, server.log())
            self.assertTrue(np.isfinite(
                np.concatenate([v for _, v in
                                harness.read_weights(out).values()])).all())
        finally:
            server.stop()


class ServerRestartTest(unittest.TestCase):

    def test_workers_rejoin_a_server_restarted_from_its_checkpoint(self):
        port = harness.free_port()
        checkpoints = tempfile.mkdtemp()
        flags = [f"--checkpoint_dir={checkpoints}", "--checkpoint_every_steps=1"]
        server = harness.Server(2, flags, port=port)
        again = None
        try:
            args = train_args(steps=30, step_sleep_ms=30)
            workers = [harness.start_worker(PYTHON, "torch_train.py", args,
                                            [server.address], r, 2)
                       for r in range(2)]
            seen = harness.read_until(workers[0], "step 8 loss")
            self.assertIn("step 8 loss", seen)
            server.proc.kill()
            server.proc.wait(30)
            again = harness.Server(2, flags, port=port)
            results = harness.finish(workers, 180)
            for code, output in results:
                self.assertEqual(code, 0, output)
                self.assertIn("done version 30", output)
                self.assertIn("registering again", output)
                rejoins = int(output.split("rejoins ")[-1].split()[0])
                self.assertGreaterEqual(rejoins, 1, output)
            self.assertEqual(again.wait(30), 0, again.log())
            self.assertIn("restored", again.log().lower())
        finally:
            server.stop()
            if again is not None:
                again.stop()


class SignalTest(unittest.TestCase):

    def test_ctrl_c_ends_a_worker_waiting_in_a_step_at_once(self):
        server = harness.Server(2)  # Rank 1 never comes.
        try:
            worker = harness.start_worker(PYTHON, "torch_train.py",
                                          train_args(steps=5),
                                          [server.address], 0, 2)
            self.assertIn("joined at version 0", worker.stdout.readline())
            # Its main thread asleep for a while: waiting in step 0.
            stat = f"/proc/{worker.pid}/task/{worker.pid}/stat"
            deadline, asleep = time.monotonic() + 20, 0
            while asleep < 5 and time.monotonic() < deadline:
                with open(stat) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                asleep = asleep + 1 if state == "S" else 0
                time.sleep(0.05)
            self.assertEqual(asleep, 5, "the worker never waited")
            elapsed, code = harness.interrupt(worker)
            self.assertLess(elapsed, 2.0)
            self.assertEqual(code, -signal.SIGINT)
        finally:
            server.stop()


class SafetensorsTest(unittest.TestCase):

    def test_the_safetensors_package_reads_our_file_bit_for_bit(self):
        import lockstep.torch as ls
        from safetensors.torch import load_file, save_file
        model = torch.nn.Sequential(torch.nn.Linear(5, 3),
                                    torch.nn.BatchNorm1d(3))
        with torch.no_grad():
            model[1].running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        ls.save_safetensors(model, path)
        loaded = load_file(path)
        expected = dict(model.named_parameters())
        expected.update((n, b) for n, b in model.named_buffers()
                        if b.is_floating_point())
        self.assertEqual(sorted(loaded), sorted(expected))
        for name, t in expected.items():
            self.assertTrue(torch.equal(loaded[name], t.detach()), name)
        # And back: a file the package wrote loads into a fresh model.
        other = torch.nn.Sequential(torch.nn.Linear(5, 3),
                                    torch.nn.BatchNorm1d(3))
        path2 = os.path.join(tempfile.mkdtemp(), "n.safetensors")
        save_file({k: v.contiguous() for k, v in loaded.items()}, path2)
        ls.load_safetensors(other, path2)
        for (name, a), b in zip(model.state_dict().items(),
                                other.state_dict().values()):
            if a.is_floating_point():
                self.assertTrue(torch.equal(a, b), name)

    def test_the_server_writes_the_same_model_at_the_end(self):
        tmp = tempfile.mkdtemp()
        worker = os.path.join(tmp, "worker.safetensors")
        server = os.path.join(tmp, "server.safetensors")
        results, log = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: train_args(worker if r == 0 else None, steps=6,
                                 model="bn"), 2,
            server_flags=[f"--weights_file={server}"])
        for code, output in results:
            self.assertEqual(code, 0, output)
        self.assertIn("weights of version 6 in", log)
        mine, theirs = harness.read_weights(worker), harness.read_weights(server)
        self.assertEqual(sorted(mine), sorted(theirs))
        self.assertIn("1.running_var", theirs)
        for name in mine:
            self.assertEqual(mine[name][0], theirs[name][0], name)
            np.testing.assert_array_equal(mine[name][1], theirs[name][1], name)

    def test_lockstep_ctl_has_the_weights_written_on_request(self):
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "now.safetensors")
        server = harness.Server(1, ["--exit_when_done=false",
                                    f"--weights_file={path}"])
        try:
            (code, output), = harness.finish([harness.start_worker(
                PYTHON, "torch_train.py", train_args(steps=5),
                [server.address], 0, 1)], 120)
            self.assertEqual(code, 0, output)
            self.assertFalse(os.path.exists(path))  # The server still runs.
            run = subprocess.run([harness.binary("lockstep_ctl"), "checkpoint",
                                  server.address], capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertEqual(run.stdout.strip(),
                             f"{server.address}: weights of version 5 in {path}")
            weights = harness.read_weights(path)
            self.assertEqual(sorted(weights),
                             ["0.bias", "0.weight", "2.bias", "2.weight"])
        finally:
            server.stop()

    def test_weights_file_with_several_shards_is_refused(self):
        run = subprocess.run(
            [harness.binary("lockstep_server"), "--listen=127.0.0.1:0",
             "--workers=1", "--num_shards=2", "--shard=0",
             "--weights_file=/tmp/x"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 2)
        self.assertIn("--weights_file needs the whole model on one shard",
                      run.stderr)

    def test_a_missing_tensor_is_named(self):
        import lockstep.torch as ls
        from safetensors.torch import save_file
        path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        save_file({"0.weight": torch.zeros(3, 5)}, path)
        with self.assertRaises(ls.LockstepError) as e:
            ls.load_safetensors(torch.nn.Sequential(torch.nn.Linear(5, 3)),
                                path)
        self.assertIn("0.bias", str(e.exception))


class JobFeaturesTest(unittest.TestCase):
    """What lockstep_worker has works for Python workers unchanged."""

    def launch(self, launcher_flags, env=None, steps=8):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        run = subprocess.run(
            [harness.binary("lockstep_launch"), "--workers=2",
             *launcher_flags, "--", PYTHON,
             os.path.join(harness.WORKERS, "torch_train.py"),
             f"--steps={steps}", f"--out={out}"],
            capture_output=True, text=True, timeout=300,
            env=dict(os.environ, **(env or {})))
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"[worker1] done version {steps}", run.stdout)
        return run.stdout, harness.read_weights(out)

    def test_mutual_tls_and_a_token_over_two_shards(self):
        tls = tempfile.mkdtemp()
        subprocess.run(["bash", os.path.join(harness.HERE, "..", "..", "deploy",
                                             "tls", "make_certs.sh"), tls],
                       check=True, capture_output=True, timeout=120)
        token = os.path.join(tls, "token")
        with open(token, "w") as f:
            f.write("s3cret-token-for-the-test\n")
        os.chmod(token, 0o600)
        out, weights = self.launch(["--ps=2", "--tls", f"--tls_dir={tls}",
                                    f"--token_file={token}"])
        self.assertIn("(mutual TLS, bearer token)", out)
        self.assertIn("[ps1]", out)
        plain, plain_weights = self.launch(["--ps=2"])
        # The same job in plaintext ends with the same weights.
        for name in weights:
            np.testing.assert_array_equal(weights[name][1],
                                          plain_weights[name][1], name)

    def test_bf16_on_the_wire_trains_close_to_fp32(self):
        _, fp32 = self.launch([], steps=20)
        _, bf16 = self.launch([], env={"LOCKSTEP_WIRE_DTYPE": "bf16"},
                              steps=20)
        differ = max(harness.max_relative_difference(bf16[n][1], fp32[n][1])
                     for n in fp32)
        # bf16 keeps 8 bits of mantissa: close, and not the same bits.
        self.assertGreater(differ, 0)
        self.assertLess(differ, 0.05)


class SyncModesTest(unittest.TestCase):
    """Async and SSP jobs of Python workers run to their end."""

    def check(self, mode, versions):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        results, log = harness.run_job(
            PYTHON, "torch_train.py",
            lambda r: train_args(out if r == 0 else None, steps=10, sync=mode),
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
