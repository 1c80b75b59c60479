"""What each optimizer mode costs (docs/benchmarks.md, "Server optimizer
or summation: memory and step time"): the same MLP trained by 2 workers
through 1 lockstep_server,

  server:    lockstep.torch.SyncOptimizer, Adam on the server;
  summation: lockstep.torch.DistributedOptimizer(torch.optim.Adam), the
             server only averages and every worker runs Adam;

alternating in every round. Prints per run the peak RSS of each worker and
of the server (ru_maxrss from wait4, so the whole life of the process), the
workers' RSS with the model built before joining (the same in both modes:
torch and the model), and rank 0's median step time; then the medians and
ranges over the rounds, and the load average before and after.

  PYTHON tests/bench/optimizer_memory_bench.py [--rounds N] [--bin-dir DIR]
      [--width W] [--steps S]

PYTHON is the interpreter with torch and the lockstep package (the torch
venv of worker/python/venv.sh, or any with `pip install ./worker/python`);
without --bin-dir the package's own lockstep_server is used, else
DIR/lockstep_server and DIR/../python on the path. Loopback only.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
MODES = ("server", "summation")


def rss_mib(field):
    """This process's VmRSS or VmHWM from /proc, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(mode, width, steps, warmup, batch):
    """One worker: prints "before_join_mib=", then rank 0 "step_ms=" and
    "params=" lines."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import lockstep.torch as ls
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs = 1024
    model = torch.nn.Sequential(
        torch.nn.Linear(inputs, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 10))
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((batch, inputs), np.float32))
    y = torch.from_numpy(rng.integers(0, 10, batch))
    print(f"before_join_mib={rss_mib('VmRSS'):.1f}", flush=True)
    if mode == "server":
        opt = ls.SyncOptimizer(model, optimizer="adam", lr=1e-4)
    else:
        adam = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-7)
        opt = ls.DistributedOptimizer(adam, model)
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    if opt.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"params={params}", flush=True)
        print(f"step_ms={1e3 * statistics.median(times):.1f}", flush=True)
    opt.leave()


def wait_rss(proc, timeout_s):
    """Waits for proc; returns (exit code, peak RSS in MiB)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss / 1024
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"pid {proc.pid} ran past {timeout_s} s")


def server_binary(bin_dir):
    if bin_dir:
        return os.path.join(bin_dir, "lockstep_server")
    found = shutil.which("lockstep_server",
                         path=os.path.dirname(sys.executable))
    return found or shutil.which("lockstep_server")


def run(mode, args, env, timeout_s=600):
    """One job: {"server_mib", "worker_mib", "before_join_mib", "step_ms",
    "params"}."""
    tmp = tempfile.mkdtemp(prefix="lockstep_membench_")
    port_file = os.path.join(tmp, "port")
    server = subprocess.Popen(
        [server_binary(args.bin_dir), "--listen=127.0.0.1:0",
         f"--port_file={port_file}", "--workers=2", "--exit_when_done"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("lockstep_server did not start")
            time.sleep(0.02)
        time.sleep(0.05)  # The file is written whole; give it a moment.
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        outs = [os.path.join(tmp, f"w{r}.txt") for r in (0, 1)]
        workers = []
        for r in (0, 1):
            wenv = dict(env, LOCKSTEP_SERVERS=address, LOCKSTEP_RANK=str(r),
                        LOCKSTEP_WORKERS="2", PYTHONUNBUFFERED="1")
            with open(outs[r], "w") as out:
                workers.append(subprocess.Popen(
                    [sys.executable, HERE, "--worker", mode,
                     f"--width={args.width}", f"--steps={args.steps}",
                     f"--warmup={args.warmup}", f"--batch={args.batch}"],
                    env=wenv, stdout=out, stderr=subprocess.STDOUT))
        peaks = []
        for r, w in enumerate(workers):
            code, peak = wait_rss(w, timeout_s)
            if code != 0:
                with open(outs[r]) as f:
                    raise RuntimeError(f"worker {r} exited {code}: {f.read()}")
            peaks.append(peak)
        code, server_peak = wait_rss(server, 60)
        if code != 0:
            raise RuntimeError(f"lockstep_server exited {code}")
        figures = {"server_mib": server_peak, "worker_mib": max(peaks)}
        for path in outs:
            with open(path) as f:
                for line in f:
                    key, sep, value = line.strip().partition("=")
                    if sep and key in ("before_join_mib", "step_ms",
                                       "params"):
                        figures.setdefault(key, float(value))
        return figures
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bin-dir", default="")
    p.add_argument("--width", type=int, default=4096,
                   help="hidden width of the 1024-W-W-10 MLP (4096: 21 M "
                        "parameters)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--worker", choices=MODES)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.width, args.steps, args.warmup, args.batch)
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if args.bin_dir:
        python_dir = os.path.join(os.path.abspath(args.bin_dir), "..",
                                  "python")
        env["PYTHONPATH"] = python_dir + (
            ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    print(f"load average before: {load()}", flush=True)
    results = {m: [] for m in MODES}
    keys = ("worker_mib", "server_mib", "before_join_mib", "step_ms")
    for round_ in range(1, args.rounds + 1):
        for mode in MODES:
            f = run(mode, args, env)
            results[mode].append(f)
            print(f"round {round_} {mode:9s} params={int(f['params'])} " +
                  " ".join(f"{k}={f[k]:.1f}" for k in keys), flush=True)
    print(f"load average after: {load()}", flush=True)
    print(f"medians [min, max] over {args.rounds} rounds, 2 workers, "
          f"batch {args.batch} each, {args.steps} timed steps:")
    for mode in MODES:
        cells = []
        for k in keys:
            values = [f[k] for f in results[mode]]
            cells.append(f"{k}={statistics.median(values):.1f} "
                         f"[{min(values):.1f}, {max(values):.1f}]")
        print(f"  {mode:9s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
