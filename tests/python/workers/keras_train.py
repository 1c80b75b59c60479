"""A Keras worker for the tests: a small MLP on synthetic data through
Lockstep; rank 0 writes the final weights with --out (safetensors)."""

import argparse
import os

import numpy as np
import keras
import lockstep.keras

p = argparse.ArgumentParser()
p.add_argument("--optimizer", default="sgd")
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--out", default="",
               help="safetensors file; {rank} in it writes one per rank")
p.add_argument("--model", default="mlp", choices=["mlp", "bn"])
p.add_argument("--nan", action="store_true", help="features all NaN")
p.add_argument("--data", default="arrays", choices=["arrays", "dataset"],
               help="shard numpy arrays, or a tf.data.Dataset of them")
p.add_argument("--sync", default="sync")
p.add_argument("--local_steps", type=int, default=None)
args = p.parse_args()
rounds = {"local_steps": args.local_steps} if args.local_steps else {}

rank = int(os.environ["LOCKSTEP_RANK"])
keras.utils.set_random_seed(1000 + rank)  # Only rank 0's weights may count.
rng = np.random.default_rng(7)
x = rng.standard_normal((640, 20)).astype(np.float32)
y = rng.integers(0, 4, 640).astype(np.int32)
if args.nan:
    x[:] = np.nan
layers = [keras.layers.Dense(16, activation="relu")]
if args.model == "bn":
    layers.append(keras.layers.BatchNormalization())
model = keras.Sequential([keras.Input((20,)), *layers, keras.layers.Dense(4)])
model.compile(optimizer=lockstep.keras.SyncOptimizer(
                  args.optimizer, learning_rate=args.lr, model=model,
                  sync=args.sync, **rounds),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              jit_compile=False)
if args.data == "dataset":
    import tensorflow as tf
    data = tf.data.Dataset.from_tensor_slices((x, y))
else:
    data = (x, y)
model.fit(lockstep.keras.shard(data, batch_size=args.batch), epochs=1,
          steps_per_epoch=args.steps, verbose=0,
          callbacks=[lockstep.keras.InterruptibleCallback()])
print(f"done version {model.optimizer.job.version}", flush=True)
if args.out and (rank == 0 or "{rank}" in args.out):
    lockstep.keras.save_safetensors(model, args.out.format(rank=rank))
