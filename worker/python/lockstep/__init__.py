"""Lockstep for Python workers: synchronous parameter servers for any model.

The framework adapters are lockstep.torch (PyTorch) and lockstep.keras
(Keras 3 on TensorFlow); both sit on lockstep.job.Job, which speaks to the
servers through lockstep._native, the C++ worker's own client. See
docs/python.md.
"""

from lockstep.cluster import Cluster
from lockstep.data import Shard, shard
from lockstep.errors import LockstepError
from lockstep.job import Job, current_job

__all__ = ["Cluster", "Job", "LockstepError", "Shard", "current_job",
           "shard"]
