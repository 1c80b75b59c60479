"""step_sim_model against exchanges worked out by hand: with every CPU
cost zero the PS and ring steps are their link schedules, and a pool of
cores serializes what the processes would do at once."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_sim_model import ps_step, ring_step  # noqa: E402

B = 1e8  # Bytes per second: every figure below is a multiple of M / B.
M = 8e6


def costs(**given):
    cal = {"encode_s_per_byte": 0.0, "decode_s_per_byte": 0.0,
           "accumulate_s_per_byte": 0.0, "apply_s_per_byte": 0.0,
           "message_s": 0.0, "wire_s_per_byte": 0.0,
           "ring": {"gloo": {"message_s": 0.0, "s_per_byte": 0.0}}}
    cal.update(given)
    return cal


class StepSimTest(unittest.TestCase):

    def test_one_shard_one_chunk_is_pushes_then_replies(self):
        # The shard's downlink takes both workers' M in turn (2 M / B),
        # then its uplink sends both replies (2 M / B more).
        self.assertAlmostEqual(ps_step(costs(), 2, 1, M, B, 0, chunk=M),
                               4 * M / B, places=9)

    def test_dedicated_shards_in_many_chunks_pipeline(self):
        # k = n shards, 64 chunks a shard: every link carries M; only the
        # last chunk's replies are left after the pushes (the drain).
        chunk = M / 4 / 64
        step = ps_step(costs(), 4, 4, M, B, 0, chunk=chunk)
        self.assertGreaterEqual(step, M / B)
        self.assertLessEqual(step, M / B + 4 * chunk / B + 1e-9)

    def test_the_ring_moves_2_n_minus_1_over_n_of_m(self):
        step = ring_step(costs(), 4, M, B, 0)
        self.assertGreaterEqual(step, 2 * 3 * M / (4 * B) - 1e-9)
        self.assertLessEqual(step, 2 * 3 * M / (4 * B) * 1.05)

    def test_a_shared_core_serializes_the_shards_optimizer(self):
        # Two shards' optimizer passes of M/2 each at 1 ns a byte: at once
        # with a core per process, one after the other on a single core.
        cal = costs(apply_s_per_byte=1e-9)
        own = ps_step(cal, 2, 2, M, 1e15, 0, chunk=M / 2)
        shared = ps_step(cal, 2, 2, M, 1e15, 1, chunk=M / 2)
        self.assertAlmostEqual(own, M / 2 * 1e-9, places=6)
        self.assertAlmostEqual(shared, M * 1e-9, places=6)


if __name__ == "__main__":
    unittest.main()
