"""A Keras worker for the DistributedOptimizer tests, and its oracle.

With --plain it is the oracle: one process, plain Keras, the whole global
batch (W x B) each step. Otherwise it is rank LOCKSTEP_RANK of W workers,
each fitting its B examples of the same global batches, with AdamW on a
cosine schedule and global_clipnorm wrapped by
lockstep.keras.DistributedOptimizer. Writes the final weights as .npz
(--out, "{rank}" replaced).
"""

import argparse
import os

import numpy as np
import keras

p = argparse.ArgumentParser()
p.add_argument("--plain", action="store_true")
p.add_argument("--workers", type=int, default=2)
p.add_argument("--batch", type=int, default=16, help="per worker")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--out", default="")
args = p.parse_args()

rank = 0 if args.plain else int(os.environ["LOCKSTEP_RANK"])
keras.utils.set_random_seed(1000 + rank)  # Only rank 0's weights may count.
rng = np.random.default_rng(7)
x = rng.standard_normal((640, 20)).astype(np.float32)
y = rng.integers(0, 4, 640).astype(np.int32)
model = keras.Sequential([keras.Input((20,)),
                          keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(4)])
schedule = keras.optimizers.schedules.CosineDecay(
    0.01, decay_steps=args.steps, warmup_target=0.05, warmup_steps=5)
opt = keras.optimizers.AdamW(schedule, weight_decay=0.05,
                             global_clipnorm=0.5)
if not args.plain:
    import lockstep.keras
    opt = lockstep.keras.DistributedOptimizer(opt, model)
model.compile(optimizer=opt, jit_compile=False,
              loss=keras.losses.SparseCategoricalCrossentropy(
                  from_logits=True))

# Step s's global batch is examples [s*G, (s+1)*G); rank r fits its B of it.
g = args.workers * args.batch
if args.plain:
    xs, ys, batch = x[:args.steps * g], y[:args.steps * g], g
else:
    rows = np.concatenate([np.arange(s * g + rank * args.batch,
                                     s * g + (rank + 1) * args.batch)
                           for s in range(args.steps)])
    xs, ys, batch = x[rows], y[rows], args.batch
model.fit(xs, ys, batch_size=batch, epochs=1, shuffle=False, verbose=0)
print(f"done {int(opt.iterations.numpy())} steps", flush=True)
if args.out:
    np.savez(args.out.format(rank=rank),
             **{f"w{i}": np.asarray(v.numpy())
                for i, v in enumerate(model.weights)})
