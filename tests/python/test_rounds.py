"""Job(sync="localsgd" | "diloco"): rounds of local steps are synchronous
steps of the signature; settings that cannot hold are refused before any
server is reached. (The rounds themselves: test_torch.py's
CrossImplementationTest.test_diloco_rounds.)"""

import unittest

import harness  # noqa: F401 (puts the built package on sys.path)
from lockstep import Cluster, Job, LockstepError, _native
from lockstep.job import AVERAGE


class RoundsTest(unittest.TestCase):
    """sync="localsgd" or "diloco": a synchronous signature with rounds."""

    def job(self, **options):
        options.setdefault("optimizer", "sgd")
        return Job([("w", [2])], cluster=Cluster(servers=["127.0.0.1:9"],
                                                 rank=0, num_workers=1),
                   **options)

    def test_rounds_are_synchronous_steps_of_the_signature(self):
        job = self.job(sync="diloco")
        self.assertEqual((job.sync, job.rounds, job.local_steps),
                         ("sync", "diloco", 10))
        job = self.job(sync="localsgd", local_steps=50)
        self.assertEqual((job.rounds, job.local_steps), ("localsgd", 50))
        self.assertEqual(_native.ROUNDS_MODES, ("localsgd", "diloco"))

    def test_settings_that_cannot_hold_are_refused(self):
        cases = [
            ({"sync": "diloco", "optimizer": AVERAGE}, "no summation mode"),
            ({"local_steps": 5}, "need sync=localsgd or diloco"),
            ({"inner_state_dir": "/tmp"}, "inner_state_dir need sync="),
            ({"sync": "diloco", "inner_state_dir": "/proc/self"},
             "inner_state_dir: cannot write /proc/self/"),
            ({"sync": "diloco", "local_steps": 1},
             "local_steps must be in [2, 1000000], got 1"),
            ({"sync": "localsgd", "outer_momentum": 0.5},
             "outer_momentum needs diloco"),
            ({"sync": "diloco", "outer_lr": -1.0},
             "outer_lr must be positive and finite, got -1"),
        ]
        for options, message in cases:
            with self.assertRaises(LockstepError, msg=str(options)) as e:
                self.job(**options)
            self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
            self.assertIn(message, str(e.exception))


if __name__ == "__main__":
    unittest.main()
