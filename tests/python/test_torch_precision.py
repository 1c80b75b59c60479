"""bfloat16 and float16 models through real servers (2 workers, loopback).

The servers keep float32 masters; a low-precision model is converted at
the edge. Oracles: the same job run in float32 from the same (rounded)
initial weights, plain PyTorch with one process and the whole batch, the
server's own weights file, and round-to-nearest-even written here in
numpy (independent of torch's conversion).

Tolerances, with u the unit roundoff (bfloat16 2**-8, float16 2**-11):
- SyncOptimizer against float32: the model is the masters rounded to
  nearest, at most u/2 of max|w| away from them. The masters drift from
  the float32 run's by the gradients' error summed over the steps: each
  gradient carries a few roundings of u (the forward and backward in the
  low precision; only the weights' in float16, whose matmul runs in
  float32 on the CPU), times lr times the steps, which is the weights'
  whole change, here at most a quarter of max|w| (checked). A handful of
  roundings of u times a quarter is about u; so 2u for the model in all,
  u for the masters (measured: 0.6u and 0.3u for bfloat16, 0.7u and
  0.1u for float16).
- DistributedOptimizer against plain PyTorch: both step in the low
  precision, so each of the 10 steps may round a weight to the other
  neighbour (2u of max|w|) where the mean of two half-batch gradients
  and the whole batch's gradient differ by a rounding; as a random walk,
  about sqrt(10) * 2u / 2, so 6u (measured: about 2u).
"""

import os
import subprocess
import sys
import tempfile
import unittest

import harness

import numpy as np

PYTHON = sys.executable
SCRIPT = os.path.join(harness.WORKERS, "torch_lowp_train.py")
U = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
# PyTorch 1.13 has no float16 matmul on the CPU: the layers widen their
# float16 parameters to float32 to compute (the gradient still arrives in
# float16, through the cast).
COMPUTE = {"bfloat16": [], "float16": ["--compute=float32"]}


def round_bf16(a):
    """float32 -> bfloat16 -> float32, to nearest, ties to even."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def round_to(dtype, a):
    if dtype == "bfloat16":
        return round_bf16(a)
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


class Run:
    """One 2-worker job's results: each rank's model (.npz, float32 values
    of the model's tensors, "initial." ones too), the server's weights file
    and, in sync mode, rank 0's SyncOptimizer.save_safetensors."""

    def __init__(self, test, directory, name, *flags):
        out = os.path.join(directory, name + "{rank}.npz")
        self.server_file = os.path.join(directory, name + ".server.st")
        self.masters_file = os.path.join(directory, name + ".masters.st")
        results, log = harness.run_job(
            PYTHON, "torch_lowp_train.py",
            lambda r: [f"--out={out}", f"--masters={self.masters_file}",
                       *flags], 2,
            server_flags=[f"--weights_file={self.server_file}"],
            timeout_s=120)
        for code, output in results:
            test.assertEqual(code, 0, output + log)
            test.assertIn("done 10 steps", output)
        self.outputs = [output for _, output in results]
        self.ranks = [harness.read_npz(out.format(rank=r)) for r in (0, 1)]
        self.model = self.ranks[0]

    def server(self):
        return {k: v.reshape(s) for k, (s, v) in
                harness.read_weights(self.server_file).items()}

    def masters(self):
        return {k: v.reshape(s) for k, (s, v) in
                harness.read_weights(self.masters_file).items()}


PARAMETERS = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


class SyncPrecisionTest(unittest.TestCase):
    """SyncOptimizer with a bfloat16 or float16 model."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lockstep_lowp_")

    def check_against_float32(self, dtype):
        flags = ["--mode=sync", f"--init_round={dtype}"]
        low = Run(self, self.dir, "sync_" + dtype, f"--dtype={dtype}",
                  *COMPUTE[dtype], *flags)
        full = Run(self, self.dir, "sync32_" + dtype, "--dtype=float32",
                   *flags)
        self.assertIn(f"dtypes torch.{dtype}\n", low.outputs[0])
        self.assertIn("dtypes torch.float32\n", full.outputs[0])
        u = U[dtype]
        server, server32 = low.server(), full.server()
        for key in PARAMETERS:
            # Both started from rank 0's weights rounded to `dtype`.
            np.testing.assert_array_equal(low.model["initial." + key],
                                          full.model["initial." + key])
            # The derivation's premise: the change is a quarter at most.
            change = np.abs(full.model[key] - full.model["initial." + key])
            self.assertLessEqual(change.max(),
                                 0.25 * np.abs(full.model[key]).max(), key)
            d = harness.max_relative_difference(low.model[key],
                                                full.model[key])
            self.assertLessEqual(d, 2 * u, key)
            d = harness.max_relative_difference(server[key], server32[key])
            self.assertLessEqual(d, u, key)
            # Not the float32 run under another name: the gradients were
            # computed from rounded weights.
            self.assertGreater(d, 0, key)
            self.assertFalse(np.array_equal(low.model[key],
                                            full.model[key]), key)

    def test_autocast_to_bfloat16_is_a_float32_model(self):
        # Autocast keeps float32 parameters and gradients: Lockstep sees a
        # float32 model, whose gradients carry bfloat16's roundings (the
        # masters' bound above).
        flags = ["--mode=sync", "--dtype=float32"]
        cast = Run(self, self.dir, "autocast", "--autocast=bfloat16", *flags)
        full = Run(self, self.dir, "autocast32", *flags)
        for key in PARAMETERS:
            self.assertFalse(np.array_equal(cast.model[key],
                                            full.model[key]), key)
            d = harness.max_relative_difference(cast.model[key],
                                                full.model[key])
            self.assertLessEqual(d, U["bfloat16"], key)

    def check_masters(self, dtype, trained, *flags):
        run = Run(self, self.dir, "masters_" + dtype, "--mode=sync",
                  f"--dtype={dtype}", f"--init_round={dtype}",
                  *COMPUTE[dtype], *flags)
        server = run.server()
        masters = run.masters()
        for key, values in server.items():
            # Every rank's model is the masters rounded to nearest, the
            # float state (batch-norm statistics) too.
            for rank in run.ranks:
                np.testing.assert_array_equal(rank[key],
                                              round_to(dtype, values), key)
        kept = 0
        for key in trained:
            master = server[key]
            # SyncOptimizer.save_safetensors writes the masters themselves.
            np.testing.assert_array_equal(masters[key], master, key)
            # They started as `dtype` values...
            initial = run.model["initial." + key]
            np.testing.assert_array_equal(round_to(dtype, initial), initial)
            kept += np.count_nonzero(round_to(dtype, master) == master)
        # ...and after 10 steps almost none is one any more: float32 masters
        # (an update of a float32 weight lands on a `dtype` value by chance,
        # about once in 2**16 for bfloat16, 2**13 for float16; a few
        # allowed).
        self.assertLessEqual(kept, 4)
        return run

    def test_bfloat16_is_the_float32_job_within_bfloat16s_tolerance(self):
        self.check_against_float32("bfloat16")

    def test_float16_is_the_float32_job_within_float16s_tolerance(self):
        self.check_against_float32("float16")

    def test_bfloat16_model_is_the_fp32_masters_rounded(self):
        run = self.check_masters("bfloat16", PARAMETERS, "--bn")
        self.assertIn("bn.running_var", run.server())
        self.assertIn("dtypes torch.bfloat16 torch.int64\n", run.outputs[0])

    def test_float16_model_is_the_fp32_masters_rounded(self):
        # A frozen float16 layer too: rank 0's, on both ranks, to the bit
        # (the server's state holds it).
        run = self.check_masters("float16", ("fc2.weight", "fc2.bias"),
                                 "--freeze")
        for key in ("fc1.weight", "fc1.bias"):
            self.assertIn(key, run.server())
            for rank in run.ranks:
                np.testing.assert_array_equal(
                    rank[key], run.model["initial." + key], key)


class DistributedPrecisionTest(unittest.TestCase):
    """DistributedOptimizer (SGD with momentum) against plain PyTorch with
    one process and the whole batch, both stepping in the model's dtype."""

    def check(self, name, dtype, *flags):
        directory = tempfile.mkdtemp(prefix="lockstep_lowp_dist_")
        plain_out = os.path.join(directory, "plain.npz")
        plain = subprocess.run(
            [PYTHON, SCRIPT, "--mode=plain", f"--dtype={dtype}",
             f"--out={plain_out}", *flags], capture_output=True, text=True,
            timeout=120)
        self.assertEqual(plain.returncode, 0, plain.stdout + plain.stderr)
        plain = harness.read_npz(plain_out)
        run = Run(self, directory, name, "--mode=dist", f"--dtype={dtype}",
                  *flags)
        w0, w1 = run.ranks
        self.assertEqual(sorted(w0), sorted(plain))
        for key in PARAMETERS:
            # The same mean gradient into the same optimizer: the same bits.
            np.testing.assert_array_equal(w0[key], w1[key], key)
            d = harness.max_relative_difference(w0[key], plain[key])
            self.assertLessEqual(d, 6 * U[dtype], key)
        return run

    def test_bfloat16_model_steps_as_plain_pytorch(self):
        run = self.check("bf16", "bfloat16")
        self.assertIn("dtypes torch.bfloat16\n", run.outputs[0])

    def test_float16_model_steps_as_plain_pytorch(self):
        run = self.check("fp16", "float16", *COMPUTE["float16"])
        self.assertIn("dtypes torch.float16\n", run.outputs[0])

    def test_mixed_bfloat16_and_float32_layers(self):
        # The worker checks every .grad is in its parameter's dtype.
        run = self.check("mixed", "bfloat16", "--mixed")
        self.assertIn("dtypes torch.bfloat16 torch.float32\n",
                      run.outputs[0])


class RefusalExitTest(unittest.TestCase):
    """What is still refused exits 2 (permanent), before any server is
    dialled (the address below has nothing listening)."""

    def run_script(self, code):
        port = harness.free_port()
        return subprocess.run(
            [PYTHON, "-c", "import torch, lockstep.torch as ls\n" + code],
            capture_output=True, text=True, timeout=60,
            env=harness.worker_env([f"127.0.0.1:{port}"], 0, 1))

    def check(self, code, message):
        run = self.run_script(code)
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("lockstep.errors.LockstepError: INVALID_ARGUMENT: "
                      + message, run.stderr)

    def test_float64_parameters_are_refused_with_exit_2(self):
        self.check("ls.SyncOptimizer(torch.nn.Linear(3, 2).double())",
                   "parameter weight is torch.float64; Lockstep trains "
                   "float32, bfloat16 and float16 tensors")

    def test_float64_with_distributed_optimizer_exits_2(self):
        self.check("m = torch.nn.Linear(3, 2).double()\n"
                   "ls.DistributedOptimizer(torch.optim.SGD("
                   "m.parameters(), lr=0.1), m)",
                   "parameter weight is torch.float64")

    def test_a_float64_buffer_is_refused(self):
        self.check("m = torch.nn.BatchNorm1d(2)\n"
                   "m.running_mean = m.running_mean.double()\n"
                   "ls.SyncOptimizer(m)",
                   "buffer running_mean is torch.float64; Lockstep averages")

    def test_an_integer_frozen_parameter_is_refused(self):
        self.check("m = torch.nn.Linear(3, 2)\n"
                   "m.ids = torch.nn.Parameter(torch.arange(3), "
                   "requires_grad=False)\n"
                   "ls.SyncOptimizer(m)",
                   "frozen parameter ids is torch.int64; Lockstep keeps")

    def test_a_malformed_address_exits_2(self):
        run = subprocess.run(
            [PYTHON, "-c", "import torch, lockstep.torch as ls\n"
             "ls.SyncOptimizer(torch.nn.Linear(3, 2))"],
            capture_output=True, text=True, timeout=60,
            env=harness.worker_env(["bad::address"], 0, 1))
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("INVALID_ARGUMENT: server address \"bad::address\"",
                      run.stderr)


if __name__ == "__main__":
    unittest.main()
