"""What lockstep.job.Job checks before it joins: the optimizer and sync
mode settings, and where each named tensor lies in the flat vectors."""

import numpy as np

from lockstep import _native
from lockstep.errors import error

# The C++ definitions' (common/model/model_signature.h), never a copy.
SYNC_MODES = _native.SYNC_MODES
# LocalSGD and DiLoCo: synchronous rounds of local steps (Job's sync).
ROUNDS_MODES = _native.ROUNDS_MODES
OPTIMIZERS = _native.OPTIMIZERS
# The summation mode's: the servers publish the mean gradient, not weights.
AVERAGE = _native.AVERAGE


def _bad(message):
    return error("INVALID_ARGUMENT", message)


def check_modes(optimizer, sync, backup_workers, local_steps, outer_lr,
                outer_momentum, inner_state_dir=None):
    """Refuses settings that cannot hold together (INVALID_ARGUMENT);
    returns the rounds mode ("" when steps are not in rounds) and the
    local steps (default lockstep_worker's --local_steps')."""
    if optimizer not in OPTIMIZERS and optimizer != AVERAGE:
        raise _bad(f"optimizer must be one of {', '.join(OPTIMIZERS)}, "
                   f"got {optimizer!r}")
    rounds = sync if sync in ROUNDS_MODES else ""
    if rounds and optimizer == AVERAGE:
        raise _bad(f"{sync} runs the optimizer on every worker between "
                   "rounds: it has no summation mode (give a named "
                   "optimizer)")
    if optimizer == AVERAGE and (sync != "sync" or backup_workers):
        raise _bad("the summation mode runs in sync mode without backup "
                   "workers: every worker applies every step's mean "
                   "gradient itself")
    if sync not in SYNC_MODES + ROUNDS_MODES:
        raise _bad(f"sync must be one of "
                   f"{', '.join(SYNC_MODES + ROUNDS_MODES)}, got {sync!r}")
    if not rounds and (local_steps is not None or outer_lr is not None
                       or outer_momentum is not None
                       or inner_state_dir is not None):
        raise _bad("local_steps, outer_lr, outer_momentum and "
                   "inner_state_dir need sync=localsgd or diloco")
    if local_steps is None:
        local_steps = _native.DEFAULT_LOCAL_STEPS
    local_steps = int(local_steps)
    return rounds, local_steps


class Tensor:
    """Where one named tensor lies in the flat vectors."""
    __slots__ = ("name", "shape", "offset", "size")

    def __init__(self, name, shape, offset):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.offset = offset
        self.size = int(np.prod(self.shape, dtype=np.int64))

    @property
    def end(self):
        return self.offset + self.size
