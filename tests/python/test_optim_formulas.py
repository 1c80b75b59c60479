"""The servers' optimizers formula by formula against torch.optim
(docs/optimizers.md): a real 1-worker job per optimizer through a real
lockstep_server, 10 steps of a small MLP, against (a) the torch.optim class
and settings docs/optimizers.md names, and (b) the doc's formula written
out here in plain torch, where the two differ.

With one worker the mean gradient is the worker's own to the bit (the sum
of one push, times 1.0), so every difference below is the optimizer's.
Where the doc says "the same update", the job's weights agree with
torch.optim to MATCH relative (rounding only: the same arithmetic in
another order). Where it says they differ, the job agrees with the
formula to MATCH and differs from torch.optim by the figure the doc gives
(within FIGURE_BAND), so the doc cannot silently become wrong.
"""

import math
import unittest

import harness

import numpy as np
import torch
import torch.nn.functional as F

STEPS = 10
BATCH = 32
MATCH = 1e-6  # max |a - b| / max |b| over each tensor: rounding only.
FIGURE_BAND = (0.8, 1.25)  # A documented difference, within this factor.


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4))


def batches():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((STEPS, BATCH, 20)).astype(np.float32)
    y = rng.integers(0, 4, (STEPS, BATCH))
    return [(torch.from_numpy(x[s]), torch.from_numpy(y[s]))
            for s in range(STEPS)]


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


def lockstep_job(optimizer, **settings):
    """Trains through a real server with the servers' `optimizer`."""
    import lockstep.torch as ls
    from lockstep.cluster import Cluster
    server = harness.Server(1)
    try:
        model = make_model()
        cluster = Cluster(servers=[server.address], rank=0, num_workers=1)
        opt = ls.SyncOptimizer(model, optimizer=optimizer, cluster=cluster,
                               **settings)
        for x, y in batches():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        rates = [opt.job.learning_rate(s) for s in range(STEPS)]
        opt.leave()
        server.wait(30)
        return weights(model), rates
    finally:
        server.stop()


def summation_job(make_optimizer):
    """DistributedOptimizer: the servers only average."""
    import lockstep.torch as ls
    from lockstep.cluster import Cluster
    server = harness.Server(1)
    try:
        model = make_model()
        cluster = Cluster(servers=[server.address], rank=0, num_workers=1)
        opt = ls.DistributedOptimizer(make_optimizer(model.parameters()),
                                      model, cluster=cluster)
        for x, y in batches():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        opt.leave()
        server.wait(30)
        return weights(model)
    finally:
        server.stop()


def torch_run(make_optimizer, before_step=None, rates=None):
    """Plain PyTorch, one process. before_step(opt, t) runs before step t
    (1-based); `rates` sets each step's learning rate."""
    model = make_model()
    opt = make_optimizer(model.parameters())
    for t, (x, y) in enumerate(batches(), start=1):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if rates is not None:
            for group in opt.param_groups:
                group["lr"] = rates[t - 1]
        if before_step is not None:
            before_step(opt, t)
        opt.step()
    return weights(model)


def formula_run(update, rates):
    """The doc's formula in plain fp32 torch: update(w, g, state, lr, t)."""
    model = make_model()
    params = list(model.parameters())
    states = [{} for _ in params]
    for t, (x, y) in enumerate(batches(), start=1):
        for p in params:
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p, state in zip(params, states):
                p.copy_(update(p.detach().clone(), p.grad, state,
                               rates[t - 1], t))
    return weights(model)


def f32(x):
    return torch.tensor(x, dtype=torch.float32)


def keras_sgd(weight_decay=0.0, momentum=0.0, nesterov=False):
    def update(w, g, state, lr, t):
        lr32 = f32(lr)
        if weight_decay:
            w = w - w * f32(weight_decay) * lr32  # Decoupled, before.
        if not momentum:
            return w - lr32 * g
        mu = f32(momentum)
        v = mu * state.get("v", torch.zeros_like(w)) - lr32 * g
        state["v"] = v
        return w + (mu * v - lr32 * g) if nesterov else w + v
    return update


def keras_adam(beta_1=0.9, beta_2=0.999, epsilon=1e-7, weight_decay=0.0):
    def update(w, g, state, lr, t):
        lr32 = f32(lr)
        alpha = f32(lr * math.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t))
        if weight_decay:
            w = w - w * f32(weight_decay) * lr32
        m = f32(beta_1) * state.get("m", torch.zeros_like(w)) + \
            f32(1 - beta_1) * g
        v = f32(beta_2) * state.get("v", torch.zeros_like(w)) + \
            f32(1 - beta_2) * (g * g)
        state["m"], state["v"] = m, v
        return w - alpha * m / (torch.sqrt(v) + f32(epsilon))
    return update


def keras_epsilon(epsilon, beta_2=0.999):
    """torch.optim.Adam's eps that gives Keras's update at step t."""
    def before_step(opt, t):
        for group in opt.param_groups:
            group["eps"] = epsilon / math.sqrt(1 - beta_2 ** t)
    return before_step


def rescale_buffers(rates):
    """Scales torch SGD's momentum buffers by lr(t-1) / lr(t) before step
    t."""
    def before_step(opt, t):
        if t == 1:
            return
        for group in opt.param_groups:
            for p in group["params"]:
                opt.state[p]["momentum_buffer"].mul_(rates[t - 2] /
                                                     rates[t - 1])
    return before_step


def decay_by_hand(weight_decay):
    """w -= w * weight_decay * lr before torch's step."""
    def before_step(opt, t):
        with torch.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    p.sub_(p * weight_decay * group["lr"])
    return before_step


def worst(a, b):
    """The largest max_relative_difference over the tensors."""
    return max(harness.max_relative_difference(x.numpy(), y.numpy())
               for x, y in zip(a, b))


def worst_of_change(a, b, start):
    """The largest max |a - b| / max |b - start|: the share of training's
    change of the weights that the two runs disagree on."""
    out = 0.0
    for x, y, s in zip(a, b, start):
        x, y, s = (np.asarray(v.numpy(), np.float64) for v in (x, y, s))
        out = max(out, float(np.abs(x - y).max() / np.abs(y - s).max()))
    return out


class FormulaTest(unittest.TestCase):

    def assert_match(self, job, oracle, what):
        d = worst(job, oracle)
        print(f"{what}: {d:.3g}")
        self.assertLessEqual(d, MATCH, what)

    def assert_differs(self, job, oracle, figure, what):
        """The job differs from `oracle` by `figure` of the weights' change
        (as docs/optimizers.md states it)."""
        d = worst_of_change(job, oracle, weights(make_model()))
        print(f"{what}: {d:.3g} of the change (doc: {figure})")
        self.assertGreaterEqual(d, figure * FIGURE_BAND[0], what)
        self.assertLessEqual(d, figure * FIGURE_BAND[1], what)

    def test_defaults_are_keras(self):
        from lockstep import _native
        expected = {"sgd": (0.01, 0.0, 0.0), "momentum": (0.01, 0.9, 0.0),
                    "adam": (0.001, 0.0, 0.0), "adamw": (0.001, 0.0, 0.004)}
        for name, (lr, momentum, weight_decay) in expected.items():
            d = _native.optimizer_defaults(name)
            self.assertEqual(
                (d["learning_rate"], d["momentum"], d["nesterov"],
                 d["beta_1"], d["beta_2"], d["epsilon"], d["weight_decay"]),
                (lr, momentum, False, 0.9, 0.999, 1e-7, weight_decay), name)

    def test_training_moves_the_weights(self):
        # Otherwise every comparison below would agree trivially.
        job, _ = lockstep_job("sgd", lr=0.1)
        self.assertGreater(worst(job, weights(make_model())), 1e-2)

    def test_sgd_is_torch_sgd(self):
        job, _ = lockstep_job("sgd", lr=0.1)
        self.assert_match(job, torch_run(
            lambda p: torch.optim.SGD(p, lr=0.1)), "sgd")

    def test_sgd_weight_decay_is_torch_sgd_weight_decay(self):
        # Without momentum, decoupled and coupled decay are one update.
        job, _ = lockstep_job("sgd", lr=0.1, weight_decay=0.05)
        self.assert_match(job, torch_run(
            lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.05)),
            "sgd weight_decay")

    def test_momentum_is_torch_sgd_momentum(self):
        job, _ = lockstep_job("momentum", lr=0.05, momentum=0.9)
        self.assert_match(job, torch_run(
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)), "momentum")

    def test_nesterov_is_torch_sgd_nesterov(self):
        job, _ = lockstep_job("momentum", lr=0.05, momentum=0.9,
                              nesterov=True)
        self.assert_match(job, torch_run(
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9,
                                      nesterov=True)), "nesterov")

    def test_momentum_under_a_schedule_differs(self):
        # Keras keeps lr inside the velocity; torch scales the whole buffer
        # by the current rate.
        schedule = {"schedule": "exponential", "decay_steps": 2,
                    "decay_rate": 0.5}
        job, rates = lockstep_job("momentum", lr=0.05, momentum=0.9,
                                  lr_schedule=schedule)
        self.assertAlmostEqual(rates[-1], 0.05 * 0.5 ** 4.5, places=12)
        self.assert_match(job, formula_run(keras_sgd(momentum=0.9), rates),
                          "momentum schedule vs formula")
        sgd = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)  # noqa
        self.assert_differs(job, torch_run(sgd, rates=rates), 1.3,
                            "momentum schedule vs torch")
        # torch's buffer rescaled by lr(t-1) / lr(t) before each step is
        # Keras's velocity over -lr(t).
        self.assert_match(job, torch_run(
            sgd, rates=rates, before_step=rescale_buffers(rates)),
            "momentum schedule vs torch, buffer rescaled")

    def test_momentum_weight_decay_differs(self):
        # Decoupled: the decay does not go through the velocity.
        job, rates = lockstep_job("momentum", lr=0.05, momentum=0.9,
                                  weight_decay=0.05)
        self.assert_match(job, formula_run(
            keras_sgd(weight_decay=0.05, momentum=0.9), rates),
            "momentum weight_decay vs formula")
        self.assert_differs(job, torch_run(
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9,
                                      weight_decay=0.05)),
            0.67, "momentum weight_decay vs torch")
        # torch's SGD without weight_decay, the weights decayed by hand.
        self.assert_match(job, torch_run(
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            before_step=decay_by_hand(0.05)),
            "momentum weight_decay vs torch, decayed by hand")

    def test_adam_is_torch_adam_with_epsilon_per_step(self):
        job, rates = lockstep_job("adam", lr=0.01)
        self.assert_match(job, formula_run(keras_adam(), rates),
                          "adam vs formula")
        self.assert_match(job, torch_run(
            lambda p: torch.optim.Adam(p, lr=0.01),
            before_step=keras_epsilon(1e-7)), "adam vs torch eps_t")
        self.assert_differs(job, torch_run(
            lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-7)), 0.014,
            "adam vs torch same eps")

    def test_adamw_is_torch_adamw_with_epsilon_per_step(self):
        job, rates = lockstep_job("adamw", lr=0.01, weight_decay=0.1)
        self.assert_match(job, formula_run(
            keras_adam(weight_decay=0.1), rates), "adamw vs formula")
        self.assert_match(job, torch_run(
            lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
            before_step=keras_epsilon(1e-7)), "adamw vs torch eps_t")

    def test_adam_weight_decay_is_decoupled(self):
        # "adam" with weight_decay is "adamw": torch.optim.AdamW, not
        # torch.optim.Adam's coupled L2.
        job, _ = lockstep_job("adam", lr=0.01, weight_decay=0.1)
        self.assert_match(job, torch_run(
            lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
            before_step=keras_epsilon(1e-7)), "adam wd vs torch AdamW")
        self.assert_differs(job, torch_run(
            lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
            before_step=keras_epsilon(1e-7)), 1.8,
            "adam wd vs torch Adam wd")

    def test_summation_mode_is_the_torch_optimizer_itself(self):
        make = lambda p: torch.optim.Adam(p, lr=0.01)  # noqa: E731
        job = summation_job(make)
        oracle = torch_run(make)
        for a, b in zip(job, oracle):  # One worker: the same bits.
            np.testing.assert_array_equal(a.numpy(), b.numpy())


if __name__ == "__main__":
    unittest.main()
