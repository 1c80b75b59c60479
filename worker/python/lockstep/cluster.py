"""Where this worker's job is: the servers, its rank, the worker count, TLS.

lockstep_launch and the Kubernetes manifests describe the job in the
environment; Cluster.from_env() reads it:

  LOCKSTEP_SERVERS   host:port of every server shard, comma-separated
  LOCKSTEP_STANDBY_SERVERS
                     each shard's standby (lockstep_server --standby_of),
                     in shard order: calls fail over to it
  LOCKSTEP_RANK      this worker's rank, 0 .. LOCKSTEP_WORKERS-1
  LOCKSTEP_WORKERS   how many workers the job has
  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
                     torchrun's names (lockstep_launch sets them too); rank
                     and size where the two above are unset, and the index
                     among this host's workers (the GPU to use)
  PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK
                     Kubeflow Trainer's torch runtime (torchrun's flags),
                     where none of the above is set: a process started
                     without torchrun is rank PET_NODE_RANK of PET_NNODES
                     (with PET_NPROC_PER_NODE > 1 only given LOCAL_RANK)
  TF_CONFIG          TensorFlow's cluster JSON, used for whatever the ones
                     above leave unset ("ps" list, "chief"/"worker" task)
  LOCKSTEP_TLS_CA, LOCKSTEP_TLS_CERT, LOCKSTEP_TLS_KEY,
  LOCKSTEP_TLS_SERVER_NAME, LOCKSTEP_TOKEN_FILE
                     mutual TLS and the bearer token (docs/security.md)
  LOCKSTEP_WIRE_DTYPE  fp32 (default), bf16 or fp16 on the wire
  LOCKSTEP_SEED      the data order's seed (default 42, as lockstep_worker)

A rank given twice (LOCKSTEP_RANK and RANK, say) must agree: two launchers
that disagree about a process are refused rather than one silently obeyed.
LOCKSTEP_WORKERS wins over WORLD_SIZE. Place.from_env() reads the rank,
size and local rank alone, for a script that asks before it joins.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Mapping, Optional

from lockstep import _native
from lockstep.errors import LockstepError, error

_USAGE = ("set LOCKSTEP_SERVERS, LOCKSTEP_RANK and LOCKSTEP_WORKERS (or "
          "torchrun's RANK and WORLD_SIZE) or TF_CONFIG (lockstep_launch "
          "--ps=1 --workers=2 -- python3 SCRIPT sets them)")


def _bad(message):
    return error("INVALID_ARGUMENT", message)


def _int(env, name):
    text = env.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise _bad(f"{name}={text!r} is not a whole number") from None


def _opt_int(env, name):
    return _int(env, name) if env.get(name) else None


def _torch_place(env):
    """(rank, workers, local_rank, the rank's variables as "NAME=VALUE") as
    torchrun or Kubeflow Trainer describe this process; None for what they
    leave out."""
    local = _opt_int(env, "LOCAL_RANK")
    local_size = _opt_int(env, "LOCAL_WORLD_SIZE")
    if local is not None and local_size is not None and \
            not 0 <= local < local_size:
        raise _bad(f"LOCAL_RANK={local} is not in [0, LOCAL_WORLD_SIZE="
                   f"{local_size})")
    rank, workers = _opt_int(env, "RANK"), _opt_int(env, "WORLD_SIZE")
    if rank is not None or workers is not None or not env.get("PET_NNODES"):
        return rank, workers, local, f"RANK={rank}"
    # Trainer's PET_* are torchrun's flags: without torchrun (no RANK) the
    # pod runs one process, unless a LOCAL_RANK says which of several.
    per_node = _opt_int(env, "PET_NPROC_PER_NODE")
    per_node = 1 if per_node is None else per_node
    if per_node < 1 or (local is None and per_node > 1):
        raise _bad(f"PET_NPROC_PER_NODE={per_node} asks for that many "
                   "processes per node, but this one was not started by "
                   "torchrun (no RANK or LOCAL_RANK): run the script under "
                   "torchrun, or with one process per node")
    local = 0 if local is None else local
    if local >= per_node:
        raise _bad(f"LOCAL_RANK={local} is not in [0, PET_NPROC_PER_NODE="
                   f"{per_node})")
    node = _opt_int(env, "PET_NODE_RANK")
    rank = None if node is None else node * per_node + local
    named = f"PET_NODE_RANK={node}" + (
        "" if per_node == 1 else
        f", PET_NPROC_PER_NODE={per_node}, LOCAL_RANK={local} (rank {rank})")
    return rank, _int(env, "PET_NNODES") * per_node, local, named


def _read(env):
    """(servers, rank, workers, local_rank) from the variables above, in
    their order of precedence; None (servers: None or []) for what none
    says."""
    servers = None
    if env.get("LOCKSTEP_SERVERS"):
        servers = [s.strip() for s in env["LOCKSTEP_SERVERS"].split(",")
                   if s.strip()]
    rank = _opt_int(env, "LOCKSTEP_RANK")
    workers = _opt_int(env, "LOCKSTEP_WORKERS")
    torch_rank, torch_workers, local, named = _torch_place(env)
    if rank is not None and torch_rank is not None and rank != torch_rank:
        raise _bad(f"LOCKSTEP_RANK={rank} but {named}: two launchers "
                   "disagree about this process (torchrun under "
                   "lockstep_launch?); start it with one of them")
    if workers is not None and torch_workers is not None and \
            workers != torch_workers:
        raise _bad(f"LOCKSTEP_WORKERS={workers} but torchrun's or Kubeflow "
                   f"Trainer's variables give {torch_workers} workers: two "
                   "launchers disagree about this job; start it with one "
                   "of them")
    rank = rank if rank is not None else torch_rank
    workers = workers if workers is not None else torch_workers
    if (servers is None or rank is None or workers is None) and \
            env.get("TF_CONFIG"):
        try:
            tf = _native.parse_tf_config(env["TF_CONFIG"])
        except LockstepError as e:
            raise _bad(f"TF_CONFIG: {e.message}") from None
        servers = servers if servers is not None else tf["ps"]
        rank = rank if rank is not None else tf["rank"]
        workers = workers if workers is not None else tf["num_workers"]
    return servers, rank, workers, 0 if local is None else local


def _checked(servers, rank, workers, need_servers=True):
    """Raises what is missing or out of range."""
    missing = [name for name, value, needed in (
        ("servers", servers, need_servers), ("rank", rank, True),
        ("worker count", workers, True)) if needed and value in (None, [])]
    if missing:
        raise _bad(f"no {', '.join(missing)} for this worker: {_USAGE}")
    if workers < 1 or not 0 <= rank < workers:
        raise _bad(f"rank {rank} is not in [0, {workers}) workers")


@dataclasses.dataclass(frozen=True)
class Place:
    """Where this process sits in its job, without the servers: what a
    script asks before it joins (lockstep.torch.rank() and the like)."""
    rank: int
    num_workers: int
    local_rank: int  # Among this host's workers: the GPU to use.

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Place:
        """The place the environment describes; LockstepError if none."""
        _, rank, workers, local = _read(os.environ if env is None else env)
        _checked(None, rank, workers, need_servers=False)
        return cls(rank=rank, num_workers=workers, local_rank=local)


@dataclasses.dataclass
class Cluster:
    """One worker's view of its job. Plain data."""
    servers: List[str]
    rank: int
    num_workers: int
    local_rank: int = 0  # Among this host's workers: the GPU to use.
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    token_file: str = ""
    wire_dtype: str = "fp32"
    seed: int = 42
    # Each shard's standby, in shard order; empty: none.
    standby_servers: List[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Cluster:
        """The cluster the environment describes; LockstepError if none."""
        env = os.environ if env is None else env
        servers, rank, workers, local = _read(env)
        _checked(servers, rank, workers)
        standbys = [s.strip() for s in
                    env.get("LOCKSTEP_STANDBY_SERVERS", "").split(",")
                    if s.strip()]
        if standbys and len(standbys) != len(servers):
            raise _bad(f"LOCKSTEP_STANDBY_SERVERS names {len(standbys)} "
                       f"standby(s) for {len(servers)} server shard(s): "
                       "give one per shard, in shard order")
        return cls(servers=servers, rank=rank, num_workers=workers,
                   standby_servers=standbys,
                   local_rank=local,
                   tls_ca=env.get("LOCKSTEP_TLS_CA", ""),
                   tls_cert=env.get("LOCKSTEP_TLS_CERT", ""),
                   tls_key=env.get("LOCKSTEP_TLS_KEY", ""),
                   tls_server_name=env.get("LOCKSTEP_TLS_SERVER_NAME", ""),
                   token_file=env.get("LOCKSTEP_TOKEN_FILE", ""),
                   wire_dtype=env.get("LOCKSTEP_WIRE_DTYPE", "fp32") or "fp32",
                   seed=_int(env, "LOCKSTEP_SEED") if env.get("LOCKSTEP_SEED")
                   else 42)
