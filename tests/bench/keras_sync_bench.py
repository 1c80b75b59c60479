"""The Keras tutorial (MLP 784-128-10, Adam, batch 64 per worker) on
Fashion-MNIST, synchronized two ways, for side-by-side figures
(tests/bench/python_bench.sh runs it):

  lockstep: lockstep.keras.SyncOptimizer (under lockstep_launch -- ...);
  mwms:     tf.distribute.MultiWorkerMirroredStrategy, TF_CONFIG naming
            both workers on loopback, the global batch 64 x W. Keras 3's
            fit does not run under it (keras-team/keras#20585), so this
            side is the same script on tf_keras (Keras 2), as TensorFlow's
            multi-worker tutorial runs today.

Two epochs; rank 0 prints "examples_per_sec=X" over the second (the first
traces and builds).

usage: keras_sync_bench.py MODE [BATCH]
"""

import os
import sys
import time

if len(sys.argv) > 1 and sys.argv[1] == "mwms":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tf_keras as keras
else:
    import keras
import tensorflow as tf


class EpochTimer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start


def model():
    return keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(),
                             keras.layers.Dense(128, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


def main():
    mode = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    timer = EpochTimer()
    if mode == "lockstep":
        import lockstep.keras
        from lockstep import _native
        x, y = _native.load_idx("/usr/share/datasets/fashion-mnist", True)
        x = x.reshape(-1, 28, 28)
        m = model()
        m.compile(optimizer=lockstep.keras.SyncOptimizer("adam", model=m),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=False)
        m.fit(lockstep.keras.shard((x, y), batch_size=batch), epochs=2,
              verbose=0, callbacks=[timer])
        rank = int(os.environ["LOCKSTEP_RANK"])
        workers = int(os.environ["LOCKSTEP_WORKERS"])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        import json
        task = json.loads(os.environ["TF_CONFIG"])
        rank = task["task"]["index"]
        workers = len(task["cluster"]["worker"])
        sys.path.insert(0, os.environ["LOCKSTEP_PYTHON_DIR"])
        from lockstep import _native
        x, y = _native.load_idx("/usr/share/datasets/fashion-mnist", True)
        x = x.reshape(-1, 28, 28)
        with strategy.scope():
            m = model()
            m.compile(optimizer=keras.optimizers.Adam(),
                      loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
            60000, seed=42).batch(batch * workers, drop_remainder=True)
        m.fit(data, epochs=2, verbose=0, callbacks=[timer])
    steps = len(y) // (batch * workers)
    if rank == 0:
        print(f"examples_per_sec={steps * batch * workers / timer.seconds:.1f}",
              flush=True)


if __name__ == "__main__":
    main()
