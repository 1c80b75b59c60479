"""lockstep.torch jobs through real servers: faults and restarts, Ctrl-C,
the safetensors round trip and the job features (mTLS, tokens, bf16)."""

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


class FaultTest(unittest.TestCase):

    def test_a_worker_killed_and_restarted_rejoins_and_the_job_finishes(self):
        out = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        server = harness.Server(2)
        try:
            args = harness.train_args(steps=40, step_sleep_ms=50)
            first = harness.start_worker(PYTHON, "torch_train.py",
                                         harness.train_args(out, steps=40,
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
            args = harness.train_args(steps=30, step_sleep_ms=30)
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


class StandbyTest(unittest.TestCase):

    def test_a_killed_primary_is_replaced_by_its_standby_with_no_step_redone(self):
        out = tempfile.mkdtemp()
        args = harness.train_args(steps=30, step_sleep_ms=30)
        (c0, o0), _ = harness.run_job(
            PYTHON, "torch_train.py", lambda r: args + (
                [f"--out={out}/fault_free.safetensors"] if r == 0 else []),
            2)[0]
        self.assertEqual(c0, 0, o0)
        primary = harness.Server(2, ["--replicas=2"])
        standby = harness.Server(2, [f"--standby_of={primary.address}"])
        try:
            env = {"LOCKSTEP_STANDBY_SERVERS": standby.address}
            workers = [harness.start_worker(
                PYTHON, "torch_train.py", args + (
                    [f"--out={out}/failed_over.safetensors"] if r == 0
                    else []), [primary.address], r, 2, env)
                for r in range(2)]
            seen = harness.read_until(workers[0], "step 8 loss")
            self.assertIn("step 8 loss", seen)
            primary.proc.kill()
            primary.proc.wait(30)
            results = harness.finish(workers, 180)
            for rank, (code, output) in enumerate(results):
                output = (seen if rank == 0 else "") + output
                self.assertEqual(code, 0, output)
                self.assertIn("done version 30", output)
                self.assertIn("registering again", output)
                # The job never steps back: every step once, but for the
                # one in flight at the kill, whose gradient the package
                # drops when it registers again and computes once more.
                steps = [int(line.split()[1]) for line in output.splitlines()
                         if line.startswith("step ")]
                self.assertEqual(sorted(set(steps)), list(range(30)), output)
                self.assertEqual(steps, sorted(steps), output)
                self.assertLessEqual(len(steps), 31, output)
            self.assertEqual(standby.wait(30), 0, standby.log())
            self.assertIn("took over from", standby.log())
            clean = harness.read_weights(f"{out}/fault_free.safetensors")
            failed_over = harness.read_weights(
                f"{out}/failed_over.safetensors")
            self.assertEqual(clean.keys(), failed_over.keys())
            for name, (shape, values) in clean.items():
                self.assertEqual(failed_over[name][0], shape)
                np.testing.assert_array_equal(failed_over[name][1], values,
                                              name)
        finally:
            primary.stop()
            standby.stop()


class SignalTest(unittest.TestCase):

    def test_ctrl_c_ends_a_worker_waiting_in_a_step_at_once(self):
        server = harness.Server(2)  # Rank 1 never comes.
        try:
            worker = harness.start_worker(PYTHON, "torch_train.py",
                                          harness.train_args(steps=5),
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
        # Every parameter and buffer: a strict load_state_dict succeeds.
        expected = model.state_dict()
        self.assertEqual(sorted(loaded), sorted(expected))
        for name, t in expected.items():  # num_batches_tracked as float32.
            self.assertTrue(torch.equal(loaded[name], t.to(torch.float32)),
                            name)
        torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.BatchNorm1d(
            3)).load_state_dict(loaded, strict=True)
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
            lambda r: harness.train_args(worker if r == 0 else None, steps=6,
                                 model="bn"), 2,
            server_flags=[f"--weights_file={server}"])
        for code, output in results:
            self.assertEqual(code, 0, output)
        self.assertIn("weights of version 6 in", log)
        mine, theirs = harness.read_weights(worker), harness.read_weights(server)
        # The worker's file also has the integer buffer the job never held.
        self.assertEqual(sorted(set(mine) - set(theirs)),
                         ["1.num_batches_tracked"])
        self.assertEqual(sorted(set(theirs) - set(mine)), [])
        self.assertIn("1.running_var", theirs)
        for name in theirs:
            self.assertEqual(mine[name][0], theirs[name][0], name)
            np.testing.assert_array_equal(mine[name][1], theirs[name][1], name)

    def test_lockstep_ctl_has_the_weights_written_on_request(self):
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "now.safetensors")
        server = harness.Server(1, ["--exit_when_done=false",
                                    f"--weights_file={path}"])
        try:
            (code, output), = harness.finish([harness.start_worker(
                PYTHON, "torch_train.py", harness.train_args(steps=5),
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
