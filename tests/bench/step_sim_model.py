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
PIECE = 64 << 10


def auto_chunk(model_bytes, shards):
    """lockstep's --chunk_bytes=auto (common/model/chunk_plan.h): one chunk
    per shard up to 1 MiB a shard, else the largest power of two from
    256 KiB to 4 MiB within a 32nd of a shard's bytes."""
    per_shard = model_bytes / shards
    if per_shard <= 1 << 20:
        return per_shard
    chunk = MIN_CHUNK
    while chunk * 2 <= per_shard / 32 and chunk * 2 <= MAX_CHUNK:
        chunk *= 2
    return chunk


class Sim:
    """Processes, a shared pool of cores and links, served in time order."""

    def __init__(self, cores):
        self.pool = [0.0] * cores if cores else None
        self.free = {}      # downlink (host) -> when it is free
        self.uplinks = {}   # host -> [busy, {flow: its waiting pieces}]
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

    def link(self, src, dst, ready, seconds, done, flow=None, pieces=1):
        """A message over src's uplink and dst's downlink, each for
        `seconds` at its rate, cut through: the downlink may start as soon
        as the uplink has, and cannot end before it. The message goes in
        `pieces`, and an uplink takes turns among its flows (TCP connections
        share a link) piece by piece, each flow's pieces in order; a
        downlink serves pieces in the order their uplinks start them (a busy
        downlink does not hold the sender's uplink: the kernels buffer what
        waits). Calls done(end) once the last piece is through."""
        def arrive(t):
            up = self.uplinks.setdefault(src, [False, {}])
            queue = up[1].setdefault(flow, collections.deque())
            for i in range(pieces):
                queue.append((dst, seconds / pieces,
                              done if i == pieces - 1 else None))
            if not up[0]:
                self._send(src, t)
        self.at(ready, arrive)

    def _send(self, src, t):
        up = self.uplinks[src]
        if not up[1]:
            up[0] = False
            return
        up[0] = True
        flow = next(iter(up[1]))
        queue = up[1].pop(flow)
        dst, seconds, done = queue.popleft()
        if queue:
            up[1][flow] = queue  # To the back: the next flow goes first.
        # The downlink starts no earlier than the uplink, so it ends no
        # earlier either.
        end = max(t, self.free.get(dst, 0.0)) + seconds
        self.free[dst] = end
        if done is not None:
            self.at(end, done)
        self.at(t + seconds, lambda t2: self._send(src, t2))


def after_all(count, start, done):
    """A callback to hand `count` parts that run at once from `start`:
    done(t) once every part has called it, t the last one's end."""
    left = [count, start]

    def part_done(t):
        left[0] -= 1
        left[1] = max(left[1], t)
        if left[0] == 0:
            done(left[1])
    return part_done


def transfer(sim, cal, src, dst, ready, nbytes, rate, done, flow=None):
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
        part_done = after_all(len(parts) + (src != dst), t, done)
        for kind, where, cost in parts:
            sim.cpu((kind, where), t, cost, part_done)
        if src != dst:
            sim.link(src, dst, t, nbytes / rate, part_done, flow,
                     max(1, math.ceil(nbytes / PIECE)))
    sim.cpu(("send", src), ready, o, leave)


def chunk_plan(model_bytes, shards, chunk):
    """common/model/chunk_plan.h's plan: chunks of `chunk` bytes in order,
    each to the shard holding the fewest bytes so far (the lowest index on
    ties); [(shard, bytes)] by chunk index."""
    held = [0.0] * shards
    plan = []
    left = model_bytes
    while left > 1e-9:
        size = min(chunk, left)
        j = min(range(shards), key=lambda s: (held[s], s))
        held[j] += size
        plan.append((j, size))
        left -= size
    return plan


def push_window(workers, chunk):
    """worker/exchange/ps/push_window.h's `auto`: as many pushes per worker
    out to a shard as keep every worker's at a shard within 32 MiB, 1 to 4."""
    return int(min(4, max(1, (32 << 20) // (workers * max(chunk, 1)))))


def push_order(plan, shards, rank):
    """The order a worker pushes its chunks: last first, as backprop readies
    them. With rank > 0, the same chunks of each shard in the same order,
    but the shards taken in turns starting `rank` shards on: what
    docs/study.md measured against the workers' order (rank 0's)."""
    order = list(reversed(range(len(plan))))
    if rank == 0 or shards < 2:
        return order
    first = (plan[order[0]][0] - rank) % shards
    seen = collections.Counter()
    keyed = []
    for q in order:
        j = plan[q][0]
        keyed.append(((seen[j], (first - j) % shards), q))
        seen[j] += 1
    return [q for _, q in sorted(keyed)]


def ps_step(cal, workers, shards, model_bytes, rate, cores, colocated=False,
            chunk=None, window=None, rotate=False):
    """Seconds of one synchronous PS exchange, as worker/exchange/ps/
    push_step.cc makes it: every worker pushes its gradient's chunks, last
    first, keeping at most `window` pushes out to each shard (the next goes
    when a reply comes back); a shard sums the copies of a chunk, runs the
    optimizer on it once all have arrived and answers every worker's push
    with it. With `rotate` each worker starts its turns over the shards
    `rank` shards on (a change the workers do not make: see push_order)."""
    sim = Sim(cores)
    per_shard = model_bytes / shards
    chunk = chunk or auto_chunk(model_bytes, shards)
    # With several shards a chunk is at most a shard's share.
    plan = chunk_plan(model_bytes, shards,
                      min(chunk, math.ceil(per_shard)) if shards > 1 else chunk)
    if window is None:
        window = push_window(workers, chunk)
    window = window or math.inf  # 0: no limit, as --push_window=0.
    host_of_worker = [f"w{i}" for i in range(workers)]
    host_of_shard = [f"w{j}" if colocated else f"s{j}" for j in range(shards)]
    arrived = collections.Counter()
    # (worker, shard) -> its pushes waiting for the window / out now.
    waiting = collections.defaultdict(collections.deque)
    out = collections.Counter()
    finished = [0.0]
    o = cal["message_s"] / 4

    def push(w, q, t):
        j, size = plan[q]
        out[w, j] += 1
        sim.cpu(("worker", w), t, size * cal["encode_s_per_byte"],
                lambda t2: transfer(sim, cal, host_of_worker[w],
                                    host_of_shard[j], t2, size, rate,
                                    received(q), ("push", w, j)))

    def decoded(w, j):
        def run(t):
            finished[0] = max(finished[0], t)
            out[w, j] -= 1
            queue = waiting.get((w, j))
            if queue:
                push(w, queue.popleft(), t)
        return run

    def published(q):
        j, size = plan[q]

        def run(t):
            # Every waiting push is answered at once; starting at worker j
            # spreads the shards' replies over the workers' downlinks.
            for i in range(workers):
                w = (j + i) % workers

                def decode(t2, w=w):
                    sim.cpu(("worker", w), t2,
                            size * cal["decode_s_per_byte"] + o,
                            decoded(w, j))
                transfer(sim, cal, host_of_shard[j], host_of_worker[w], t,
                         size, rate, decode, ("reply", j, w))
        return run

    def accumulated(q):
        def run(t):
            arrived[q] += 1
            if arrived[q] == workers:
                j, size = plan[q]
                sim.cpu(("shard", j), t, size * cal["apply_s_per_byte"],
                        published(q))
        return run

    def received(q):
        def run(t):
            j, size = plan[q]
            sim.cpu(("shard", j), t, size * cal["accumulate_s_per_byte"] + o,
                    accumulated(q))
        return run

    for w in range(workers):
        for q in push_order(plan, shards, w if rotate else 0):
            j = plan[q][0]
            if out[w, j] < window:
                push(w, q, 0.0)
            else:
                waiting[w, j].append(q)
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
                # On the simulated links a hop's bytes also cost their
                # forwarding (veth, bridge, HTB) on this machine's cores,
                # as a PS transfer's do; the piece is in once both are.
                forward = piece * cal.get("forward_s_per_byte", 0.0)
                if sim.pool is None or forward <= 0:
                    sim.link(f"w{r}", f"w{dst}", t2, piece / rate, received)
                    return
                part = after_all(2, t2, received)
                sim.link(f"w{r}", f"w{dst}", t2, piece / rate, part)
                sim.cpu(("forward", next(sim.seq)), t2, forward, part)
            sim.cpu(("rank", r), t, message, sent)
        return run

    # Every rank starts hop 0's pieces at once.
    for r in range(workers):
        for p in range(pieces):
            sim.at(0.0, hop(r, 0, p))
    sim.run()
    return done[0]
