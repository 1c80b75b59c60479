"""The framework-free parts of the package: cluster, data order, errors."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import harness  # Puts the built package on sys.path.

import numpy as np

from lockstep import Cluster, Job, LockstepError, Shard, _native
from lockstep.cluster import Place


class FakeJob:
    """What Shard reads of a job: rank, workers, seed and the next step."""

    def __init__(self, rank, workers, seed=42):
        self.cluster = Cluster(servers=["x:1"], rank=rank, num_workers=workers,
                               seed=seed)
        self.rank, self.num_workers = rank, workers
        self.joined = True
        self.next_step = 0
        self.steps = 0
        self.rejoins = 0

    def take_step(self):
        self.next_step += 1
        self.steps += 1


class ClusterTest(unittest.TestCase):

    def test_lockstep_variables(self):
        c = Cluster.from_env({"LOCKSTEP_SERVERS": "a:1, b:2",
                              "LOCKSTEP_RANK": "1", "LOCKSTEP_WORKERS": "3",
                              "LOCKSTEP_TLS_CA": "/ca.pem",
                              "LOCKSTEP_WIRE_DTYPE": "bf16",
                              "LOCKSTEP_SEED": "7"})
        self.assertEqual((c.servers, c.rank, c.num_workers),
                         (["a:1", "b:2"], 1, 3))
        self.assertEqual((c.tls_ca, c.wire_dtype, c.seed),
                         ("/ca.pem", "bf16", 7))

    def test_standby_servers_one_per_shard(self):
        env = {"LOCKSTEP_SERVERS": "a:1,b:2", "LOCKSTEP_RANK": "0",
               "LOCKSTEP_WORKERS": "1"}
        self.assertEqual(Cluster.from_env(env).standby_servers, [])
        c = Cluster.from_env({**env, "LOCKSTEP_STANDBY_SERVERS": "c:3, d:4"})
        self.assertEqual(c.standby_servers, ["c:3", "d:4"])
        with self.assertRaises(LockstepError) as e:
            Cluster.from_env({**env, "LOCKSTEP_STANDBY_SERVERS": "c:3"})
        self.assertEqual(e.exception.exit_code, 2)
        self.assertIn("1 standby(s) for 2 server shard(s)", str(e.exception))

    def test_tf_config_fills_what_is_unset(self):
        tf = {"cluster": {"ps": ["p0:2222", "p1:2222"], "chief": ["c:1"],
                          "worker": ["w0:1", "w1:1"]},
              "task": {"type": "worker", "index": 1}}
        c = Cluster.from_env({"TF_CONFIG": json.dumps(tf)})
        # The chief is rank 0 and the workers follow it.
        self.assertEqual((c.servers, c.rank, c.num_workers),
                         (["p0:2222", "p1:2222"], 2, 3))
        c = Cluster.from_env({"TF_CONFIG": json.dumps(tf),
                              "LOCKSTEP_RANK": "0"})
        self.assertEqual(c.rank, 0)

    def test_what_is_missing_or_wrong_is_said(self):
        with self.assertRaises(LockstepError) as e:
            Cluster.from_env({})
        self.assertEqual(e.exception.exit_code, 2)
        self.assertIn("LOCKSTEP_SERVERS", str(e.exception))
        with self.assertRaises(LockstepError) as e:
            Cluster.from_env({"LOCKSTEP_SERVERS": "a:1", "LOCKSTEP_RANK": "2",
                              "LOCKSTEP_WORKERS": "2"})
        self.assertIn("rank 2 is not in [0, 2)", str(e.exception))
        with self.assertRaises(LockstepError) as e:
            Cluster.from_env({"LOCKSTEP_SERVERS": "a:1",
                              "LOCKSTEP_RANK": "one", "LOCKSTEP_WORKERS": "2"})
        self.assertIn("LOCKSTEP_RANK='one'", str(e.exception))
        with self.assertRaises(LockstepError) as e:
            Cluster.from_env({"TF_CONFIG": "{"})
        self.assertIn("TF_CONFIG", str(e.exception))

    def refusal(self, env):
        with self.assertRaises(LockstepError) as e:
            Cluster.from_env(env)
        self.assertEqual(e.exception.exit_code, 2)
        return e.exception.message

    def test_torchrun_variables_where_lockstep_ones_are_unset(self):
        c = Cluster.from_env({"LOCKSTEP_SERVERS": "a:1", "RANK": "3",
                              "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                              "LOCAL_WORLD_SIZE": "2"})
        self.assertEqual((c.rank, c.num_workers, c.local_rank), (3, 4, 1))
        # Both launchers' variables are fine where they agree.
        c = Cluster.from_env({"LOCKSTEP_SERVERS": "a:1", "LOCKSTEP_RANK": "1",
                              "LOCKSTEP_WORKERS": "3", "RANK": "1",
                              "WORLD_SIZE": "3"})
        self.assertEqual((c.rank, c.num_workers, c.local_rank), (1, 3, 0))
        # RANK before TF_CONFIG, whose ps list still gives the servers.
        tf = {"cluster": {"ps": ["p:1"], "worker": ["w0:1", "w1:1"]},
              "task": {"type": "worker", "index": 1}}
        c = Cluster.from_env({"TF_CONFIG": json.dumps(tf), "RANK": "0",
                              "WORLD_SIZE": "2"})
        self.assertEqual((c.servers, c.rank, c.num_workers), (["p:1"], 0, 2))

    def test_kubeflow_trainer_variables_without_torchrun(self):
        pet = {"LOCKSTEP_SERVERS": "a:1", "PET_NNODES": "3",
               "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "2",
               "PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500"}
        c = Cluster.from_env(pet)
        self.assertEqual((c.rank, c.num_workers, c.local_rank), (2, 3, 0))
        c = Cluster.from_env(dict(pet, PET_NPROC_PER_NODE="2", PET_NODE_RANK="1",
                                  LOCAL_RANK="1"))
        self.assertEqual((c.rank, c.num_workers, c.local_rank), (3, 6, 1))
        # torchrun inside the pod: its RANK and WORLD_SIZE, not PET_*.
        c = Cluster.from_env(dict(pet, PET_NPROC_PER_NODE="4", RANK="9",
                                  WORLD_SIZE="12", LOCAL_RANK="1"))
        self.assertEqual((c.rank, c.num_workers, c.local_rank), (9, 12, 1))
        self.assertEqual(
            self.refusal(dict(pet, PET_NPROC_PER_NODE="4")),
            "PET_NPROC_PER_NODE=4 asks for that many processes per node, but "
            "this one was not started by torchrun (no RANK or LOCAL_RANK): "
            "run the script under torchrun, or with one process per node")
        self.assertEqual(
            self.refusal(dict(pet, PET_NPROC_PER_NODE="auto")),
            "PET_NPROC_PER_NODE='auto' is not a whole number")

    def test_a_rank_given_twice_must_agree(self):
        self.assertEqual(
            self.refusal({"LOCKSTEP_SERVERS": "a:1", "LOCKSTEP_RANK": "1",
                          "LOCKSTEP_WORKERS": "2", "RANK": "0",
                          "WORLD_SIZE": "1"}),
            "LOCKSTEP_RANK=1 but RANK=0: two launchers disagree about this "
            "process (torchrun under lockstep_launch?); start it with one of "
            "them")
        self.assertEqual(
            self.refusal({"LOCKSTEP_SERVERS": "a:1", "LOCKSTEP_RANK": "0",
                          "LOCKSTEP_WORKERS": "2", "PET_NNODES": "2",
                          "PET_NODE_RANK": "1"}),
            "LOCKSTEP_RANK=0 but PET_NODE_RANK=1: two launchers disagree "
            "about this process (torchrun under lockstep_launch?); start it "
            "with one of them")
        self.assertEqual(
            self.refusal({"LOCKSTEP_SERVERS": "a:1", "LOCKSTEP_RANK": "0",
                          "LOCKSTEP_WORKERS": "2", "RANK": "0",
                          "WORLD_SIZE": "4"}),
            "LOCKSTEP_WORKERS=2 but torchrun's or Kubeflow Trainer's "
            "variables give 4 workers: two launchers disagree about this "
            "job; start it with one of them")
        self.assertEqual(
            self.refusal({"LOCKSTEP_SERVERS": "a:1", "RANK": "0",
                          "WORLD_SIZE": "2", "LOCAL_RANK": "2",
                          "LOCAL_WORLD_SIZE": "2"}),
            "LOCAL_RANK=2 is not in [0, LOCAL_WORLD_SIZE=2)")
        self.assertEqual(
            self.refusal({"LOCKSTEP_SERVERS": "a:1", "RANK": "2",
                          "WORLD_SIZE": "2"}),
            "rank 2 is not in [0, 2) workers")

    def test_place_needs_no_servers_and_torch_reads_it(self):
        env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
               "LOCAL_WORLD_SIZE": "2"}
        self.assertEqual(Place.from_env(env),
                         Place(rank=1, num_workers=4, local_rank=1))
        with self.assertRaises(LockstepError) as e:
            Place.from_env({"LOCKSTEP_SERVERS": "a:1"})
        self.assertIn("no rank, worker count for this worker:",
                      e.exception.message)
        import unittest.mock
        import lockstep.torch as ls
        with unittest.mock.patch.dict(os.environ, env, clear=True):
            self.assertEqual((ls.rank(), ls.size(), ls.local_rank()),
                             (1, 4, 1))
        with unittest.mock.patch.dict(os.environ, {"LOCKSTEP_RANK": "2",
                                                   "LOCKSTEP_WORKERS": "3"},
                                      clear=True):
            self.assertEqual((ls.rank(), ls.size(), ls.local_rank()),
                             (2, 3, 0))


class ShardTest(unittest.TestCase):

    def batches(self, rank, workers, batch, steps, n=1000):
        x = np.arange(n, dtype=np.float32).reshape(n, 1)
        y = np.arange(n)
        job = FakeJob(rank, workers)
        out = []
        for xb, yb in Shard((x, y), batch_size=batch, epochs=3, job=job):
            np.testing.assert_array_equal(xb[:, 0], yb)
            out.append(yb.copy())
            job.take_step()
            if len(out) == steps:
                break
        return out

    def test_w_workers_see_what_one_worker_with_w_times_the_batch_sees(self):
        one = self.batches(0, 1, 40, 30)
        for workers in (2, 4):
            parts = [self.batches(r, workers, 40 // workers, 30)
                     for r in range(workers)]
            for step in range(30):
                joined = np.concatenate([parts[r][step]
                                         for r in range(workers)])
                np.testing.assert_array_equal(joined, one[step])

    def test_an_epoch_covers_distinct_examples_and_orders_change(self):
        steps = 1000 // 64  # 15 full steps an epoch; 40 examples dropped.
        epochs = self.batches(0, 1, 64, 2 * steps)
        first = np.concatenate(epochs[:steps])
        self.assertEqual(len(np.unique(first)), steps * 64)
        second = np.concatenate(epochs[steps:])
        self.assertFalse(np.array_equal(first, second))

    def test_the_order_is_lockstep_workers(self):
        sampler = _native.ShardedSampler(1000, 2, 1, 8, 42)
        x = np.zeros((1000, 1), np.float32)
        job = FakeJob(1, 2)
        xb, yb = next(iter(Shard((x, np.arange(1000)), batch_size=8, job=job)))
        np.testing.assert_array_equal(yb, sampler.batch_indices(0))
        self.assertEqual(sampler.steps_per_epoch(), 62)

    def test_a_step_not_taken_is_an_error_not_a_loop(self):
        job = FakeJob(0, 1)
        it = iter(Shard((np.zeros((100, 1)), np.zeros(100)), batch_size=10,
                        job=job))
        next(it)
        with self.assertRaises(LockstepError) as e:
            next(it)
        self.assertIn("step() once per batch", str(e.exception))

    def test_without_epochs_one_iteration_is_the_rest_of_the_epoch(self):
        job = FakeJob(0, 1)
        job.next_step = 7
        s = Shard((np.zeros((100, 1)), np.zeros(100)), batch_size=10, job=job)
        self.assertEqual(len(s), 3)  # Steps 7, 8 and 9 of epoch 0.
        count = 0
        for _ in s:
            job.take_step()
            count += 1
        self.assertEqual(count, 3)

    def test_steps_are_known_before_the_job_is_joined(self):
        import unittest.mock
        env = {"LOCKSTEP_SERVERS": "a:1", "LOCKSTEP_RANK": "0",
               "LOCKSTEP_WORKERS": "2"}
        with unittest.mock.patch.dict(os.environ, env):
            s = Shard((np.zeros((1000, 1)), np.zeros(1000)), batch_size=64,
                      epochs=3)
            self.assertEqual(s.steps_per_epoch, 7)  # 1000 // (2 * 64)
            self.assertEqual(s.total_steps, 21)

    def test_bad_data_is_refused(self):
        with self.assertRaises(LockstepError):
            Shard((np.zeros((10, 1)), np.zeros(9)), batch_size=2)
        with self.assertRaises(LockstepError):
            Shard((np.zeros((10, 1)), np.zeros(10)))  # No batch size.


class ScheduleTest(unittest.TestCase):
    """A Job's lr_schedule: lockstep_worker's --lr_* flags as a dict."""

    def job(self, lr_schedule):
        return Job([("w", [2])], optimizer="sgd", lr_schedule=lr_schedule,
                   cluster=Cluster(servers=["127.0.0.1:9"], rank=0,
                                   num_workers=1))

    def test_the_rate_follows_the_schedule_after_the_warmup(self):
        job = self.job({"schedule": "piecewise", "boundaries": [2],
                        "values": [0.5, 0.25], "warmup_steps": 2})
        self.assertEqual([job.learning_rate(s) for s in range(6)],
                         [0.0, 0.25, 0.5, 0.5, 0.5, 0.25])
        self.assertEqual(self.job(None).learning_rate(7), 0.01)

    def test_a_bad_schedule_is_refused_when_the_job_is_made(self):
        with self.assertRaises(LockstepError) as e:
            self.job({"schedule": "exponential", "decay_rate": 0.5})
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("decay_steps must be at least 1, got 0 (exponential "
                      "schedule)", str(e.exception))
        with self.assertRaises(LockstepError) as e:
            self.job({"schedul": "cosine"})
        self.assertIn('lr_schedule has no setting "schedul"', str(e.exception))


class ErrorTest(unittest.TestCase):

    def test_an_unreachable_server_is_retryable_with_exit_code_75(self):
        client = _native.Client(["127.0.0.1:9"], 0, connect_timeout_s=0.5)
        with self.assertRaises(LockstepError) as e:
            client.join([("w", [2])], [], "sgd", 0.1, 0, False, 0.9, 0.999,
                        1e-7, 0, 4 << 20, 1, 1, "sync", 0, 0, 0,
                        np.zeros(2, np.float32), np.zeros(2, np.float32), 0.5)
        self.assertTrue(e.exception.retryable)
        self.assertEqual(e.exception.exit_code, 75)
        self.assertIn(e.exception.code_name, ("DEADLINE_EXCEEDED",
                                              "UNAVAILABLE"))

    def test_names_and_codes_come_from_the_native_module(self):
        # One definition in C++ (common/model/model_signature.h, exit_codes.h):
        # the package reads it, never a copy.
        from lockstep import errors, job
        self.assertEqual(job.SYNC_MODES, ("sync", "async", "ssp"))
        self.assertIs(job.SYNC_MODES, _native.SYNC_MODES)
        self.assertEqual(job.OPTIMIZERS, ("sgd", "momentum", "adam", "adamw"))
        self.assertEqual((errors.EXIT_FAILURE, errors.EXIT_PERMANENT,
                          errors.EXIT_RETRYABLE, errors.EXIT_TERMINATED),
                         (1, 2, 75, 143))
        bad = errors.error("INVALID_ARGUMENT", "no such thing")
        self.assertEqual((bad.code, bad.code_name, bad.retryable,
                          bad.exit_code), (3, "INVALID_ARGUMENT", False, 2))
        gone = errors.error("UNAVAILABLE", "server away")
        self.assertEqual((gone.code, gone.retryable, gone.exit_code),
                         (14, True, 75))
        with self.assertRaises(ValueError):
            errors.error("NOT_A_CODE", "x")

    def test_an_uncaught_error_ends_the_script_with_its_exit_code(self):
        script = ("import lockstep.errors as e; e.install_exit_codes(); "
                  "raise e.LockstepError(14, 'UNAVAILABLE', 'gone', True, 75)")
        run = subprocess.run([sys.executable, "-c", script],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ,
                                      PYTHONPATH=harness.PYTHON_DIR))
        self.assertEqual(run.returncode, 75)
        self.assertIn("UNAVAILABLE: gone", run.stderr)

    def test_the_launcher_refuses_worker_flags_with_a_command(self):
        run = subprocess.run([harness.binary("lockstep_launch"), "--lr=0.1",
                              "--", "python3", "train.py"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 2)
        self.assertIn("--lr=0.1 is a lockstep_worker flag, but the workers "
                      "run python3", run.stderr)

    def test_the_launcher_names_a_command_it_cannot_find(self):
        run = subprocess.run([harness.binary("lockstep_launch"), "--workers=1",
                              "--", "no-such-program-anywhere"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("no-such-program-anywhere", run.stdout + run.stderr)
        self.assertIn("not found in PATH", run.stdout + run.stderr)

    def test_buffers_must_be_float32_and_contiguous(self):
        with self.assertRaises(TypeError):
            _native.write_safetensors("/dev/null", [("a", [2])],
                                      np.zeros(2, np.float64))
        with self.assertRaises(ValueError):
            _native.write_safetensors("/dev/null", [("a", [2])],
                                      np.zeros(4, np.float32)[::2])

    def test_safetensors_round_trip_and_refusals(self):
        path = os.path.join(tempfile.mkdtemp(), "a.safetensors")
        values = np.arange(7, dtype=np.float32) - 3.5
        _native.write_safetensors(path, [("a/b", [2, 2]), ("c", [3])], values)
        (n1, s1, v1), (n2, s2, v2) = _native.read_safetensors(path)
        self.assertEqual((n1, s1, n2, s2), ("a/b", [2, 2], "c", [3]))
        np.testing.assert_array_equal(np.concatenate([v1, v2]), values)
        with open(path, "ab") as f:
            f.write(b"junk")  # Bytes after the tensors: not a whole file.
        with self.assertRaises(LockstepError) as e:
            _native.read_safetensors(path)
        self.assertEqual(e.exception.code_name, "DATA_LOSS")


if __name__ == "__main__":
    unittest.main(verbosity=2)
