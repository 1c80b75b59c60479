"""lockstep.keras.callbacks with two real workers: rank-0-only checkpoints
and metrics averaged over the workers (workers/keras_callbacks_train.py)."""

import json
import os
import sys
import tempfile
import unittest

import harness

import numpy as np

PYTHON = sys.executable
EPOCHS = 2


def run(extra=(), workers=2):
    d = tempfile.mkdtemp(prefix="lockstep_kcb_")
    results, log = harness.run_job(
        PYTHON, "keras_callbacks_train.py",
        lambda r: [f"--dir={d}", f"--epochs={EPOCHS}", *extra], workers,
        timeout_s=300)
    return d, results, log


def read(d, name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)


def label_means():
    """Each rank's mean label in an epoch, from shard's order alone: 64
    examples with labels i/64, global batch 16, rank r's 8 from 16s + 8r."""
    return [float(np.mean([i / 64 for s in range(4)
                           for i in range(16 * s + 8 * r, 16 * s + 8 * r + 8)]))
            for r in (0, 1)]


class CheckpointTest(unittest.TestCase):

    def check(self, full_model):
        import keras
        d, results, _ = run(["--full_model"] if full_model else [])
        for code, output in results:
            self.assertEqual(code, 0, output)
            self.assertIn(f"done version {EPOCHS * 4}", output)
        name = "ckpt-rank0" + (".keras" if full_model else ".weights.h5")
        self.assertEqual([f for f in sorted(os.listdir(d))
                          if f.startswith("ckpt")], [name])
        path = os.path.join(d, name)
        if full_model:
            # Without its optimizer: a SyncOptimizer belongs to a job.
            model = keras.models.load_model(path, compile=False,
                                            safe_mode=False)
        else:
            model = keras.Sequential([keras.Input((4,)),
                                      keras.layers.Dense(1)])
            model.load_weights(path)
        finals = [harness.read_npz(os.path.join(d, f"final{r}.npz"))
                  for r in (0, 1)]
        self.assertEqual(len(model.weights), len(finals[0]))
        for i, v in enumerate(model.weights):
            for final in finals:
                np.testing.assert_array_equal(v.numpy(), final[f"w{i}"])
        # And the weights moved from rank 0's initial ones: one step's
        # gradient is not zero here.
        self.assertGreater(np.abs(finals[0]["w1"]).max(), 1e-4)

    def test_only_rank_0_writes_the_weights_and_they_are_the_jobs(self):
        self.check(full_model=False)

    def test_only_rank_0_writes_the_model_and_it_loads(self):
        self.check(full_model=True)

    def test_rank0_only_takes_a_callback(self):
        import lockstep.keras
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            lockstep.keras.callbacks.rank0_only("ModelCheckpoint")
        self.assertIn("takes a keras.callbacks.Callback", str(e.exception))


class MetricAverageTest(unittest.TestCase):

    def test_the_logs_are_the_mean_of_the_two_workers(self):
        d, results, _ = run(["--average"])
        for code, output in results:
            self.assertEqual(code, 0, output)
        logs = [read(d, f"logs{r}.json") for r in (0, 1)]
        expected = label_means()
        self.assertNotAlmostEqual(expected[0], expected[1])
        for epoch in range(EPOCHS):
            local = [logs[r]["local"][epoch] for r in (0, 1)]
            self.assertEqual([sorted(l) for l in local],
                             [["label_mean", "loss"]] * 2)
            # Each worker's own metric is its examples' (the oracle).
            for r in (0, 1):
                self.assertAlmostEqual(local[r]["label_mean"], expected[r],
                                       delta=1e-6)
            self.assertNotAlmostEqual(local[0]["loss"], local[1]["loss"],
                                      delta=1e-6)
            for r in (0, 1):
                seen = logs[r]["seen"][epoch]
                self.assertEqual(sorted(seen), ["label_mean", "loss"])
                self.assertAlmostEqual(seen["label_mean"],
                                       np.mean(expected), delta=1e-6)
                for key in seen:
                    mean = (local[0][key] + local[1][key]) / 2
                    self.assertLessEqual(abs(seen[key] - mean),
                                         1e-6 * max(1.0, abs(mean)), key)
                    # History, which Keras keeps after the callbacks ran.
                    self.assertEqual(logs[r]["history"][key][epoch],
                                     seen[key])
            # Both workers see the same numbers.
            self.assertEqual(logs[0]["seen"][epoch], logs[1]["seen"][epoch])

    def test_workers_that_log_different_keys_are_told(self):
        _, results, _ = run(["--average", "--extra_metric_on_rank=1"])
        for rank, (code, output) in enumerate(results):
            self.assertEqual(code, 2, output)
            self.assertIn("FAILED_PRECONDITION: MetricAverageCallback at the "
                          "end of epoch 1: the workers log different keys "
                          f"(this worker, rank {rank}: label_mean, loss"
                          + (", mae" if rank == 1 else ")"), output)


if __name__ == "__main__":
    unittest.main(verbosity=2)
