#!/usr/bin/env python3
"""A discrete-event simulator of one synchronous exchange of gradients
(docs/study.md, "The simulator"): parameter-server shards on hosts of their
own or colocated with the workers, ring all-reduce, and DiLoCo's exchange
once every H steps, on full-duplex links of one rate.

    step_sim.py calibrate --bin-dir build/bin --out CAL.json
    step_sim.py check --calibration CAL.json --study study.csv [--cores 2]
    step_sim.py project --calibration CAL.json --out-dir DIR

`calibrate` measures the costs the simulator is made of, each on its own
with lockstep_bench on loopback (one worker and one shard, or two gloo
ranks; nothing else runs): per byte, the worker's encoding and decoding,
the shard's checked sum and optimizer pass, and what moving a byte through
gRPC and the kernel costs beyond them; per message, a round trip of a tiny
push. `check` simulates the committed study's simulated-link comm runs
with every process sharing this machine's cores (2), as they ran, and
prints the ratio of each measured median to the simulated step. `project`
gives every host cores of its own (a real cluster) and simulates 16 to
1,024 workers.

The model: each process does its CPU work one task at a time; with
--cores=C every task also needs one of C cores shared by the whole run
(this machine), with --cores=0 none (each host has its own). A transfer
takes bytes / B on the sender's uplink and on the receiver's downlink,
cut through (B = the link's rate times 0.956, TCP/IP and Ethernet's share
measured with iperf3), and costs its per-byte kernel and gRPC work on the
receiving host's kernel. Work is served first come, first served, in time order.
"""

import argparse
import collections
import csv
import heapq
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time

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
    """One message: the sender's share of a message's cost, the link, then
    the receiving host's kernel and gRPC work per byte; done(t) when the
    receiving process may take it."""
    o = cal["message_s"] / 4  # A round trip is two messages, two ends each.

    def arrived(t):
        sim.cpu(("kernel", dst), t, nbytes * cal["wire_s_per_byte"], done)

    def leave(t):
        if src == dst:  # The same host: no link.
            arrived(t)
        else:
            sim.link(src, dst, t, nbytes / rate, arrived)
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


def ring_step(cal, workers, model_bytes, rate, cores, backend="gloo"):
    """Seconds of one ring all-reduce (gloo's or grpc-ring's costs): 2(n - 1)
    hops of M/n, each rank sending to the next; a hop starts once the rank
    has the previous one's segment."""
    sim = Sim(cores)
    costs = cal["ring"][backend]
    segment = model_bytes / workers
    hops = 2 * (workers - 1)
    done = [0.0]

    def hop(r, h):
        def run(t):
            if h == hops:
                done[0] = max(done[0], t)
                return
            dst = (r + 1) % workers

            def received(t2):
                sim.cpu(("rank", dst), t2, segment * costs["s_per_byte"],
                        hop(dst, h + 1))

            def sent(t2):
                sim.link(f"w{r}", f"w{dst}", t2, segment / rate, received)
            sim.cpu(("rank", r), t, costs["message_s"], sent)
        return run

    # Every rank starts hop 0 at once; a rank's hop h + 1 waits for the
    # segment of its left neighbour's hop h.
    for r in range(workers):
        sim.at(0.0, hop(r, 0))
    sim.run()
    return done[0]


# ----------------------------------------------------------------------
# calibrate


def bench(bin_dir, args, scratch):
    out = os.path.join(scratch, "bench.json")
    run = subprocess.run([os.path.join(bin_dir, "lockstep_bench"), *args,
                          f"--json={out}"], capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        sys.exit(f"lockstep_bench {' '.join(args)} failed:\n"
                 f"{run.stdout}{run.stderr}")
    with open(out) as f:
        return json.load(f)


def calibrate(a):
    scratch = tempfile.mkdtemp(prefix="step_sim")
    params = 2_500_000
    m = params * 4
    # One worker, one shard, one chunk: nothing overlaps, so the step is the
    # sum of its parts.
    big = bench(a.bin_dir, ["comm", f"--params={params}", "--workers=1",
                            "--ps=1", f"--chunk_bytes={m}", "--iters=20",
                            "--warmup=3"], scratch)
    tiny = bench(a.bin_dir, ["comm", "--params=256", "--workers=1", "--ps=1",
                             "--iters=400", "--warmup=20"], scratch)
    message = tiny["median_step_seconds"]
    cal = {
        "encode_s_per_byte": big["client_encode_seconds"] / m,
        "decode_s_per_byte": big["client_decode_seconds"] / m,
        "accumulate_s_per_byte": big["server_accumulate_seconds"] / m,
        "apply_s_per_byte": big["server_apply_seconds"] / m,
        "message_s": message,
    }
    own = (cal["encode_s_per_byte"] + cal["decode_s_per_byte"] +
           cal["accumulate_s_per_byte"] + cal["apply_s_per_byte"]) * m
    # What is left of the step moved 2M bytes (push and reply).
    cal["wire_s_per_byte"] = max(
        0.0, (big["median_step_seconds"] - own - message) / (2 * m))
    # Two ranks: two hops of M/2 each way; what a hop costs beyond its
    # message is per byte (copy, kernel, sum).
    cal["ring"] = {}
    for backend in ("gloo", "grpc-ring"):
        ring = bench(a.bin_dir, ["comm", f"--params={params}", "--workers=2",
                                 "--ps=1", f"--allreduce_backend={backend}",
                                 "--iters=20", "--warmup=3"], scratch)
        ring_tiny = bench(a.bin_dir, ["comm", "--params=256", "--workers=2",
                                      "--ps=1",
                                      f"--allreduce_backend={backend}",
                                      "--iters=400", "--warmup=20"], scratch)
        hop = ring_tiny["median_step_seconds"] / 2
        cal["ring"][backend] = {
            "message_s": hop,
            "s_per_byte": max(0.0, (ring["median_step_seconds"] - 2 * hop) / m),
            "measured": [ring["median_step_seconds"],
                         ring_tiny["median_step_seconds"]]}
    cal["measured"] = {"big": big["median_step_seconds"], "tiny": message}
    cal["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True,
                                   cwd=os.path.dirname(__file__)).stdout.strip()
    with open(a.out, "w") as f:
        json.dump(cal, f, indent=1, sort_keys=True)
    figures = [(k, v) for k, v in cal.items() if isinstance(v, float)]
    for backend, costs in cal["ring"].items():
        figures += [(f"{backend} {k}", v) for k, v in costs.items()
                    if isinstance(v, float)]
    for k, v in sorted(figures):
        per_byte = k.endswith("per_byte")
        print(f"  {k:28} {v * (1e9 if per_byte else 1e6):10.4f} "
              f"{'ns/byte' if per_byte else 'us'}")
    print(f"written to {a.out}")


# ----------------------------------------------------------------------
# check


def simulate_row(cal, row, cores):
    n, k = int(row["workers"]), int(row["shards"])
    m = float(row["model_bytes"])
    rate = float(row["link_gbit"]) * 1e9 / 8 * PAYLOAD_SHARE
    chunk = float(row["chunk_bytes"]) if row["chunk_bytes"] else None
    if row["mode"] in ("gloo", "grpc-ring"):
        return ring_step(cal, n, m, rate, cores, row["mode"])
    return ps_step(cal, n, k, m, rate, cores,
                   colocated=row["placement"] == "colocated", chunk=chunk)


def check(a):
    with open(a.calibration) as f:
        cal = json.load(f)
    with open(a.study) as f:
        rows = [r for r in csv.DictReader(f)
                if r["link"] == "sim" and r["kind"] == "comm"
                and r["mode"] in ("ps", "gloo", "grpc-ring")
                and r["status"] == "ok"
                and float(r["model_bytes"]) >= a.min_bytes]
    if not rows:
        sys.exit(f"no simulated-link comm rows in {a.study}")
    held = 0
    out = []
    for r in rows:
        simulated = simulate_row(cal, r, a.cores)
        measured = float(r["median_step_s"])
        ratio = measured / simulated
        ok = abs(ratio - 1) <= 0.15
        held += ok
        out.append((r["label"], int(r["workers"]), float(r["model_bytes"]),
                    measured, simulated, ratio, ok))
        print(f"  {r['label']:22} n={r['workers']} M={float(r['model_bytes']) / 1e6:5.1f} MB "
              f"measured {measured:.4f} s  simulated {simulated:.4f} s  "
              f"ratio {ratio:.2f}  {'held' if ok else 'MISSED'}")
    print(f"{held} of {len(rows)} within 15% (cores={a.cores})")
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["label", "workers", "model_bytes", "measured_s",
                        "simulated_s", "ratio", "held"])
            w.writerows(out)


# ----------------------------------------------------------------------
# project


def project(a):
    with open(a.calibration) as f:
        cal = json.load(f)
    rate = a.rate_gbit * 1e9 / 8 * PAYLOAD_SHARE
    rows = []
    for m in a.model_bytes:
        for n in a.workers:
            started = time.time()
            figures = {
                "ps k=n": ps_step(cal, n, n, m, rate, 0),
                "ps k=n colocated": ps_step(cal, n, n, m, rate, 0,
                                            colocated=True),
                "ps k=1": ps_step(cal, n, 1, m, rate, 0),
                "ring": ring_step(cal, n, m, rate, 0),
            }
            for h in (10, 50):
                figures[f"diloco H={h} (per step)"] = \
                    figures["ps k=n colocated"] / h
            for mode, s in figures.items():
                rows.append((mode, n, m, s))
            print(f"  M={m / 1e6:6.1f} MB n={n:5}: " + "  ".join(
                f"{mode} {s * 1e3:.2f} ms" for mode, s in figures.items()) +
                f"  ({time.time() - started:.0f} s to simulate)", flush=True)
    os.makedirs(a.out_dir, exist_ok=True)
    path = os.path.join(a.out_dir, "projection.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "workers", "model_bytes", "step_s"])
        w.writerows(rows)
    print(f"written to {path}")
    crossovers(rows)
    plot(rows, a.out_dir)


def crossovers(rows):
    """For each model size: which exchange is fastest at each n, and where
    the ring and colocated PS trade places."""
    by = {}
    for mode, n, m, s in rows:
        by.setdefault(m, {}).setdefault(n, {})[mode] = s
    for m, per_n in sorted(by.items()):
        last = None
        for n in sorted(per_n):
            f = per_n[n]
            ring, colo = f["ring"], f["ps k=n colocated"]
            leader = "ring" if ring < colo else "ps k=n colocated"
            if last is not None and leader != last:
                print(f"  M={m / 1e6:.1f} MB: {leader} overtakes from n={n}")
            last = leader
            print(f"  M={m / 1e6:.1f} MB n={n}: ring {ring * 1e3:.2f} ms, "
                  f"colocated PS {colo * 1e3:.2f} ms ({ring / colo:.2f}x), "
                  f"dedicated PS {f['ps k=n'] * 1e3:.2f} ms")


def plot(rows, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed "
              "(Debian package python3-matplotlib)")
        return
    sizes = sorted({m for _, _, m, _ in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5))
    axes = axes if len(sizes) > 1 else [axes]
    for ax, m in zip(axes, sizes):
        for mode in dict.fromkeys(r[0] for r in rows):
            pts = sorted((n, s) for md, n, mm, s in rows
                         if md == mode and mm == m)
            ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts],
                    marker="o", label=mode)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_ylabel("exchange per step (ms)")
        ax.set_title(f"M = {m / 1e6:.1f} MB, own cores per host")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    path = os.path.join(out_dir, "study_projection.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"written to {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="measure the costs on loopback")
    c.add_argument("--bin-dir", default="build/bin")
    c.add_argument("--out", required=True)
    k = sub.add_parser("check", help="simulate the study's comm rows")
    k.add_argument("--calibration", required=True)
    k.add_argument("--study", required=True)
    k.add_argument("--cores", type=int, default=2,
                   help="cores every process shares (0: one per process)")
    k.add_argument("--min-bytes", type=float, default=10e6)
    k.add_argument("--out", default="")
    j = sub.add_parser("project", help="own cores per host, 16 to 1,024")
    j.add_argument("--calibration", required=True)
    j.add_argument("--out-dir", required=True)
    j.add_argument("--rate-gbit", type=float, default=1.0)
    j.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")],
                   default=[16, 64, 256, 1024])
    j.add_argument("--model-bytes",
                   type=lambda s: [float(x) for x in s.split(",")],
                   default=[407080.0, 40e6])
    a = p.parse_args()
    {"calibrate": calibrate, "check": check, "project": project}[a.command](a)


if __name__ == "__main__":
    main()
