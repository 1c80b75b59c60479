"""lockstep.keras through real servers: the tutorial, equivalence and the
safetensors round trip."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import harness

import numpy as np

PYTHON = sys.executable
EXAMPLE = os.path.join(harness.HERE, "..", "..", "worker", "python",
                       "examples", "keras_mlp.py")


class TutorialTest(unittest.TestCase):

    def test_the_tutorial_data_is_fashion_mnist_under_numpy_2(self):
        # What the example trains on, read as it reads it, in this venv's
        # numpy 2 (a module that got numpy 2 wrong gave labels all 9).
        from lockstep import _native
        self.assertEqual(np.__version__.split(".")[0], "2", np.__version__)
        for train, count in ((True, 60000), (False, 10000)):
            x, y = _native.load_idx(harness.FASHION, train)
            self.assertEqual((x.shape, y.shape), ((count, 784), (count,)))
            self.assertEqual(np.bincount(y).tolist(), [count // 10] * 10)
            self.assertEqual((float(x.min()), float(x.max())), (0.0, 1.0))

    def test_the_tutorial_reaches_85_to_92_percent_with_two_workers(self):
        out = os.path.join(tempfile.mkdtemp(), "tutorial.safetensors")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        run = subprocess.run(
            [harness.binary("lockstep_launch"), "--workers=2", "--ps=1", "--",
             PYTHON, EXAMPLE, "--epochs=5", f"--save={out}"],
            capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        lines = [l for l in run.stdout.splitlines()
                 if l.startswith("[worker0] Test accuracy")]
        self.assertEqual(len(lines), 1, run.stdout)
        accuracy = float(lines[0].split()[3])
        print(f"tutorial test accuracy {accuracy}", file=sys.stderr)
        # This MLP's plausible band after 5 epochs; 1.0 meant broken labels.
        self.assertGreaterEqual(accuracy, 0.85)
        self.assertLessEqual(accuracy, 0.92)
        self.assertIn("[worker0] Epoch 5/5", run.stdout)
        self.assertIn("final version 2340", run.stdout)  # 5 x 60000/128
        # Its weights load with the safetensors package, bit for bit.
        from safetensors.numpy import load_file
        weights = load_file(out)
        self.assertEqual(sorted(weights),
                         ["dense/bias", "dense/kernel", "dense_1/bias",
                          "dense_1/kernel"])
        self.assertEqual(weights["dense/kernel"].shape, (784, 128))


class EquivalenceTest(unittest.TestCase):

    def run_weights(self, workers, batch, data="arrays"):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        results, log = harness.run_job(
            PYTHON, "keras_train.py",
            lambda r: [f"--batch={batch}", "--steps=20", f"--data={data}"] +
            ([f"--out={out}"] if r == 0 else []), workers, timeout_s=300)
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn("done version 20", output)
        return harness.read_weights(out)

    def test_two_workers_match_one_with_twice_the_batch(self):
        one = self.run_weights(1, 32)
        two = self.run_weights(2, 16)
        self.assertEqual(sorted(one), sorted(two))
        for name in one:
            self.assertLessEqual(
                harness.max_relative_difference(two[name][1], one[name][1]),
                1e-5, name)

    def test_a_sharded_dataset_gives_two_workers_one_workers_weights(self):
        # shard(tf.data.Dataset): step s's global batch is elements
        # [32s, 32s + 32) for one worker of batch 32 and for two of 16.
        one = self.run_weights(1, 32, data="dataset")
        two = self.run_weights(2, 16, data="dataset")
        self.assertEqual(sorted(one), sorted(two))
        for name in one:
            self.assertLessEqual(
                harness.max_relative_difference(two[name][1], one[name][1]),
                1e-5, name)
        # Not the arrays' order: the same weights would mean the data
        # option did nothing.
        arrays = self.run_weights(1, 32)
        self.assertGreater(harness.max_relative_difference(
            arrays["dense/kernel"][1], one["dense/kernel"][1]), 1e-3)

    def test_batch_norm_statistics_end_the_same_on_every_worker(self):
        out = os.path.join(tempfile.mkdtemp(), "w{rank}.safetensors")
        results, _ = harness.run_job(
            PYTHON, "keras_train.py",
            lambda r: ["--batch=16", "--steps=10", "--model=bn",
                       f"--out={out}"], 2, timeout_s=300)
        for code, output in results:
            self.assertEqual(code, 0, output)
        w0 = harness.read_weights(out.format(rank=0))
        w1 = harness.read_weights(out.format(rank=1))
        self.assertEqual(sorted(w0), sorted(w1))
        mean = "batch_normalization/moving_mean"
        self.assertIn(mean, w0)
        for name in w0:
            np.testing.assert_array_equal(w0[name][1], w1[name][1], name)
        # The statistics moved from their initial zeros.
        self.assertGreater(np.abs(w0[mean][1]).max(), 1e-3)


class FailureTest(unittest.TestCase):

    def test_a_refused_update_ends_fit_with_the_permanent_exit_code(self):
        server = harness.Server(1)
        try:
            (code, output), = harness.finish([harness.start_worker(
                PYTHON, "keras_train.py", ["--nan", "--steps=5"],
                [server.address], 0, 1)], 240)
            # TensorFlow wraps it; the exit code is still Lockstep's.
            self.assertEqual(code, 2, output)
            self.assertIn("caused by lockstep.LockstepError: "
                          "INVALID_ARGUMENT", output)
        finally:
            server.stop()

    def test_ctrl_c_ends_fit_while_a_step_waits(self):
        import signal
        import time
        server = harness.Server(2)  # Rank 1 never comes.
        try:
            worker = harness.start_worker(PYTHON, "keras_train.py",
                                          ["--steps=5"], [server.address], 0, 2)
            # Waiting once the server holds its first push: the step cannot
            # close without rank 1.
            def pushes():
                ctl = subprocess.run([harness.binary("lockstep_ctl"), "status",
                                      server.address], capture_output=True,
                                     text=True, timeout=60)
                for line in ctl.stdout.splitlines():
                    fields = line.split()
                    if len(fields) > 4 and fields[1] == server.address:
                        return int(fields[4])
                return 0
            deadline = time.monotonic() + 120
            while pushes() == 0 and time.monotonic() < deadline and \
                    worker.poll() is None:
                time.sleep(0.2)
            self.assertGreater(pushes(), 0)
            self.assertIsNone(worker.poll())
            elapsed, code = harness.interrupt(worker)
            self.assertLess(elapsed, 2.0)
            self.assertEqual(code, -signal.SIGINT)
        finally:
            server.stop()


class SafetensorsTest(unittest.TestCase):

    def test_round_trip_through_the_safetensors_package(self):
        import keras
        import lockstep.keras
        from safetensors.numpy import load_file, save_file

        def make():
            return keras.Sequential([keras.Input((5,)),
                                     keras.layers.Dense(3),
                                     keras.layers.BatchNormalization()])

        model = make()
        path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        lockstep.keras.save_safetensors(model, path)
        loaded = load_file(path)
        self.assertEqual(len(loaded), len(model.weights))
        prefix = model.name + "/"
        for v in model.weights:
            name = v.path[len(prefix):]
            np.testing.assert_array_equal(loaded[name], v.numpy(), name)
        # The package writes, we read: into the same model built afresh, as
        # in a new process.
        keras.utils.clear_session()
        other = make()
        self.assertEqual([v.path for v in other.weights],
                         [v.path for v in model.weights])
        changed = {k: a + 1 for k, a in loaded.items()}
        path2 = os.path.join(tempfile.mkdtemp(), "n.safetensors")
        save_file(changed, path2)
        lockstep.keras.load_safetensors(other, path2)
        for v, mine in zip(other.weights, model.weights):
            np.testing.assert_array_equal(v.numpy(), mine.numpy() + 1, v.path)
        # A model of other shapes is refused, naming the variable.
        keras.utils.clear_session()
        wrong = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3),
                                  keras.layers.BatchNormalization()])
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            lockstep.keras.load_safetensors(wrong, path2)
        self.assertIn("dense/kernel", str(e.exception))


class RoundsTest(unittest.TestCase):
    """SyncOptimizer(sync="localsgd" | "diloco"): rounds of local steps of
    the named optimizer on each worker, then the servers' outer step."""

    def run_weights(self, workers, batch, *extra):
        out = os.path.join(tempfile.mkdtemp(), "w{rank}.safetensors")
        results, _ = harness.run_job(
            PYTHON, "keras_train.py",
            lambda r: [f"--batch={batch}", "--steps=20", f"--out={out}",
                       *extra], workers, timeout_s=300)
        version = "done version 4" if extra else "done version 20"
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn(version, output)
        return [harness.read_weights(out.format(rank=r))
                for r in range(workers)]

    def test_rounds_of_one_worker_and_of_two(self):
        # One worker's LocalSGD (outer SGD at lr 1: the servers take its
        # weights) is plain training, in 4 rounds of 5 steps instead of 20.
        plain, = self.run_weights(1, 32)
        local, = self.run_weights(1, 32, "--sync=localsgd", "--local_steps=5")
        self.assertEqual(sorted(plain), sorted(local))
        for name in plain:
            self.assertLessEqual(harness.max_relative_difference(
                local[name][1], plain[name][1]), 1e-5, name)
        # Two workers' DiLoCo: both end with the servers' outer weights,
        # which Nesterov's outer step takes away from plain training.
        w0, w1 = self.run_weights(2, 16, "--sync=diloco", "--local_steps=5")
        for name in plain:
            self.assertEqual(w0[name][1].tobytes(), w1[name][1].tobytes(),
                             name)
        self.assertGreater(harness.max_relative_difference(
            w0["dense/kernel"][1], plain["dense/kernel"][1]), 1e-3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
