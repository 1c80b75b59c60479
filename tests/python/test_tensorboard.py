"""The worker's --tensorboard_dir files, read back with TensorBoard's own
reader (tensorboard.backend.event_processing.event_accumulator), after a
real two-worker job through lockstep_launch with --validation_split.

The figures must be the ones the worker reports elsewhere: the epoch
scalars equal the summary JSON's history (as float32, TensorBoard's
simple_value), the step losses rank 0's --step_log.
"""

import csv
import glob
import json
import os
import socket
import struct
import subprocess
import tempfile
import unittest

import harness
from tensorboard.backend.event_processing import event_accumulator

# 640 synthetic examples, 0.2 held out: 512 trained on by 2 workers x 32,
# 8 steps an epoch, 2 epochs.
WORKERS, BATCH, EPOCHS, EXAMPLES, SPLIT = 2, 32, 2, 640, 0.2
HELD_OUT = 128
STEPS = (EXAMPLES - HELD_OUT) // (WORKERS * BATCH) * EPOCHS
LEARNING_RATE = 0.001  # Adam's default.

STEP_TAGS = ["step/loss", "step/accuracy", "step/examples_per_sec",
             "step/seconds", "step/learning_rate"]
EPOCH_TAGS = ["epoch/loss", "epoch/accuracy", "epoch/examples_per_sec",
              "epoch/learning_rate", "epoch/val_loss", "epoch/val_accuracy"]


def f32(x):
    """x as the float32 an Event's simple_value holds."""
    return struct.unpack("f", struct.pack("f", x))[0]


class TensorBoardTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lockstep_tb_")
        cls.logdir = os.path.join(cls.dir, "tb")
        summary = os.path.join(cls.dir, "summary.json")
        step_log = os.path.join(cls.dir, "steps.csv")
        cls.job = subprocess.run(
            [harness.binary("lockstep_launch"), f"--workers={WORKERS}",
             "--ps=1", f"--summary_json={summary}", "--",
             "--dataset=synthetic", f"--synthetic_examples={EXAMPLES}",
             "--layers=784,16,10", f"--batch_size={BATCH}",
             f"--epochs={EPOCHS}", f"--validation_split={SPLIT}",
             f"--tensorboard_dir={cls.logdir}", f"--step_log={step_log}",
             "--progress=lines"],
            capture_output=True, text=True, timeout=300)
        cls.summary = None
        if os.path.exists(summary):
            with open(summary) as f:
                cls.summary = json.load(f)
        cls.steps = []
        if os.path.exists(step_log):
            with open(step_log) as f:
                cls.steps = list(csv.DictReader(f))

    def setUp(self):
        self.assertEqual(self.job.returncode, 0,
                         self.job.stdout + self.job.stderr)
        self.assertIsNotNone(self.summary)

    def accumulator(self):
        files = glob.glob(os.path.join(self.logdir, "*"))
        self.assertEqual(len(files), 1, files)  # Rank 0's only.
        acc = event_accumulator.EventAccumulator(
            files[0], size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        return files[0], acc

    def test_one_file_named_as_tensorflow_names_them(self):
        path, _ = self.accumulator()
        name = os.path.basename(path)
        prefix = "events.out.tfevents."
        self.assertTrue(name.startswith(prefix), name)
        seconds, host = name[len(prefix):].split(".", 1)
        self.assertTrue(seconds.isdigit(), name)
        self.assertEqual(host, socket.gethostname())

    def test_exact_tags_and_steps(self):
        _, acc = self.accumulator()
        self.assertEqual(sorted(acc.Tags()["scalars"]),
                         sorted(STEP_TAGS + EPOCH_TAGS))
        for tag in STEP_TAGS:
            self.assertEqual([e.step for e in acc.Scalars(tag)],
                             list(range(1, STEPS + 1)), tag)
        for tag in EPOCH_TAGS:
            self.assertEqual([e.step for e in acc.Scalars(tag)],
                             list(range(1, EPOCHS + 1)), tag)

    def test_epoch_values_equal_the_summary_history(self):
        _, acc = self.accumulator()
        history = self.summary["history"]
        self.assertEqual(history["epoch"], list(range(1, EPOCHS + 1)))
        for name in ["loss", "accuracy", "examples_per_sec", "val_loss",
                     "val_accuracy"]:
            self.assertEqual(len(history[name]), EPOCHS, name)
            self.assertEqual([e.value for e in acc.Scalars("epoch/" + name)],
                             [f32(v) for v in history[name]], name)
        # The summary's own figures have ten significant digits.
        self.assertEqual(float("%.10g" % history["loss"][-1]),
                         self.summary["train_loss"])
        self.assertEqual([e.value for e in acc.Scalars("epoch/learning_rate")],
                         [f32(LEARNING_RATE)] * EPOCHS)

    def test_step_values_equal_the_step_log(self):
        _, acc = self.accumulator()
        self.assertEqual(len(self.steps), STEPS)
        losses = [e.value for e in acc.Scalars("step/loss")]
        for row, loss in zip(self.steps, losses):
            # The log has six decimals.
            self.assertAlmostEqual(float(row["loss"]), loss, delta=1e-6)
        self.assertEqual([e.value for e in acc.Scalars("step/learning_rate")],
                         [f32(LEARNING_RATE)] * STEPS)
        for e in acc.Scalars("step/accuracy"):
            # A batch of 32: a multiple of 1/32, exact in float32.
            self.assertEqual(e.value * BATCH, round(e.value * BATCH))
        for tag in ["step/seconds", "step/examples_per_sec"]:
            self.assertTrue(all(e.value > 0 for e in acc.Scalars(tag)), tag)

    def test_progress_shows_validation_each_epoch(self):
        out = self.job.stdout
        self.assertIn(f"validating on {HELD_OUT})", out)
        for rank in range(WORKERS):
            finals = [l for l in out.splitlines()
                      if l.startswith(f"[worker{rank}] 8/8 [")]
            self.assertEqual(len(finals), EPOCHS, out)
            for line in finals:
                self.assertIn(" - val_loss: ", line)
                self.assertIn(" - val_accuracy: ", line)


if __name__ == "__main__":
    unittest.main()
