"""What lockstep.torch reads off a torch.nn.Module: its trainable
parameters, its float state, and a hook that fires when a parameter's
gradient is final for one backward pass. Shared by SyncOptimizer and
DistributedOptimizer."""

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
