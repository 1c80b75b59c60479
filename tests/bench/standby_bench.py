#!/usr/bin/env python3
"""What a standby costs per step: the tutorial MLP (784-128-10, Adam, batch
64, 2 workers on loopback) run alone and with a standby (--replicas=2 and
--standby_of), alternated, ROUNDS times each. Prints, per run, the wall
time, the seconds per step, the CPU seconds of the primary and of the
standby (from the kernel's rusage at their exit), and the bytes the primary
says it sent; then medians and ranges, and the ratio of step times.

usage: tests/bench/standby_bench.py [--rounds=3] [--steps=600] [--bin-dir=DIR]
Fashion-MNIST from /usr/share/datasets/fashion-mnist when it is there,
else synthetic data of the same shape.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

DATA = "/usr/share/datasets/fashion-mnist"


def spawn(cmd, log):
    with open(log, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def wait_usage(proc, deadline):
    """(exit code, CPU seconds) of `proc`, killing it past the deadline."""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if time.time() > deadline:
            proc.kill()
            deadline = float("inf")
        time.sleep(0.01)


def port_of(log, proc, deadline):
    while time.time() < deadline and proc.poll() is None:
        with open(log) as f:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
        if m:
            return int(m.group(1))
        time.sleep(0.01)
    raise RuntimeError("no port in " + log)


def run(args, standby, tmp, tag):
    """One job; every process it started is gone when it returns."""
    started = []
    try:
        return run_job(args, standby, tmp, tag, started)
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def run_job(args, standby, tmp, tag, started):
    b = args.bin_dir
    deadline = time.time() + args.max_s
    common = ["--workers=2", "--no_worker_timeout_s=60"]

    def start(cmd, name):
        started.append(spawn(cmd, os.path.join(tmp, f"{tag}-{name}.log")))
        return started[-1], os.path.join(tmp, f"{tag}-{name}.log")

    primary, primary_log = start(
        [f"{b}/lockstep_server", "--listen=127.0.0.1:0"] + common
        + (["--replicas=2"] if standby else []), "primary")
    port = port_of(primary_log, primary, deadline)
    servers = [f"--servers=127.0.0.1:{port}"]
    standby_proc = None
    if standby:
        standby_proc, standby_log = start(
            [f"{b}/lockstep_server", "--listen=127.0.0.1:0",
             f"--standby_of=127.0.0.1:{port}"] + common, "standby")
        sport = port_of(standby_log, standby_proc, deadline)
        servers.append(f"--standby_servers=127.0.0.1:{sport}")
    data = ([f"--data_dir={DATA}"] if os.path.isdir(DATA) else
            ["--dataset=synthetic", "--synthetic_examples=60000"])
    begin = time.time()
    workers = [start([f"{b}/lockstep_worker", f"--rank={r}", "--workers=2",
                      "--layers=784,128,10", "--batch_size=64",
                      f"--max_steps={args.steps}", "--progress=none"]
                     + servers + data, f"w{r}")[0] for r in range(2)]
    codes = [wait_usage(w, deadline)[0] for w in workers]
    wall = time.time() - begin
    code, primary_cpu = wait_usage(primary, deadline)
    codes.append(code)
    standby_cpu = 0.0
    if standby_proc:
        code, standby_cpu = wait_usage(standby_proc, deadline)
        codes.append(code)
    if any(codes):
        raise RuntimeError(f"{tag}: exit codes {codes}; logs in {tmp}")
    sent = re.search(r"replication: (\d+) version\(s\) sent to standbys, "
                     r"(\d+) bytes", open(primary_log).read())
    return {"wall": wall, "step": wall / args.steps,
            "primary_cpu": primary_cpu, "standby_cpu": standby_cpu,
            "versions": int(sent.group(1)) if sent else 0,
            "bytes": int(sent.group(2)) if sent else 0}


def spread(values, fmt):
    return (fmt.format(statistics.median(values)) + " (" +
            fmt.format(min(values)) + " to " + fmt.format(max(values)) + ")")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--bin-dir", default=os.path.join(
        os.environ.get("LOCKSTEP_BUILD_DIR",
                       os.path.join(here, "..", "..", "build")), "bin"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--max_s", type=float, default=300,
                   help="bound on one run")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        p.error("--rounds and --steps take counts >= 1")
    results = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for standby in (False, True):
                got = run(args, standby, tmp, f"r{r}-{int(standby)}")
                results[standby].append(got)
                print(f"round {r} {'standby' if standby else 'alone  '}: "
                      f"{got['wall']:.2f} s, {got['step'] * 1e3:.2f} ms/step, "
                      f"primary CPU {got['primary_cpu']:.2f} s, standby CPU "
                      f"{got['standby_cpu']:.2f} s, {got['versions']} "
                      f"versions / {got['bytes']} bytes sent", flush=True)
    alone, paired = results[False], results[True]
    ratios = [b["step"] / a["step"] for a, b in zip(alone, paired)]
    print("ms/step alone:        " + spread(
        [x["step"] * 1e3 for x in alone], "{:.2f}"))
    print("ms/step with standby: " + spread(
        [x["step"] * 1e3 for x in paired], "{:.2f}"))
    print("ratio (standby/alone, per round): " + spread(ratios, "{:.2f}"))
    per = [x["bytes"] / max(1, x["versions"]) for x in paired]
    print("bytes to the standby per version: " + spread(per, "{:.0f}"))
    extra = [(b["primary_cpu"] - a["primary_cpu"]) / args.steps * 1e3
             for a, b in zip(alone, paired)]
    print("primary CPU added per step, ms: " + spread(extra, "{:.3f}"))
    print("standby CPU per step, ms: " + spread(
        [x["standby_cpu"] / args.steps * 1e3 for x in paired], "{:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
