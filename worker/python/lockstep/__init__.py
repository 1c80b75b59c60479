"""Lockstep for Python workers: synchronous parameter servers for any model.

The framework adapters are lockstep.torch (PyTorch) and lockstep.keras
(Keras 3 on TensorFlow); both sit on lockstep.job.Job, which speaks to the
servers through lockstep._native, the C++ worker's own client. See
docs/python.md.
"""

import os as _os
import sys as _sys

# The C++ module links Debian's gRPC, Protobuf and Abseil. TensorFlow loads
# its own copies of those libraries with RTLD_GLOBAL, and a module loaded
# after it would bind to them (and crash): DEEPBIND makes ours resolve
# against its own dependencies first, whichever was imported first.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_os.RTLD_NOW | _os.RTLD_LOCAL |
                    getattr(_os, "RTLD_DEEPBIND", 0))
try:
    from lockstep import _native
finally:
    _sys.setdlopenflags(_flags)

# The project's version (CMakeLists.txt), compiled into the module: the
# wheel's metadata reads the same line.
__version__: str = _native.__version__

from lockstep.cluster import Cluster
from lockstep.data import Shard, load_cifar10, load_idx, shard
from lockstep.errors import LockstepError
from lockstep.job import Job, average, current_job
from lockstep.trainer_status import TrainerStatus

__all__ = ["Cluster", "Job", "LockstepError", "Shard", "TrainerStatus",
           "average", "current_job", "load_cifar10", "load_idx", "shard"]
