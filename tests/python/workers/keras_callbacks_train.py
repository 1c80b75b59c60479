"""A Keras worker for the callback tests: a linear regression on 64
examples whose labels are i/64, fitted through lockstep.keras with
shard(tf.data.Dataset) (batch 8 a worker), a metric that is the mean label
the worker saw, and rank0_only(ModelCheckpoint) writing
DIR/ckpt-rank{rank}.weights.h5 (so a file from another rank would show).

Writes DIR/logs{rank}.json (the epoch-end logs before and after
MetricAverageCallback, and History's) and DIR/final{rank}.npz (the
weights after fit).
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf
import keras
import lockstep.keras

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--average", action="store_true",
               help="MetricAverageCallback after the first recorder")
p.add_argument("--extra_metric_on_rank", type=int, default=-1,
               help="this rank compiles one metric more (a mismatch)")
p.add_argument("--full_model", action="store_true",
               help="the checkpoint is the whole model (.keras)")
args = p.parse_args()

rank = lockstep.keras.rank()
keras.utils.set_random_seed(1000 + rank)  # Only rank 0's weights may count.
n = 64
x = np.random.default_rng(7).standard_normal((n, 4)).astype(np.float32)
y = (np.arange(n, dtype=np.float32) / n).reshape(n, 1)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
metrics = [keras.metrics.MeanMetricWrapper(lambda t, _: t, name="label_mean")]
if rank == args.extra_metric_on_rank:
    metrics.append(keras.metrics.MeanAbsoluteError(name="mae"))
model.compile(optimizer=lockstep.keras.SyncOptimizer("sgd", learning_rate=0.05,
                                                     model=model),
              loss="mse", metrics=metrics, jit_compile=False)


class Record(keras.callbacks.Callback):
    def __init__(self, into):
        super().__init__()
        self.into = into

    def on_epoch_end(self, epoch, logs=None):
        self.into.append({k: float(v) for k, v in logs.items()})


local, seen = [], []
checkpoint = os.path.join(args.dir, f"ckpt-rank{rank}" +
                          (".keras" if args.full_model else ".weights.h5"))
callbacks = [Record(local)]
if args.average:
    callbacks.append(lockstep.keras.callbacks.MetricAverageCallback())
callbacks += [Record(seen), lockstep.keras.callbacks.rank0_only(
    keras.callbacks.ModelCheckpoint(
        checkpoint, save_weights_only=not args.full_model))]
data = tf.data.Dataset.from_tensor_slices((x, y))
model.fit(lockstep.keras.shard(data, batch_size=8), epochs=args.epochs,
          verbose=0, callbacks=callbacks)
with open(os.path.join(args.dir, f"logs{rank}.json"), "w") as f:
    json.dump({"local": local, "seen": seen,
               "history": model.history.history}, f)
np.savez(os.path.join(args.dir, f"final{rank}.npz"),
         **{f"w{i}": np.asarray(v.numpy())
            for i, v in enumerate(model.weights)})
print(f"done version {model.optimizer.job.version}", flush=True)
