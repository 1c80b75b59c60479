"""The processes of one chaos run (tests/bench/chaos.py): the server shards
and their workers on loopback, started, polled and ended by pid."""

import glob
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

# What an all-reduce rank prints when its re-formed group goes on.
RESUMED = re.compile(r"in the group at version (\d+) \(generation (\d+),")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """The server shards and their workers; every process started is kept
    by pid. `server`, `port` and `metrics_port` are shard 0's."""

    def __init__(self, args, folder, deadline):
        self.args, self.dir, self.deadline = args, folder, deadline
        self.shards = getattr(args, "shards", 1)
        self.ports = [0] * self.shards
        self.servers = [None] * self.shards
        self.metrics_ports = [0] * self.shards
        # --replicas=2: two processes per shard on fixed ports, the primary
        # in slot active[shard] and its standby in the other.
        self.replicas = getattr(args, "replicas", 1)
        self.slot_ports = [[0, 0] for _ in range(self.shards)]
        self.slot_procs = [[None, None] for _ in range(self.shards)]
        self.slot_metrics = [[0, 0] for _ in range(self.shards)]
        self.active = [0] * self.shards
        self.workers = {}
        self.rejoin = None  # (rank, when): an elastic job's lost worker.
        self.worker_metrics = {}  # rank -> its metrics port
        self.started = []  # every Popen, for cleanup by pid
        self.logs = 0

    def _start(self, argv, name, env=None):
        self.logs += 1
        log = open(os.path.join(self.dir, f"{self.logs:04d}-{name}.log"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        proc.log_path = log.name
        log.close()
        self.started.append(proc)
        return proc

    @property
    def server(self):
        return self.servers[0]

    @property
    def port(self):
        return self.ports[0]

    @property
    def metrics_port(self):
        return self.metrics_ports[0]

    def _server(self, shard, port, metrics_port, name, extra):
        """Starts shard `shard` of lockstep_server on `port` (0: any) and
        waits until it listens; returns (its Popen, its port)."""
        port_file = os.path.join(self.dir, f"port-{name}")
        if os.path.exists(port_file):
            os.unlink(port_file)
        a = self.args
        proc = self._start([
            os.path.join(a.bin_dir, "lockstep_server"),
            f"--listen=127.0.0.1:{port}",
            f"--workers={a.workers}", f"--shard={shard}",
            f"--num_shards={self.shards}",
            f"--metrics_port={metrics_port}",
            f"--port_file={port_file}",
            "--no_worker_timeout_s=120"] + extra, name)
        while not os.path.exists(port_file):
            if proc.poll() is not None or time.time() > self.deadline:
                raise RuntimeError("the server did not start; see "
                                   + proc.log_path)
            time.sleep(0.01)
        if port == 0:
            with open(port_file) as f:
                port = int(f.read())
        return proc, port

    def start_slot(self, shard, slot, standby_of=None):
        """--replicas=2: shard `shard`'s process in `slot`, on its port once
        it has one, as the primary or the standby of slot `standby_of`."""
        self.slot_metrics[shard][slot] = free_port()
        a = self.args
        role = (["--replicas=2"] if standby_of is None else [
            f"--standby_of=127.0.0.1:{self.slot_ports[shard][standby_of]}",
            f"--failover_timeout_s={a.failover_timeout_s}"])
        proc, self.slot_ports[shard][slot] = self._server(
            shard, self.slot_ports[shard][slot], self.slot_metrics[shard][slot],
            f"server{shard}-{slot}", [
                f"--checkpoint_dir={self.dir}/ckpt{slot}",
                f"--checkpoint_every_steps={a.checkpoint_every_steps}",
                "--sum_order=rank",
                f"--step_timeout_s={a.server_step_timeout_s}"] + role)
        self.slot_procs[shard][slot] = proc
        if standby_of is None:
            self.servers[shard] = proc
            self.ports[shard] = self.slot_ports[shard][slot]
            self.metrics_ports[shard] = self.slot_metrics[shard][slot]

    def fail_over(self, shard):
        """The standby of `shard` took over: it is the primary now."""
        self.active[shard] = 1 - self.active[shard]
        slot = self.active[shard]
        self.servers[shard] = self.slot_procs[shard][slot]
        self.metrics_ports[shard] = self.slot_metrics[shard][slot]

    def standby(self, shard):
        return self.slot_procs[shard][1 - self.active[shard]]

    def standby_holds(self, shard):
        """Whether the standby of `shard` holds a state to take over with."""
        with open(self.standby(shard).log_path) as f:
            return "holds version" in f.read()

    def worker_version(self):
        """The highest version a live worker holds, or None."""
        versions = [self.metric("lockstep_worker_version", port)
                    for rank, port in self.worker_metrics.items()
                    if self.workers[rank].poll() is None]
        versions = [v for v in versions if v is not None]
        return int(max(versions)) if versions else None

    def start_server(self, shard=0):
        """Shard `shard`, on its port once it has one (a restart)."""
        if self.replicas > 1:
            self.start_slot(shard, 0)
            self.start_slot(shard, 1, standby_of=0)
            return
        self.metrics_ports[shard] = free_port()
        a = self.args
        ps = [] if a.sync == "allreduce" else [
            f"--checkpoint_dir={self.dir}/ckpt",
            f"--checkpoint_every_steps={a.checkpoint_every_steps}",
            "--sum_order=rank", f"--step_timeout_s={a.server_step_timeout_s}"]
        self.servers[shard], self.ports[shard] = self._server(
            shard, self.ports[shard], self.metrics_ports[shard],
            f"server{shard}", ps)

    def start_worker(self, rank):
        a = self.args
        mode = ["--step_timeout_s=30"]
        if getattr(a, "min_workers", 0):
            mode.append(f"--min_workers={a.min_workers}")
        if a.sync == "allreduce":
            mode = ["--sync=allreduce", f"--allreduce={a.allreduce}",
                    f"--step_timeout_s={a.server_step_timeout_s}"] + mode[1:]
        if getattr(a, "python", None):
            self.workers[rank] = self._start_python(rank)
            return
        self.worker_metrics[rank] = free_port()
        self.workers[rank] = self._start([
            os.path.join(a.bin_dir, "lockstep_worker"),
            "--servers=" + ",".join(f"127.0.0.1:{p[0]}" for p in self.slot_ports)
            if self.replicas > 1 else
            "--servers=" + ",".join(f"127.0.0.1:{p}" for p in self.ports),
            "--standby_servers=" + ",".join(
                f"127.0.0.1:{p[1]}" for p in self.slot_ports)
            if self.replicas > 1 else "--standby_servers=",
            f"--workers={a.workers}",
            f"--rank={rank}", "--dataset=synthetic",
            "--synthetic_examples=6400", "--layers=64,32,10",
            f"--optimizer={getattr(a, 'optimizer', 'adam')}",
            "--batch_size=8", "--epochs=1000",
            f"--max_steps={a.steps}", "--seed=7", "--chunk_bytes=2048",
            "--progress=none", "--rejoin_timeout_s=120",
            f"--straggle=0:{a.straggle_ms}",
            f"--metrics_port={self.worker_metrics[rank]}",
            f"--dump_weights={self.dir}/weights-rank{rank}"] + mode,
            f"rank{rank}")

    def _start_python(self, rank):
        """A PyTorch worker (tests/python/workers/torch_train.py) through
        the Python package beside the binaries; rank 0 writes the weights."""
        a = self.args
        env = dict(os.environ, PYTHONUNBUFFERED="1", LOCKSTEP_RANK=str(rank),
                   LOCKSTEP_WORKERS=str(a.workers),
                   PYTHONPATH=os.path.join(a.bin_dir, "..", "python"))
        if self.replicas > 1:
            env["LOCKSTEP_SERVERS"] = ",".join(
                f"127.0.0.1:{p[0]}" for p in self.slot_ports)
            env["LOCKSTEP_STANDBY_SERVERS"] = ",".join(
                f"127.0.0.1:{p[1]}" for p in self.slot_ports)
        else:
            env["LOCKSTEP_SERVERS"] = ",".join(
                f"127.0.0.1:{p}" for p in self.ports)
        script = os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "python", "workers", "torch_train.py")
        return self._start([
            a.python, script, f"--steps={a.steps}", "--examples=6400",
            "--optimizer=adam", "--lr=0.001",
            f"--step_sleep_ms={a.straggle_ms if rank == 0 else 0}",
            f"--out={self.dir}/weights-rank0"], f"rank{rank}", env)

    def metric(self, name, port=None):
        """A gauge of the current server (or of the process serving its
        metrics on `port`), or None while it does not answer."""
        url = f"http://127.0.0.1:{port or self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=0.5) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def version(self):
        """The job's version: the lowest of the server shards' (None while
        one does not answer), or in all-reduce mode the highest of the live
        workers'."""
        if self.args.sync == "ps":
            vs = [self.metric("lockstep_server_version", port)
                  for port in self.metrics_ports]
            return None if None in vs else int(min(vs))
        versions = [self.metric("lockstep_worker_version", port)
                    for rank, port in self.worker_metrics.items()
                    if self.workers[rank].poll() is None]
        versions = [v for v in versions if v is not None]
        return int(max(versions)) if versions else None

    def finished(self):
        if self.args.sync == "allreduce":
            # The server stays until every worker has left.
            return all(p.poll() is not None for p in self.workers.values())
        return all(s.poll() is not None for s in self.servers)

    def resumed(self):
        """(generation, version) of the newest re-formed all-reduce group
        in the workers' logs, or None."""
        newest = None
        for path in glob.glob(os.path.join(self.dir, "*-rank*.log")):
            with open(path) as f:
                for m in RESUMED.finditer(f.read()):
                    g = (int(m.group(2)), int(m.group(1)))
                    newest = g if newest is None or g > newest else newest
        return newest

    def wait_all(self):
        """Every last process's exit code, waiting until the deadline."""
        codes = {}
        standbys = [] if self.replicas < 2 else [
            (f"standby{s}", self.standby(s)) for s in range(self.shards)]
        for name, proc in [(f"server{s}" if s else "server", p)
                           for s, p in enumerate(self.servers)] + standbys + [
                (f"rank{r}", p) for r, p in sorted(self.workers.items())]:
            try:
                codes[name] = proc.wait(max(1, self.deadline - time.time()))
            except subprocess.TimeoutExpired:
                codes[name] = None
        return codes

    def cleanup(self):
        for proc in self.started:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def run_job(args, folder, deadline, chaos=None):
    job = Job(args, folder, deadline)
    try:
        t0 = time.time()
        for shard in range(job.shards):
            job.start_server(shard)
        for r in range(args.workers):
            job.start_worker(r)
        faults = chaos(job) if chaos else []
        codes = job.wait_all()
        wall = time.time() - t0
        weights_path = f"{folder}/weights-rank0"
        weights = open(weights_path, "rb").read() if os.path.exists(
            weights_path) else b""
        return job, faults, codes, wall, weights
    finally:
        job.cleanup()
