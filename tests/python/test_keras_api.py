"""lockstep.keras without servers: importing it changes nothing in Keras,
what an old script or an XLA step is told, and shard over a tf.data.Dataset."""

import os
import subprocess
import sys
import types
import unittest
from unittest import mock

import harness

import numpy as np

PYTHON = sys.executable

# Run in a fresh interpreter, so that nothing imported lockstep.keras first.
NO_PATCH = r"""
import keras
classes = [keras.Model, keras.Sequential, keras.optimizers.Optimizer]
before = {c: {k: v for b in c.__mro__ for k, v in vars(b).items()}
          for c in classes}
compile_, fit = keras.Model.compile, keras.Model.fit
import lockstep.keras
assert keras.Model.compile is compile_, keras.Model.compile
assert keras.Model.fit is fit, keras.Model.fit
assert compile_.__module__.startswith("keras."), compile_.__module__
assert fit.__module__.startswith("keras."), fit.__module__
for c in classes:
    after = {k: v for b in c.__mro__ for k, v in vars(b).items()}
    changed = sorted(k for k in set(before[c]) | set(after)
                     if before[c].get(k, None) is not after.get(k, None))
    assert not changed, (c.__name__, changed)
print("unchanged", len(before[keras.Model]))
"""


def small_model():
    import keras
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])


class NoPatchTest(unittest.TestCase):

    def test_importing_lockstep_keras_changes_nothing_in_keras(self):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                   PYTHONPATH=harness.PYTHON_DIR)
        run = subprocess.run([PYTHON, "-c", NO_PATCH], capture_output=True,
                             text=True, timeout=120, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("unchanged", run.stdout)

    def test_a_sync_optimizer_without_its_model_says_what_to_write(self):
        import lockstep.keras
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            lockstep.keras.SyncOptimizer("adam")
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertEqual(e.exception.exit_code, 2)
        self.assertIn('SyncOptimizer("adam", model=model)', str(e.exception))
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            lockstep.keras.SyncOptimizer("adam", model="model")
        self.assertIn("takes the keras.Model", str(e.exception))

    def fit(self, optimizer_for, jit_compile):
        """Fits small_model() for one step with optimizer_for(model); the
        refusal comes before the job is joined, so no server is needed."""
        import keras
        model = small_model()
        model.compile(optimizer=optimizer_for(model), loss="mse",
                      jit_compile=jit_compile)
        x, y = np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)

    def test_an_xla_step_is_refused_with_what_to_do(self):
        import keras
        import lockstep.keras
        makers = {
            "SyncOptimizer": lambda m: lockstep.keras.SyncOptimizer(
                "sgd", model=m),
            "DistributedOptimizer": lambda m: lockstep.keras.
            DistributedOptimizer(keras.optimizers.SGD(), m),
            "DistributedOptimizer without model": lambda m: lockstep.keras.
            DistributedOptimizer(keras.optimizers.SGD()),
        }
        for name, make in makers.items():
            with self.subTest(name), \
                    self.assertRaises(lockstep.keras.LockstepError) as e:
                self.fit(make, jit_compile=True)
            self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
            self.assertIn("compile the model with jit_compile=False",
                          str(e.exception))
        # A custom step compiled with XLA: the optimizer sees the trace.
        import tensorflow as tf
        model = small_model()
        opt = lockstep.keras.SyncOptimizer("sgd", model=model)

        @tf.function(jit_compile=True)
        def step():
            opt.apply([tf.zeros(v.shape) for v in model.trainable_variables],
                      model.trainable_variables)

        # Autograph rewraps the LockstepError in an error of its own.
        with self.assertRaisesRegex(Exception, "INVALID_ARGUMENT: "
                                    "SyncOptimizer exchanges through a "
                                    "tf.py_function, which XLA cannot"):
            step()

    def test_an_optimizer_given_another_model_is_refused(self):
        import lockstep.keras
        other = small_model()
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            self.fit(lambda m: lockstep.keras.SyncOptimizer("sgd",
                                                            model=other),
                     jit_compile=False)
        self.assertIn("not a trainable variable of its model",
                      str(e.exception))
        self.assertIn(other.name, str(e.exception))


class DatasetShardTest(unittest.TestCase):

    def batches(self, dataset, rank, workers, batch):
        import lockstep.keras
        place = {"LOCKSTEP_RANK": str(rank), "LOCKSTEP_WORKERS": str(workers)}
        with mock.patch.dict(os.environ, place):
            sharded = lockstep.keras.shard(dataset, batch_size=batch)
        import tensorflow as tf
        return sharded, [tf.nest.map_structure(lambda t: t.numpy().tolist(), b)
                         for b in sharded]

    def test_two_ranks_get_their_blocks_of_each_global_batch(self):
        import tensorflow as tf
        data = tf.data.Dataset.range(23)
        s0, rank0 = self.batches(data, 0, 2, 3)
        s1, rank1 = self.batches(data, 1, 2, 3)
        # Global batch s is elements [6s, 6s+6): rank 0 the first 3, rank 1
        # the next 3; 18..22 would make an uneven step and are dropped.
        self.assertEqual(rank0, [[0, 1, 2], [6, 7, 8], [12, 13, 14]])
        self.assertEqual(rank1, [[3, 4, 5], [9, 10, 11], [15, 16, 17]])
        self.assertEqual((int(s0.cardinality()), int(s1.cardinality())),
                         (3, 3))
        # What one process with the whole batch sees, batch for batch.
        _, one = self.batches(data, 0, 1, 6)
        self.assertEqual(one, [a + b for a, b in zip(rank0, rank1)])

    def test_a_dataset_of_unknown_length_gives_every_rank_as_many(self):
        import tensorflow as tf
        data = tf.data.Dataset.range(25).filter(lambda v: v != 4)
        self.assertEqual(int(data.cardinality()),
                         int(tf.data.UNKNOWN_CARDINALITY))
        _, rank0 = self.batches(data, 0, 2, 5)
        _, rank1 = self.batches(data, 1, 2, 5)
        self.assertEqual(rank0, [[0, 1, 2, 3, 5], [11, 12, 13, 14, 15]])
        self.assertEqual(rank1, [[6, 7, 8, 9, 10], [16, 17, 18, 19, 20]])

    def test_features_and_labels_stay_paired(self):
        import tensorflow as tf
        y = np.arange(40, dtype=np.int32)
        x = np.stack([y * 10, y * 10 + 1], axis=1).astype(np.float32)
        data = tf.data.Dataset.from_tensor_slices((x, y))
        for rank in (0, 1, 2):
            _, batches = self.batches(data, rank, 3, 4)
            labels = []
            for xb, yb in batches:
                self.assertEqual(xb, [[10 * v, 10 * v + 1] for v in yb])
                labels.append(yb)
            self.assertEqual(labels, [[12 * s + 4 * rank + i for i in range(4)]
                                      for s in range(3)])

    def test_epochs_and_unknown_options_are_refused(self):
        import tensorflow as tf
        import lockstep.keras
        job = types.SimpleNamespace(cluster=types.SimpleNamespace(
            rank=0, num_workers=2))
        data = tf.data.Dataset.range(8)
        for kwargs in ({"epochs": 2}, {"seed": 3}):
            with self.subTest(kwargs), \
                    self.assertRaises(lockstep.keras.LockstepError) as e:
                lockstep.keras.shard(data, 2, job=job, **kwargs)
            self.assertIn("dataset.repeat()", str(e.exception))


class FakeJob:
    """A joined job of two workers whose other worker logged `other`."""
    joined, rank = True, 0

    def __init__(self, other):
        from lockstep._keras_callbacks import _fingerprint
        self.other = {"keys": _fingerprint(sorted(other)),
                      "values": [other[k] for k in sorted(other)]}
        self.calls = []

    def average(self, values, name=""):
        self.calls.append((name, list(values)))
        theirs = self.other[name.rsplit(".", 1)[1]]
        assert len(theirs) == len(values), (name, values, theirs)
        return [(a + b) / 2 for a, b in zip(values, theirs)]


class MetricAverageUnitTest(unittest.TestCase):
    """The callback's side of Job.average, against a fake job."""

    def end_epoch(self, mine, other):
        import lockstep.job
        import lockstep.keras
        job = FakeJob(other)
        with mock.patch.object(lockstep.job, "_current", job):
            lockstep.keras.MetricAverageCallback().on_epoch_end(0, mine)
        return job

    def test_sorted_keys_go_out_and_the_means_come_back_in_place(self):
        logs = {"loss": 1.0, "accuracy": np.float32(0.5)}
        job = self.end_epoch(logs, {"loss": 3.0, "accuracy": 0.75})
        self.assertEqual(logs, {"loss": 2.0, "accuracy": 0.625})
        self.assertEqual([n for n, _ in job.calls],
                         ["lockstep.keras.MetricAverage.keys",
                          "lockstep.keras.MetricAverage.values"])
        self.assertEqual(job.calls[1][1], [0.5, 1.0])  # accuracy, loss

    def test_different_keys_and_non_scalars_are_refused(self):
        import lockstep.keras
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            self.end_epoch({"loss": 1.0}, {"loss": 1.0, "mae": 2.0})
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("the workers log different keys (this worker, rank 0: "
                      "loss)", str(e.exception))
        with self.assertRaises(lockstep.keras.LockstepError) as e:
            self.end_epoch({"loss": [1.0, 2.0]}, {"loss": 1.0})
        self.assertIn("log 'loss' has shape (2,)", str(e.exception))

    def test_without_a_job_it_says_so(self):
        import lockstep.job
        import lockstep.keras
        with mock.patch.object(lockstep.job, "_current", None), \
                self.assertRaises(lockstep.keras.LockstepError) as e:
            lockstep.keras.MetricAverageCallback().on_epoch_end(0, {"a": 1})
        self.assertIn("has joined none", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
