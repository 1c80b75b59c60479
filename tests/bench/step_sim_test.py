"""step_sim_model against exchanges worked out by hand: with every CPU
cost zero the PS and ring steps are their link schedules, and a pool of
cores serializes what the processes would do at once."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_sim_model import (Sim, auto_chunk, chunk_plan,  # noqa: E402
                            ps_step, push_order, push_window,
                            ring_step)

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
        # k = n = 4 shards, 64 chunks a shard: every link carries M. Every
        # worker walks its chunks in the same order (last first), so each
        # chunk's 4 copies reach its shard at once and the last lands 3
        # chunk times after its worker sent it, at M / B + 3 C / B; its 4
        # replies then leave the shard one after another (4 C / B).
        chunk = M / 4 / 64
        step = ps_step(costs(), 4, 4, M, B, 0, chunk=chunk)
        self.assertAlmostEqual(step, M / B + 7 * chunk / B, places=9)

    def test_the_push_window_waits_for_replies(self):
        # One worker, one shard, two chunks of C. A window of 1 sends the
        # second push only once the first's reply is back (4 C / B); a
        # window of 2 sends it behind the first, while the first's reply
        # comes back (3 C / B).
        c = M / 2
        self.assertAlmostEqual(ps_step(costs(), 1, 1, M, B, 0, chunk=c,
                                       window=1), 4 * c / B, places=9)
        self.assertAlmostEqual(ps_step(costs(), 1, 1, M, B, 0, chunk=c,
                                       window=2), 3 * c / B, places=9)
        # 0 is no limit, as --push_window=0.
        self.assertAlmostEqual(ps_step(costs(), 1, 1, M, B, 0, chunk=c,
                                       window=0), 3 * c / B, places=9)

    def test_the_plan_and_the_window_are_the_workers(self):
        # chunk_plan.h: each chunk to the shard with the fewest bytes so
        # far; push_window.h's auto: 32 MiB a shard over every worker's
        # chunk, 1 to 4 (push_window_test.cc checks the C++ alike).
        self.assertEqual(chunk_plan(10, 3, 3),
                         [(0, 3), (1, 3), (2, 3), (0, 1)])
        self.assertEqual(push_window(2, 4 << 20), 4)
        self.assertEqual(push_window(4, 4 << 20), 2)
        self.assertEqual(push_window(8, 4 << 20), 1)
        self.assertEqual(push_window(64, 256 << 10), 2)
        # chunk_plan.h's auto chunk: a power of two within a 32nd of a
        # shard's bytes, 256 KiB to 4 MiB; one chunk up to 1 MiB a shard.
        self.assertEqual(auto_chunk(4e7, 4), 256 << 10)
        self.assertEqual(auto_chunk(4e8, 4), 2 << 20)
        self.assertEqual(auto_chunk(4e9, 4), 4 << 20)
        self.assertEqual(auto_chunk(4e5, 16), 25000)

    def test_the_rotated_order_keeps_each_shards_order(self):
        # 8 chunks over 4 shards (chunk i on shard i % 4): rank 0 pushes
        # last first, as the workers do; a rotated rank takes the shards in
        # turns from its own, each shard's chunks still last first.
        plan = chunk_plan(32, 4, 4)
        self.assertEqual(push_order(plan, 4, 0), [7, 6, 5, 4, 3, 2, 1, 0])
        self.assertEqual(push_order(plan, 4, 1), [6, 5, 4, 7, 2, 1, 0, 3])
        self.assertEqual(push_order(plan, 4, 2), [5, 4, 7, 6, 1, 0, 3, 2])

    def test_flows_share_an_uplink_piece_by_piece(self):
        # Two 1 s messages from one host to two others, in 4 pieces of
        # 0.25 s: as two flows, once the first's first piece is out they
        # take turns (1, 1, 2, 1, 2, 1, 2, 2: the first ends at 1.5 s, the
        # second at 2 s); as one flow the first goes whole, then the second.
        for flows, ends in (((1, 2), [1.5, 2.0]), ((None, None), [1.0, 2.0])):
            sim = Sim(0)
            done = []
            sim.link("a", "b", 0.0, 1.0, done.append, flows[0], pieces=4)
            sim.link("a", "c", 0.0, 1.0, done.append, flows[1], pieces=4)
            sim.run()
            self.assertEqual(sorted(done), ends)

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

    def test_ring_hops_pay_the_simulated_links_forwarding_on_shared_cores(self):
        # Two ranks, one 256 KiB piece a hop, links without limit, 1 ns a
        # byte to forward: two hops in which both ranks' pieces need a core.
        # One core forwards the 4 pieces in turn, two cores 2 at a time;
        # with a core per host (a real cluster) nothing is forwarded.
        piece = 256 << 10
        cal = costs(forward_s_per_byte=1e-9)
        self.assertAlmostEqual(ring_step(cal, 2, 2 * piece, 1e15, 1),
                               4 * piece * 1e-9, places=9)
        self.assertAlmostEqual(ring_step(cal, 2, 2 * piece, 1e15, 2),
                               2 * piece * 1e-9, places=9)
        self.assertLess(ring_step(cal, 2, 2 * piece, 1e15, 0), 1e-8)


if __name__ == "__main__":
    unittest.main()
