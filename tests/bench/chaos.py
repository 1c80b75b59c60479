#!/usr/bin/env python3
"""A chaos run of a synchronous job, PS or all-reduce, counting what survived.

One server (or --shards of them) and W workers on loopback train a small
MLP (synthetic data, a fixed step count): through the servers with
--sum_order=rank (--sync=ps), or
by all-reduce among the workers with gloo or the gRPC ring
(--sync=allreduce, the server only hosting the coordinator). On a seeded
schedule, one fault at a
time, the run SIGKILLs a random worker or server shard, or SIGSTOPs one for a
drawn time and then SIGCONTs it; what was killed is started again with the
same arguments, as Kubernetes restarts a pod (the server on its port and
checkpoint folder). With --replicas=2 each shard has a standby: a killed
primary is replaced by its standby, and comes back as the standby of the
one that took over. With --min_workers the job is elastic: a killed
worker, or one told to leave (SIGTERM), stays away for --away_s while the
others go on, then joins again. With --python=INTERPRETER the workers are
PyTorch scripts through the Python package. The faults stop at --faults,
at --max_s, or when the job ends first. Then the job must finish by
itself.

A fault-free run with the same flags (and no standby) comes first. At the
end the report
gives the faults injected and survived, the steps redone (PS: a restarted
server goes back to its checkpoint; a standby: the highest version a
worker held minus the one it took over at; all-reduce: the version polled just
before the fault minus the one the re-formed group went on from), the time
lost against the fault-free run, the recovery times, and whether rank 0's
final weights equal the fault-free run's byte for byte, as synchronous PS
with --sum_order=rank and all-reduce promise (elastic all-reduce promises
them up to the order of the sums: a member adds its own shards first, so
such a run takes --tolerance, the largest difference it accepts; the
report gives the largest one found). Exit 0 only when all --faults were
injected and survived, every last process exited 0 and the weights are
equal (or within --tolerance).

  tests/bench/chaos.py [--sync=allreduce --allreduce=gloo] [--faults=100]
                       [--seed=1] [--steps=12000] ...
"""
import argparse
import json
import os
import random
import signal
import sys
import subprocess
import tempfile
import time

from chaos_job import run_job
from chaos_report import report

KINDS = ("worker-kill", "worker-stop", "server-kill", "server-stop",
         "worker-leave")


def parse_args(argv):
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", default=os.environ.get(
        "LOCKSTEP_BIN_DIR", os.path.join(root, "build", "bin")),
                   help="where lockstep_server and lockstep_worker are")
    p.add_argument("--faults", type=int, default=100,
                   help="how many faults to inject, one at a time")
    p.add_argument("--seed", type=int, default=1,
                   help="seeds the schedule: kinds, targets, gaps")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sync", choices=("ps", "allreduce"), default="ps")
    p.add_argument("--shards", type=int, default=1,
                   help="server shards (PS); a server fault hits one of them")
    p.add_argument("--replicas", type=int, choices=(1, 2), default=1,
                   help="2: each shard has a standby (PS); a server kill "
                   "hits the primary, its standby takes over and the "
                   "killed one comes back as the new standby")
    p.add_argument("--failover_timeout_s", type=float, default=1.0,
                   help="with --replicas=2: the standbys' (the server's "
                   "default)")
    p.add_argument("--python", metavar="INTERPRETER",
                   help="PS: the workers are PyTorch scripts through the "
                   "Python package (tests/python/workers/torch_train.py), "
                   "run by this interpreter, which has torch")
    p.add_argument("--allreduce", choices=("gloo", "grpc-ring"),
                   default="gloo", help="the backend, with --sync=allreduce")
    p.add_argument("--steps", type=int, default=12000,
                   help="the job's steps (long enough to hold the faults)")
    p.add_argument("--straggle_ms", type=int, default=8,
                   help="added to each step of rank 0, to pace the job")
    p.add_argument("--gap_s", type=float, nargs=2, default=(0.5, 1.5),
                   metavar=("MIN", "MAX"), help="time between faults")
    p.add_argument("--stop_s", type=float, nargs=2, default=(0.2, 3.0),
                   metavar=("MIN", "MAX"), help="how long a SIGSTOP lasts")
    p.add_argument("--kinds", default="4,3,2,1",
                   help="weights of " + ", ".join(KINDS) + " (the last "
                   "one: 0 when left out; SIGTERM, with --min_workers)")
    p.add_argument("--min_workers", type=int, default=0,
                   help="an elastic job (the workers' flag): a killed or "
                   "leaving worker stays away for --away_s, the others "
                   "going on without it, then joins again")
    p.add_argument("--away_s", type=float, nargs=2, default=(0.5, 3.0),
                   metavar=("MIN", "MAX"),
                   help="with --min_workers: how long a lost worker stays "
                   "away")
    p.add_argument("--checkpoint_every_steps", type=int, default=100,
                   help="the server's; a restart redoes the steps since")
    p.add_argument("--server_step_timeout_s", type=int, default=2,
                   help="a worker stopped longer is evicted, then rejoins "
                   "(all-reduce: the workers' step timeout)")
    p.add_argument("--max_s", type=float, default=900,
                   help="bound on the whole run, both jobs")
    p.add_argument("--optimizer", default="adam",
                   help="the C++ workers' (--optimizer): Adam magnifies a "
                   "last-bit difference in the sums over thousands of "
                   "steps (1e-8 to 4e-3 in 3,000 steps after one elastic "
                   "regroup), SGD keeps it (2e-7)")
    p.add_argument("--tolerance", type=float, default=0.0,
                   help="elastic all-reduce: the largest difference from the "
                   "fault-free weights that counts as equal (0: bit for "
                   "bit)")
    p.add_argument("--json", help="also write the report here")
    args = p.parse_args(argv)
    if args.tolerance < 0 or (args.tolerance > 0 and not (
            args.sync == "allreduce" and args.min_workers)):
        p.error("--tolerance is for elastic all-reduce runs (--sync="
                "allreduce --min_workers); the others are bit for bit")
    if args.shards < 1 or (args.shards > 1 and args.sync != "ps"):
        p.error("--shards takes a count >= 1, and more than 1 only with "
                "--sync=ps")
    args.kind_weights = [float(w) for w in args.kinds.split(",")]
    if len(args.kind_weights) == len(KINDS) - 1:
        args.kind_weights.append(0.0)
    if args.kind_weights[-1:] != [0.0] and not args.min_workers:
        p.error("worker-leave is for elastic jobs: add --min_workers")
    if args.python and (args.sync != "ps" or args.min_workers):
        p.error("--python is for --sync=ps jobs of a fixed size")
    if not 0 <= args.min_workers <= args.workers:
        p.error("--min_workers takes 0 (off) to --workers")
    if args.replicas > 1 and (args.sync != "ps" or args.kind_weights[3]):
        p.error("--replicas=2 is for --sync=ps, without server stops (a "
                "primary stopped past the failover timeout comes back "
                "beside the standby that took over: docs/faults.md)")
    if len(args.kind_weights) != len(KINDS) or min(args.kind_weights) < 0:
        p.error("--kinds takes 4 or 5 weights >= 0")
    for name in ("lockstep_server", "lockstep_worker"):
        if not os.access(os.path.join(args.bin_dir, name), os.X_OK):
            p.error(f"{args.bin_dir}/{name} not found; build first")
    return args


def wait_past(job, version, deadline):
    """Seconds until the server's version exceeds `version`, or None."""
    t0 = time.time()
    while time.time() < deadline and not job.finished():
        v = job.version()
        if v is not None and v > version:
            return time.time() - t0
        time.sleep(0.02)
    return time.time() - t0 if job.finished() else None


def restored_version(proc, deadline):
    """The version a restarted server says it restored, or None."""
    while time.time() < deadline and proc.poll() is None:
        with open(proc.log_path) as f:
            for line in f:
                if "restored version " in line:
                    return int(line.split("restored version ")[1].split()[0])
        time.sleep(0.02)
    return None


def took_over_version(proc, deadline):
    """The version a standby says it took over at, or None."""
    mark = " at version "
    while time.time() < deadline and proc.poll() is None:
        with open(proc.log_path) as f:
            for line in f:
                if "took over from" in line:
                    return int(line.split(mark)[1].split(",")[0])
        time.sleep(0.005)
    return None


def inject(job, kind, rank, stop_s, shard=0):
    """One fault; returns the version it hit and what it records."""
    record = {"kind": kind}
    before = job.version()
    record["version"] = before
    if kind.startswith("worker"):
        record["rank"] = rank
        proc = job.workers[rank]
    else:
        record["shard"] = shard
        proc = job.servers[shard]
    if kind.endswith("stop"):
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(stop_s)
        os.kill(proc.pid, signal.SIGCONT)
        record["stopped_s"] = round(stop_s, 3)
    elif kind.startswith("worker") and job.args.min_workers:
        # Elastic: the others go on without it; it joins again later.
        os.kill(proc.pid, signal.SIGTERM if kind == "worker-leave" else
                signal.SIGKILL)
        try:
            record["exit_code"] = proc.wait(max(1, job.deadline - time.time()))
        except subprocess.TimeoutExpired:
            record["exit_code"] = None
        record["away_s"] = round(stop_s, 3)
        job.rejoin = (rank, time.time() + stop_s)
    else:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if kind == "worker-kill":
            job.start_worker(rank)
        elif job.args.sync == "allreduce":
            job.start_server()  # Nothing to restore: only the coordinator.
        elif job.replicas > 1:
            # What the workers hold (a primary's own version may be one
            # ahead, its answers held until the standby has it).
            before = job.worker_version()
            record["worker_version"] = before
            taken = took_over_version(job.standby(shard), job.deadline)
            record["restored"] = taken
            killed = job.active[shard]
            job.fail_over(shard)
            job.start_slot(shard, killed, standby_of=job.active[shard])
            if before is not None and taken is not None:
                record["redone"] = max(0, before - taken)
        else:
            job.start_server(shard)
            restored = restored_version(job.servers[shard], job.deadline)
            record["restored"] = restored
            if before is not None and restored is not None:
                record["redone"] = max(0, before - restored)
    return before, record


def chaos_schedule(args):
    rng = random.Random(args.seed)

    def chaos(job):
        faults = []
        end = min(job.deadline, time.time() + args.max_s)
        while len(faults) < args.faults and time.time() < end:
            time.sleep(rng.uniform(*args.gap_s))
            if job.finished():
                break
            kind = rng.choices(KINDS, weights=args.kind_weights)[0]
            rank = rng.randrange(args.workers)
            stop_s = rng.uniform(*args.stop_s)
            away_s = rng.uniform(*args.away_s) if args.min_workers else 0
            # Drawn only with shards, so that one shard's schedules stay.
            shard = rng.randrange(args.shards) if args.shards > 1 else 0
            # A server killed before its first checkpoint would come back
            # with nothing to restore (and the job is refused, by design).
            # A standby that holds no state yet cannot take over.
            if kind == "server-kill" and args.replicas > 1 and not (
                    job.standby_holds(shard)):
                kind = "worker-kill"
            if kind == "server-kill" and args.sync == "ps" and (
                    args.replicas < 2) and (job.metric(
                    "lockstep_server_checkpoint_version",
                    job.metrics_ports[shard]) or -1) < 0:
                kind = "worker-kill"
            on_worker = kind.startswith("worker")
            target = job.workers[rank] if on_worker else job.servers[shard]
            if target.poll() is not None:
                break  # The job is ending: this worker has finished.
            t = time.time()
            last_group = job.resumed() if args.sync == "allreduce" else None
            before, record = inject(
                job, kind, rank,
                away_s if args.min_workers and kind in (
                    "worker-kill", "worker-leave") else stop_s, shard)
            record["at_s"] = round(t - job.t0, 3)
            # An all-reduce rank may finish the step it was in before its
            # peers notice: recovered is a step past that one.
            past = -1 if before is None else before + (args.sync != "ps")
            recovery = wait_past(job, past, end)
            record["recovered_s"] = (None if recovery is None else
                                     round(time.time() - t, 3))
            if job.rejoin is not None:  # The lost worker joins again.
                rejoin_rank, at = job.rejoin
                job.rejoin = None
                time.sleep(max(0.0, at - time.time()))
                if job.finished():  # It has no job to join: not counted.
                    record["rejoined"] = False
                    del job.workers[rejoin_rank]
                    faults.append(record)
                    break
                job.start_worker(rejoin_rank)
            group = job.resumed() if args.sync == "allreduce" else None
            if group is not None and group != last_group:
                record["generation"], record["resumed"] = group
                if before is not None:
                    record["redone"] = max(0, before - group[1])
            faults.append(record)
            where = (f"rank {rank}" if on_worker else
                     f"shard {shard}" if args.shards > 1 else "server")
            print(f"  fault {len(faults):3d} {kind:11s} {where:7s}"
                  f" at version {before}: recovered in "
                  f"{record['recovered_s']} s", flush=True)
        return faults

    return chaos


def main(argv):
    args = parse_args(argv)
    # SIGTERM (a timeout) unwinds as Ctrl-C does, through every cleanup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    deadline = time.time() + args.max_s
    with tempfile.TemporaryDirectory(prefix="lockstep-chaos.") as tmp:
        os.makedirs(f"{tmp}/clean")
        os.makedirs(f"{tmp}/chaos")
        mode = "PS" if args.sync == "ps" else f"all-reduce ({args.allreduce})"
        print(f"chaos: fault-free {mode} run of {args.steps} steps, "
              f"{args.workers} workers, {args.shards} server shard(s)",
              flush=True)
        # The oracle runs without standbys: they must not change a bit.
        clean = run_job(argparse.Namespace(**{**vars(args), "replicas": 1}),
                        f"{tmp}/clean", deadline)
        print(f"chaos: {clean[3]:.1f} s; now with up to {args.faults} "
              f"faults (seed {args.seed})", flush=True)
        schedule = chaos_schedule(args)

        def chaos(job):
            job.t0 = time.time()
            return schedule(job)

        dirty = run_job(args, f"{tmp}/chaos", deadline, chaos)
        r = report(args, clean, dirty, KINDS)
        if not r["ok"]:
            for name in sorted(os.listdir(f"{tmp}/chaos"))[-4:]:
                path = f"{tmp}/chaos/{name}"
                if name.endswith(".log"):
                    print(f"--- {name} (tail)")
                    print("".join(open(path).readlines()[-10:]), end="")
    summary = {k: v for k, v in r.items() if k != "faults"}
    print("chaos: " + json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
