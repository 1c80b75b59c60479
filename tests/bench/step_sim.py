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
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_sim_model import (  # noqa: E402
    PAYLOAD_SHARE, ps_step, ring_step)

# ----------------------------------------------------------------------
# calibrate


REPEATS = 5  # Each figure is the median of this many runs.


def bench(bin_dir, args, scratch):
    """The median of each figure of REPEATS runs of `lockstep_bench ARGS`:
    the machine is shared and single runs move by 2x."""
    runs = [bench_once(bin_dir, args, scratch) for _ in range(REPEATS)]
    return {k: statistics.median(r[k] for r in runs) for k, v in
            runs[0].items() if isinstance(v, (int, float))
            and not isinstance(v, bool)}


def bench_once(bin_dir, args, scratch):
    out = os.path.join(scratch, "bench.json")
    run = subprocess.run([os.path.join(bin_dir, "lockstep_bench"), *args,
                          f"--json={out}"], capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        sys.exit(f"lockstep_bench {' '.join(args)} failed:\n"
                 f"{run.stdout}{run.stderr}")
    with open(out) as f:
        return json.load(f)


def busy_seconds():
    """CPU seconds this machine has been busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def step_cpu(bin_dir, args, scratch):
    """CPU seconds per step of `lockstep_bench ARGS`: two runs, 20 and 120
    steps, differenced; the median of REPEATS such pairs."""
    per_step = []
    for _ in range(REPEATS):
        used = []
        for iters in (20, 120):
            before = busy_seconds()
            bench_once(bin_dir, [*args, f"--iters={iters}", "--warmup=3"],
                       scratch)
            used.append(busy_seconds() - before)
        per_step.append((used[1] - used[0]) / 100)
    return statistics.median(per_step)


SINK = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); c, _ = s.accept()
view = memoryview(bytearray(1 << 20))
while c.recv_into(view): pass
"""
SOURCE = """
import socket, sys, time
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); break
    except OSError:
        time.sleep(0.05)
data = bytes(1 << 20)
for _ in range(int(sys.argv[3])): c.sendall(data)
"""


def tcp_cpu_per_byte(where, mib):
    """CPU seconds per byte of `mib` MiB sent over TCP between two
    processes: `where` is (sink argv prefix, source argv prefix, address)."""
    sink_prefix, source_prefix, address = where
    before = busy_seconds()
    sink = subprocess.Popen([*sink_prefix, sys.executable, "-c", SINK,
                             address, "45119"])
    try:
        subprocess.run([*source_prefix, sys.executable, "-c", SOURCE, address,
                        "45119", str(mib)], check=True, timeout=120)
        sink.wait(timeout=60)
    finally:
        sink.kill()
    return (busy_seconds() - before) / (mib << 20)


def forward_cost(script):
    """What the simulated links add per byte (veth, bridge, HTB): TCP's CPU
    per byte between two simulated hosts minus the same on loopback. 0,
    with a note, where no cluster can be made (not root)."""
    if os.geteuid() != 0:
        print("  not root: no simulated cluster, forward_s_per_byte = 0")
        return 0.0
    loop = tcp_cpu_per_byte(([], [], "127.0.0.1"), 2000)
    subprocess.run(["bash", script, "up", "--hosts=2", "--rate=1000mbit",
                    "--name=lssc"], check=True, capture_output=True,
                   timeout=120)
    try:
        run = ["bash", script, "run", "--name=lssc"]
        sim = tcp_cpu_per_byte(([*run, "h0"], [*run, "h1"], "10.214.0.1"),
                               250)
    finally:
        subprocess.run(["bash", script, "down", "--name=lssc"],
                       capture_output=True, timeout=120)
    return max(0.0, sim - loop)


def calibrate(a):
    scratch = tempfile.mkdtemp(prefix="step_sim")
    params = 1 << 20
    m = params * 4
    # One worker, one shard, one chunk (4 MiB, the servers' largest): nothing
    # overlaps, so the step is the sum of its parts.
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
    # The CPU the step takes (this machine's, the difference of two runs of
    # 20 and 120 steps, so that start-up cancels out) beyond the phases is
    # the kernel's and gRPC's work on the two messages' bytes, at both ends:
    # 4M bytes' worth. The machine must be otherwise idle.
    cpu = step_cpu(a.bin_dir, ["comm", f"--params={params}", "--workers=1",
                               "--ps=1", f"--chunk_bytes={m}"], scratch)
    own = (cal["encode_s_per_byte"] + cal["decode_s_per_byte"] +
           cal["accumulate_s_per_byte"] + cal["apply_s_per_byte"]) * m
    cal["step_cpu_s"] = cpu
    cal["wire_s_per_byte"] = max(0.0, (cpu - own - message) / (4 * m))
    cal["forward_s_per_byte"] = forward_cost(a.cluster_script)
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
            if a.rotated:
                # PS with each worker starting at its own shard, as
                # docs/study.md brackets the workers' order with.
                figures = {
                    "ps k=n rotated": ps_step(cal, n, n, m, rate, 0,
                                              rotate=True),
                    "ps k=n colocated rotated": ps_step(
                        cal, n, n, m, rate, 0, colocated=True, rotate=True),
                }
            else:
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
    path = os.path.join(a.out_dir, "projection-rotated.csv" if a.rotated
                        else "projection.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "workers", "model_bytes", "step_s"])
        w.writerows(rows)
    print(f"written to {path}")
    if not a.rotated:
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
    c.add_argument("--cluster-script", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
        "sim", "cluster.sh"))
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
    j.add_argument("--rotated", action="store_true",
                   help="only PS k=n, each worker starting at its own shard "
                        "(projection-rotated.csv)")
    a = p.parse_args()
    {"calibrate": calibrate, "check": check, "project": project}[a.command](a)


if __name__ == "__main__":
    main()
