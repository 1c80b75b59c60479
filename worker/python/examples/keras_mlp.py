"""TensorFlow's synchronous-training tutorial (an MLP 784-128-10 with Adam,
batch 64, 5 epochs), here on Fashion-MNIST, trained through Lockstep.

    lockstep_launch --ps=1 --workers=2 -- python3 keras_mlp.py

Against the tutorial's single-machine code three lines change, marked
"Lockstep:". The data comes from Debian's dataset-fashion-mnist through
Lockstep's IDX reader (the same bytes lockstep_worker trains on).
"""

import argparse

import keras
import lockstep.keras  # Lockstep: 1 of 3

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--save", default="", help="safetensors file for rank 0")
args = parser.parse_args()

x_train, y_train = lockstep.load_idx(args.data_dir, True)
x_test, y_test = lockstep.load_idx(args.data_dir, False)
x_train, x_test = x_train.reshape(-1, 28, 28), x_test.reshape(-1, 28, 28)

model = keras.Sequential([
    keras.Input((28, 28)),
    keras.layers.Flatten(),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=lockstep.keras.SyncOptimizer("adam", model=model),  # Lockstep: 2 of 3
              loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              jit_compile=False)
verbose = 2 if lockstep.keras.rank() == 0 else 0
model.fit(lockstep.keras.shard((x_train, y_train), batch_size=args.batch_size),  # Lockstep: 3 of 3
          epochs=args.epochs, verbose=verbose,
          callbacks=[lockstep.keras.InterruptibleCallback()])
if verbose:
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"Test accuracy {accuracy:.4f} - test loss {loss:.4f}")
    if args.save:
        lockstep.keras.save_safetensors(model, args.save)
