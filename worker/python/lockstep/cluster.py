"""Where this worker's job is: the servers, its rank, the worker count, TLS.

lockstep_launch and the Kubernetes manifests describe the job in the
environment; Cluster.from_env() reads it:

  LOCKSTEP_SERVERS   host:port of every server shard, comma-separated
  LOCKSTEP_RANK      this worker's rank, 0 .. LOCKSTEP_WORKERS-1
  LOCKSTEP_WORKERS   how many workers the job has
  TF_CONFIG          TensorFlow's cluster JSON, used for whatever the three
                     above leave unset ("ps" list, "chief"/"worker" task)
  LOCKSTEP_TLS_CA, LOCKSTEP_TLS_CERT, LOCKSTEP_TLS_KEY,
  LOCKSTEP_TLS_SERVER_NAME, LOCKSTEP_TOKEN_FILE
                     mutual TLS and the bearer token (docs/security.md)
  LOCKSTEP_WIRE_DTYPE  fp32 (default), bf16 or fp16 on the wire
  LOCKSTEP_SEED      the data order's seed (default 42, as lockstep_worker)
"""

import dataclasses
import os

from lockstep import _native
from lockstep.errors import LockstepError, error

_USAGE = ("set LOCKSTEP_SERVERS, LOCKSTEP_RANK and LOCKSTEP_WORKERS or "
          "TF_CONFIG (lockstep_launch --ps=1 --workers=2 -- python3 "
          "SCRIPT sets them)")


def _bad(message):
    return error("INVALID_ARGUMENT", message)


def _int(env, name):
    text = env.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise _bad(f"{name}={text!r} is not a whole number") from None


@dataclasses.dataclass
class Cluster:
    """One worker's view of its job. Plain data."""
    servers: list
    rank: int
    num_workers: int
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    token_file: str = ""
    wire_dtype: str = "fp32"
    seed: int = 42

    @classmethod
    def from_env(cls, env=None):
        """The cluster the environment describes; LockstepError if none."""
        env = os.environ if env is None else env
        servers, rank, workers = None, None, None
        if env.get("LOCKSTEP_SERVERS"):
            servers = [s.strip() for s in env["LOCKSTEP_SERVERS"].split(",")
                       if s.strip()]
        if env.get("LOCKSTEP_RANK"):
            rank = _int(env, "LOCKSTEP_RANK")
        if env.get("LOCKSTEP_WORKERS"):
            workers = _int(env, "LOCKSTEP_WORKERS")
        if (servers is None or rank is None or workers is None) and \
                env.get("TF_CONFIG"):
            try:
                tf = _native.parse_tf_config(env["TF_CONFIG"])
            except LockstepError as e:
                raise _bad(f"TF_CONFIG: {e.message}") from None
            servers = servers if servers is not None else tf["ps"]
            rank = rank if rank is not None else tf["rank"]
            workers = workers if workers is not None else tf["num_workers"]
        missing = [name for name, value in (("servers", servers),
                                            ("rank", rank),
                                            ("worker count", workers))
                   if value is None or value == []]
        if missing:
            raise _bad(f"no {', '.join(missing)} for this worker: {_USAGE}")
        if workers < 1 or not 0 <= rank < workers:
            raise _bad(f"rank {rank} is not in [0, {workers}) workers")
        return cls(servers=servers, rank=rank, num_workers=workers,
                   tls_ca=env.get("LOCKSTEP_TLS_CA", ""),
                   tls_cert=env.get("LOCKSTEP_TLS_CERT", ""),
                   tls_key=env.get("LOCKSTEP_TLS_KEY", ""),
                   tls_server_name=env.get("LOCKSTEP_TLS_SERVER_NAME", ""),
                   token_file=env.get("LOCKSTEP_TOKEN_FILE", ""),
                   wire_dtype=env.get("LOCKSTEP_WIRE_DTYPE", "fp32") or "fp32",
                   seed=_int(env, "LOCKSTEP_SEED") if env.get("LOCKSTEP_SEED")
                   else 42)
