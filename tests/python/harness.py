"""Real servers and real worker processes for the Python package's tests.

Every process listens on or dials 127.0.0.1 only, every wait has a
deadline, and a test ends only the processes it started (by their pid).
The binaries come from LOCKSTEP_BIN_DIR (ctest sets it); the package from
the build tree's python/ folder beside it.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

BIN_DIR = os.environ.get("LOCKSTEP_BIN_DIR", "")
PYTHON_DIR = os.path.realpath(os.path.join(BIN_DIR, "..", "python"))
HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
FASHION = "/usr/share/datasets/fashion-mnist"

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


def binary(name):
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} not found: set LOCKSTEP_BIN_DIR to the "
                           "build's bin folder")
    return path


def free_port():
    """A loopback port nothing listens on now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_until(proc, text, timeout_s=60):
    """Lines of proc's output up to the one holding `text` (or its end)."""
    deadline = time.monotonic() + timeout_s
    seen = ""
    while text not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    return seen


def interrupt(proc, within_s=2.0):
    """Sends SIGINT; returns (seconds until proc ended, its return code)."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(max(10, 5 * within_s))
    elapsed = time.monotonic() - sent
    if proc.stdout is not None:
        proc.stdout.close()
    return elapsed, proc.returncode


def worker_env(servers, rank, workers, extra=None):
    env = dict(os.environ)
    env.update(LOCKSTEP_SERVERS=",".join(servers), LOCKSTEP_RANK=str(rank),
               LOCKSTEP_WORKERS=str(workers), PYTHONUNBUFFERED="1",
               TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=PYTHON_DIR + (":" + env["PYTHONPATH"]
                                        if env.get("PYTHONPATH") else ""))
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


class Server:
    """One lockstep_server shard on a free loopback port."""

    def __init__(self, workers, flags=(), timeout_s=30, port=0):
        self.dir = tempfile.mkdtemp(prefix="lockstep_pytest_")
        port_file = os.path.join(self.dir, "port")
        self.log_path = os.path.join(self.dir, "server.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary("lockstep_server"), f"--listen=127.0.0.1:{port}",
             f"--port_file={port_file}", f"--workers={workers}",
             "--exit_when_done", *flags],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lockstep_server did not start: {self.log()}")
            time.sleep(0.02)
        with open(port_file) as f:
            self.address = f"127.0.0.1:{int(f.read())}"

    def log(self):
        self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait(self, timeout_s=60):
        return self.proc.wait(timeout=timeout_s)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_worker(python, script, args, servers, rank, workers, env=None):
    """A worker process running `script`; output collected by finish()."""
    return subprocess.Popen(
        [python, os.path.join(WORKERS, script), *args],
        env=worker_env(servers, rank, workers, env), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def finish(procs, timeout_s=240):
    """Waits for every process; returns [(exit code, output)] in order."""
    deadline = time.monotonic() + timeout_s
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n[harness: killed at the deadline]"
        results.append((p.returncode, out))
    return results


def run_job(python, script, args_for_rank, workers, server_flags=(),
            env=None, timeout_s=240):
    """A server and `workers` workers to the end; returns (results, log).

    args_for_rank(rank) gives each worker's arguments.
    """
    server = Server(workers, server_flags)
    try:
        procs = [start_worker(python, script, args_for_rank(r),
                              [server.address], r, workers, env)
                 for r in range(workers)]
        results = finish(procs, timeout_s)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            pass
        return results, server.log()
    finally:
        server.stop()


def max_relative_difference(a, b):
    """max |a - b| over max |b|, for arrays that must not be empty."""
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == 0 or a.shape != b.shape:
        raise AssertionError(f"cannot compare shapes {a.shape} and {b.shape}")
    scale = np.abs(b).max()
    if scale == 0:
        raise AssertionError("the reference is all zeros")
    return float(np.abs(a - b).max() / scale)


def read_weights(path):
    """{name: (shape, flat float32 values)} of a safetensors file."""
    from lockstep import _native
    tensors = {n: (tuple(s), v) for n, s, v in _native.read_safetensors(path)}
    if not tensors:
        raise AssertionError(f"{path} holds no tensors")
    return tensors


def read_npz(path):
    """{name: array} of an .npz file, which must not be empty."""
    import numpy as np
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    if not arrays:
        raise AssertionError(f"{path} holds no arrays")
    return arrays


def train_args(out=None, **kw):
    """--key=value for each keyword, and --out= if given."""
    args = []
    for k, v in kw.items():
        args.append(f"--{k}={v}")
    if out:
        args.append(f"--out={out}")
    return args
