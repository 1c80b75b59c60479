"""The simulator's model (step_sim.py runs it): processes that do their
CPU work one task at a time, optionally on a pool of cores the whole run
shares, full-duplex links, and the exchanges made of them: a synchronous
PS step (shards on hosts of their own or colocated with the workers) and
a ring all-reduce. Work is served first come, first served, in time
order; every figure is in seconds, bytes or bytes per second."""

import collections
import heapq
import itertools
import math

PAYLOAD_SHARE = 0.956     # iperf3 --bidir: 953 of 1000 Mbit/s.
MIN_CHUNK = 256 << 10     # common/model/chunk_plan.h's auto chunks.
MAX_CHUNK = 4 << 20


def auto_chunk(model_bytes, shards):
    """lockstep's --chunk_bytes=auto: one chunk per shard up to 1 MiB a
    shard, else about 32 a shard within [256 KiB, 4 MiB]."""
    per_shard = model_bytes / shards
    if per_shard <= 1 << 20:
        return per_shard
    return min(MAX_CHUNK, max(MIN_CHUNK, per_shard / 32))


class Sim:
    """Processes, a shared pool of cores and links, served in time order."""

    def __init__(self, cores):
        self.pool = [0.0] * cores if cores else None
        self.free = {}      # link -> when it is free
        self.queues = {}    # process -> its waiting tasks
        self.busy = set()   # processes running a task
        self.events = []    # (time, seq, callback)
        self.seq = itertools.count()
        self.now = 0.0

    def at(self, t, callback):
        heapq.heappush(self.events, (t, next(self.seq), callback))

    def run(self):
        while self.events:
            self.now, _, callback = heapq.heappop(self.events)
            callback(self.now)
        return self.now

    def cpu(self, proc, ready, cost, done):
        """`cost` seconds of `proc`'s work, queued at `ready` behind what
        the process has waiting; then done(end). With a pool, a task also
        takes the core that frees first when the process starts it."""
        def enqueue(t):
            self.queues.setdefault(proc, collections.deque()).append(
                (cost, done))
            if proc not in self.busy:
                self._start(proc, t)
        self.at(ready, enqueue)

    def _start(self, proc, t):
        queue = self.queues[proc]
        if not queue:
            self.busy.discard(proc)
            return
        self.busy.add(proc)
        cost, done = queue.popleft()
        start = t
        if self.pool is not None:
            i = min(range(len(self.pool)), key=self.pool.__getitem__)
            start = max(t, self.pool[i])
            self.pool[i] = start + cost

        def finish(end):
            done(end)
            self._start(proc, end)
        self.at(start + cost, finish)

    def link(self, src, dst, ready, seconds, done):
        """A message over src's uplink and dst's downlink, each for
        `seconds` at its rate, cut through: the downlink may start as soon
        as the uplink has, and cannot end before it. Each link serves its
        messages in the order they reach it (a busy downlink does not hold
        the sender's uplink: the kernels buffer what waits). Calls
        done(end)."""
        def up(t):
            key = ("up", src)
            start_up = max(t, self.free.get(key, 0.0))
            end_up = start_up + seconds
            self.free[key] = end_up

            def down(t2):
                key2 = ("down", dst)
                start = max(t2, self.free.get(key2, 0.0))
                end = max(start + seconds, end_up)
                self.free[key2] = end
                self.at(end, done)
            self.at(start_up, down)
        self.at(ready, up)


def transfer(sim, cal, src, dst, ready, nbytes, rate, done):
    """One message: the sender's share of a message's fixed cost, then the
    bytes, which cost the link's time and, streamed alongside it, the
    kernel and gRPC work per byte at both ends (each end's own, on its
    host: wire_s_per_byte) and, on the simulated links, their forwarding
    (forward_s_per_byte, on any core of this machine); done(t) when all of
    it is over and the receiving process may take the message."""
    o = cal["message_s"] / 4  # A round trip is two messages, two ends each.
    wire = nbytes * cal["wire_s_per_byte"]
    forward = nbytes * cal.get("forward_s_per_byte", 0.0)

    def leave(t):
        parts = [("kernel", src, wire), ("kernel", dst, wire)]
        if sim.pool is not None and forward > 0 and src != dst:
            parts.append(("forward", next(sim.seq), forward))
        left = [len(parts) + (src != dst)]
        end = [t]

        def part_done(t2):
            end[0] = max(end[0], t2)
            left[0] -= 1
            if left[0] == 0:
                done(end[0])
        for kind, where, cost in parts:
            sim.cpu((kind, where), t, cost, part_done)
        if src != dst:
            sim.link(src, dst, t, nbytes / rate, part_done)
    sim.cpu(("send", src), ready, o, leave)


def ps_step(cal, workers, shards, model_bytes, rate, cores, colocated=False,
            chunk=None):
    """Seconds of one synchronous PS exchange: every worker pushes its
    gradient chunk by chunk to the shard that owns each chunk; a shard sums
    the copies, runs the optimizer on a chunk once all have arrived, and
    answers every worker with it."""
    sim = Sim(cores)
    chunk = chunk or auto_chunk(model_bytes, shards)
    per_shard = model_bytes / shards
    sizes = []
    left = per_shard
    while left > 1e-9:
        sizes.append(min(chunk, left))
        left -= sizes[-1]
    host_of_worker = [f"w{i}" for i in range(workers)]
    host_of_shard = [f"w{j}" if colocated else f"s{j}" for j in range(shards)]
    arrived = {}
    finished = [0.0]
    o = cal["message_s"] / 4

    def decoded(t):
        finished[0] = max(finished[0], t)

    def published(j, size):
        def run(t):
            # Every waiting push is answered at once; starting at worker j
            # spreads the shards' replies over the workers' downlinks.
            for i in range(workers):
                w = (j + i) % workers

                def decode(t2, w=w):
                    sim.cpu(("worker", w), t2,
                            size * cal["decode_s_per_byte"] + o, decoded)
                transfer(sim, cal, host_of_shard[j], host_of_worker[w], t,
                         size, rate, decode)
        return run

    def accumulated(j, q, size):
        def run(t):
            arrived[(j, q)] = arrived.get((j, q), 0) + 1
            if arrived[(j, q)] == workers:
                sim.cpu(("shard", j), t, size * cal["apply_s_per_byte"],
                        published(j, size))
        return run

    def received(j, q, size):
        def run(t):
            sim.cpu(("shard", j), t, size * cal["accumulate_s_per_byte"] + o,
                    accumulated(j, q, size))
        return run

    def encoded(w, j, q, size):
        def run(t):
            transfer(sim, cal, host_of_worker[w], host_of_shard[j], t, size,
                     rate, received(j, q, size))
        return run

    for w in range(workers):
        # Each worker walks the shards from its own rank, as pushes to every
        # shard are in flight at once.
        for q, size in enumerate(sizes):
            for s in range(shards):
                j = (s + w) % shards
                sim.cpu(("worker", w), 0.0, size * cal["encode_s_per_byte"],
                        encoded(w, j, q, size))
    sim.run()
    return finished[0]


RING_PIECE = 256 << 10  # The pieces a ring hop is pipelined in.


def ring_step(cal, workers, model_bytes, rate, cores, backend="gloo"):
    """Seconds of one ring all-reduce (gloo's or grpc-ring's costs): 2(n - 1)
    hops of M/n, each rank sending to the next, in pieces of at most 256 KiB
    so that a hop's sending, link and summing overlap; piece p of a hop
    leaves once the rank has piece p of its left neighbour's previous hop.
    The calibrated per-hop message cost is spread over the pieces."""
    sim = Sim(cores)
    costs = cal["ring"][backend]
    segment = model_bytes / workers
    pieces = max(1, math.ceil(segment / RING_PIECE))
    piece = segment / pieces
    message = costs["message_s"] / pieces
    hops = 2 * (workers - 1)
    done = [0.0]

    def hop(r, h, p):
        def run(t):
            if h == hops:
                done[0] = max(done[0], t)
                return
            dst = (r + 1) % workers

            def received(t2):
                sim.cpu(("rank", dst), t2, piece * costs["s_per_byte"],
                        hop(dst, h + 1, p))

            def sent(t2):
                sim.link(f"w{r}", f"w{dst}", t2, piece / rate, received)
            sim.cpu(("rank", r), t, message, sent)
        return run

    # Every rank starts hop 0's pieces at once.
    for r in range(workers):
        for p in range(pieces):
            sim.at(0.0, hop(r, 0, p))
    sim.run()
    return done[0]
