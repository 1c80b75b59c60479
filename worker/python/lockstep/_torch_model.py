"""What lockstep.torch reads off a torch.nn.Module: its trainable
parameters, its float state, and a hook that fires when a parameter's
gradient is final for one backward pass. Shared by SyncOptimizer and
DistributedOptimizer."""

import torch

from lockstep.errors import error


def trainable(model):
    """[(name, parameter)] of the parameters that take gradients."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def frozen(model):
    """[(name, parameter)] of the parameters with requires_grad=False."""
    return [(n, p) for n, p in model.named_parameters() if not p.requires_grad]


def float_buffers(model):
    """Float buffers (running mean and variance): averaged, not optimized."""
    return [(n, b) for n, b in model.named_buffers()
            if b is not None and b.is_floating_point()]


def set_buffer(model, name, value):
    """Replaces the buffer `name` ("layer.running_mean") by `value`."""
    module = model
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    module._buffers[leaf] = value


# The dtypes a model may hold: float32 as it is; bfloat16 and float16
# converted at the edge (gradients widened to float32 before they are
# pushed, each version rounded to nearest into the tensor's dtype).
DTYPES = ("float32", "bfloat16", "float16")


def check_dtypes(tensors, what, does):
    """INVALID_ARGUMENT naming the first of [(name, tensor)] whose dtype is
    not one of DTYPES (float64, complex and integer tensors)."""
    for name, t in tensors:
        if str(t.dtype).replace("torch.", "") not in DTYPES:
            raise error("INVALID_ARGUMENT",
                        f"{what} {name} is {t.dtype}; Lockstep {does} "
                        "float32, bfloat16 and float16 tensors (its servers "
                        "keep float32; convert with model.float())")


def grad_hook(p, fn):
    """Calls fn() each time backward has accumulated p's gradient.

    Returns what keeps the hook alive (a handle, or the node it is on).
    """
    if hasattr(p, "register_post_accumulate_grad_hook"):  # PyTorch >= 2.1
        return p.register_post_accumulate_grad_hook(lambda _: fn())
    # Older: the parameter's AccumulateGrad node, kept alive by the caller.
    node = p.expand_as(p).grad_fn.next_functions[0][0]
    node.register_hook(lambda *_: fn())
    return node


def optimizer_tensors(optimizer, model):
    """DistributedOptimizer's checks of `optimizer` over `model`: returns
    ([(name, trainable parameter)], frozen, float buffers), or raises
    INVALID_ARGUMENT (no trainable parameter, one the optimizer holds that
    the model does not train, a dtype Lockstep does not take)."""
    params = trainable(model)
    if not params:
        raise error("INVALID_ARGUMENT", "the model has no trainable parameters")
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    known = {id(p) for _, p in params}
    if not held <= known:
        raise error("INVALID_ARGUMENT", "the optimizer holds a tensor that is "
                    "not a trainable parameter of the model")
    fixed, buffers = frozen(model), float_buffers(model)
    check_dtypes(params, "parameter", "trains")
    check_dtypes(fixed, "frozen parameter", "keeps")
    check_dtypes(buffers, "buffer", "averages")
    return params, fixed, buffers


def join_as_rank0(job, weights, tensors):
    """Joins `job` with `tensors` (torch tensors, in the order of
    job.tensors + job.state_tensors) as the flat `weights` (job.weights as
    a torch tensor), then loads the job's values (rank 0's) into them."""
    specs = job.tensors + job.state_tensors
    with torch.no_grad():
        for t, p in zip(specs, tensors):
            weights[t.offset:t.end].view(t.shape).copy_(p)
    job.join()  # Refused unless the job is at its start.
    with torch.no_grad():
        for t, p in zip(specs, tensors):
            p.copy_(weights[t.offset:t.end].view(t.shape))
