"""lockstep.TrainerStatus and lockstep.keras.callbacks.TrainerStatusCallback
against a local HTTPS stand-in for Kubeflow Trainer's status endpoint
(tests/security/trainer_status_stub.py, with make_certs.sh's
certificates): rank 0 posts the proposal's body with the projected token;
other ranks, and a pod given no endpoint, send nothing; a refused token
costs the script nothing."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import harness

import lockstep

REPO = os.path.realpath(os.path.join(harness.HERE, "..", ".."))
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/mnist/status"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.projected.token"
ENV = ("KUBEFLOW_TRAINER_STATUS_SERVER_URL",
       "KUBEFLOW_TRAINER_STATUS_SERVER_CA_CERT",
       "KUBEFLOW_TRAINER_STATUS_SERVER_TOKEN")


def metric(status, name):
    found = [m["value"] for m in status["metrics"] if m["name"] == name]
    return found[0] if found else None


class StubTestCase(unittest.TestCase):
    """The stub, up for the class; each test reads its own requests."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lockstep_tstatus_")
        certs = os.path.join(cls.dir, "certs")
        subprocess.run(["bash", os.path.join(REPO, "deploy", "tls",
                                             "make_certs.sh"), certs],
                       check=True, capture_output=True, timeout=60)
        cls.ca = os.path.join(certs, "ca.pem")
        cls.out = os.path.join(cls.dir, "stub.jsonl")
        port_file = os.path.join(cls.dir, "stub.port")
        cls.stub = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "tests", "security",
                                          "trainer_status_stub.py"),
             os.path.join(certs, "server.pem"),
             os.path.join(certs, "server.key"), TOKEN, port_file, cls.out])
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file) and time.monotonic() < deadline:
            if cls.stub.poll() is not None:
                raise RuntimeError("the status stub exited")
            time.sleep(0.02)
        with open(port_file, encoding="utf-8") as f:
            cls.url = f"https://127.0.0.1:{f.read().strip()}{PATH}"

    @classmethod
    def tearDownClass(cls):
        cls.stub.kill()
        cls.stub.wait(timeout=10)

    def setUp(self):
        open(self.out, "w").close()  # Each test reads its own requests.
        self.saved = {k: os.environ.get(k) for k in ENV}

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def endpoint(self, token=TOKEN):
        token_file = os.path.join(self.dir, "token")
        with open(token_file, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        os.environ.update(dict(zip(ENV, (self.url, self.ca, token_file))))

    def requests(self):
        with open(self.out, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class TrainerStatusTest(StubTestCase):

    def run_job(self, rank=0):
        """Ten steps of two epochs, validation figures after the first,
        then the test figures; the last step's post goes out before
        finish() (the end must still carry the step's figures)."""
        status = lockstep.TrainerStatus(10, 2, examples_per_step=64,
                                        every_s=0, rank=rank)
        for step in range(1, 11):
            epoch = 1 if step <= 5 else 2
            status.step(step, epoch, loss=1.0 / step, accuracy=step / 20)
            if step == 5:
                status.epoch_end(1, 5, val_loss=0.5, val_accuracy=0.75)
        time.sleep(1.0)
        status.finish(10, test_loss=0.25, test_accuracy=0.875)
        return status

    def test_rank_zero_posts_progress_and_the_end(self):
        self.endpoint()
        self.assertTrue(self.run_job().active is False)  # finish() ends it
        requests = self.requests()
        self.assertGreaterEqual(len(requests), 2, requests)
        last_progress = -1
        for r in requests:
            self.assertEqual((r["path"], r["status"]), (PATH, 200), r)
            status = json.loads(r["body"])["trainerStatus"]
            self.assertGreaterEqual(status["progressPercentage"], last_progress)
            last_progress = status["progressPercentage"]
            self.assertEqual(metric(status, "totalSteps"), "10", status)
            self.assertEqual(metric(status, "totalEpochs"), "2", status)
            self.assertRegex(status["lastUpdatedTime"],
                             r"^20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        end = json.loads(requests[-1]["body"])["trainerStatus"]
        self.assertEqual(end["progressPercentage"], 100)
        self.assertEqual(end["estimatedRemainingSeconds"], 0)
        self.assertEqual({m["name"]: m["value"] for m in end["metrics"]}, {
            "loss": "0.1000", "accuracy": "0.5000", "currentStep": "10",
            "totalSteps": "10", "currentEpoch": "2", "totalEpochs": "2",
            "examplesPerSecond": metric(end, "examplesPerSecond"),
            "val_loss": "0.5000", "val_accuracy": "0.7500",
            "test_loss": "0.2500", "test_accuracy": "0.8750"})
        self.assertGreater(float(metric(end, "examplesPerSecond")), 0)

    def test_other_ranks_and_no_endpoint_send_nothing(self):
        self.endpoint()
        self.assertFalse(self.run_job(rank=1).active)
        for k in ENV:
            os.environ.pop(k)
        status = lockstep.TrainerStatus(10, 2, rank=0)
        self.assertFalse(status.active)
        status.step(1, 1, loss=1.0, accuracy=0.5)
        status.finish(1)
        self.assertEqual(self.requests(), [])

    def test_a_refused_token_costs_the_script_nothing(self):
        self.endpoint(token="not-the-token")
        start = time.monotonic()
        self.run_job()
        requests = self.requests()
        self.assertTrue(requests)
        self.assertEqual({r["status"] for r in requests}, {401})
        self.assertLess(time.monotonic() - start, 30)

    def test_bad_arguments_are_refused(self):
        with self.assertRaises(ValueError):
            lockstep.TrainerStatus(-1)
        self.endpoint()
        status = lockstep.TrainerStatus(10, 2, every_s=0, rank=0)
        with self.assertRaises(ValueError):
            status.epoch_end(1, 5, val_loss=0.5)
        status.finish(0)


class KerasCallbackTest(StubTestCase):
    def test_fit_reports_steps_validation_and_the_end(self):
        import keras
        import numpy as np
        from lockstep.keras import callbacks
        self.endpoint()
        os.environ.update(LOCKSTEP_RANK="0", LOCKSTEP_WORKERS="1")
        self.addCleanup(os.environ.pop, "LOCKSTEP_RANK")
        self.addCleanup(os.environ.pop, "LOCKSTEP_WORKERS")
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(64, 4)).astype("float32"), np.arange(64) % 3
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), metrics=["accuracy"])
        history = model.fit(
            x, y, batch_size=16, epochs=2, verbose=0,
            validation_data=(x[:16], y[:16]),
            callbacks=[callbacks.TrainerStatusCallback(examples_per_step=16,
                                                       every_s=0)])
        requests = self.requests()
        self.assertGreaterEqual(len(requests), 2, requests)
        self.assertEqual({r["status"] for r in requests}, {200})
        end = json.loads(requests[-1]["body"])["trainerStatus"]
        self.assertEqual(end["progressPercentage"], 100)
        self.assertEqual((metric(end, "currentStep"), metric(end, "totalSteps"),
                          metric(end, "currentEpoch"),
                          metric(end, "totalEpochs")), ("8", "8", "2", "2"))
        # Keras's running figures at the last step are the epoch's.
        self.assertEqual(metric(end, "loss"),
                         f"{history.history['loss'][-1]:.4f}")
        self.assertEqual(metric(end, "val_loss"),
                         f"{history.history['val_loss'][-1]:.4f}")


if __name__ == "__main__":
    unittest.main()
