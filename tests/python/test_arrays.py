"""The arrays lockstep._native returns, under whichever numpy this venv has.

ctest runs it twice: in the torch venv (Debian's numpy 1) and in the Keras
venv (PyPI's numpy 2), each naming the numpy major it must find in
LOCKSTEP_NUMPY_MAJOR. The oracles are independent of the module: the IDX
files parsed here with gzip and numpy, the safetensors package, and the
sampler's documented order. Seconds.
"""

import gzip
import os
import tempfile
import unittest

import harness

import numpy as np
from safetensors.numpy import load_file, save_file

from lockstep import _native


def read_idx(path, header):
    """The values of an IDX file after its `header` bytes, as uint8."""
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read()[header:], np.uint8)


class ArraysTest(unittest.TestCase):

    def check_layout(self, array, dtype, shape):
        """A plain, writable, C-ordered array of `dtype` shaped `shape`."""
        self.assertIsInstance(array, np.ndarray)
        self.assertEqual(array.dtype, np.dtype(dtype))
        self.assertEqual(array.shape, shape)
        strides, step = [], array.itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
        self.assertEqual(array.strides, tuple(strides))
        self.assertTrue(array.flags.c_contiguous)
        self.assertTrue(array.flags.writeable)
        self.assertTrue(array.flags.aligned)

    def test_the_venv_has_the_numpy_it_is_run_for(self):
        want = os.environ.get("LOCKSTEP_NUMPY_MAJOR")
        self.assertIsNotNone(want, "ctest sets LOCKSTEP_NUMPY_MAJOR")
        self.assertEqual(np.__version__.split(".")[0], want, np.__version__)

    def test_idx_arrays_equal_the_files(self):
        for train, prefix, count in ((True, "train", 60000),
                                     (False, "t10k", 10000)):
            x, y = _native.load_idx(harness.FASHION, train)
            self.check_layout(x, np.float32, (count, 784))
            self.check_layout(y, np.int32, (count,))
            pixels = read_idx(os.path.join(
                harness.FASHION, f"{prefix}-images-idx3-ubyte.gz"), 16)
            labels = read_idx(os.path.join(
                harness.FASHION, f"{prefix}-labels-idx1-ubyte.gz"), 8)
            expect = pixels.astype(np.float32) / np.float32(255)
            np.testing.assert_array_equal(x, expect.reshape(count, 784))
            np.testing.assert_array_equal(y, labels.astype(np.int32))
            # Fashion-MNIST is balanced: 6,000 (1,000) of each of 10 classes.
            self.assertEqual(np.bincount(y).tolist(), [count // 10] * 10)

    def test_safetensors_values_cross_the_binding_both_ways(self):
        rng = np.random.default_rng(3)
        tensors = {"a/kernel": rng.standard_normal((5, 3)).astype(np.float32),
                   "b": rng.standard_normal(7).astype(np.float32),
                   "c": np.array([1.5], np.float32)}
        path = os.path.join(tempfile.mkdtemp(), "in.safetensors")
        save_file(tensors, path)
        read = {n: (s, v) for n, s, v in _native.read_safetensors(path)}
        self.assertEqual(sorted(read), sorted(tensors))
        for name, (shape, values) in read.items():
            self.assertEqual(shape, list(tensors[name].shape))
            self.check_layout(values, np.float32, (tensors[name].size,))
            np.testing.assert_array_equal(values, tensors[name].ravel())
        # And out: a numpy array read through the buffer protocol.
        out = os.path.join(tempfile.mkdtemp(), "out.safetensors")
        names = sorted(tensors)
        flat = np.concatenate([tensors[n].ravel() for n in names])
        _native.write_safetensors(out, [(n, list(tensors[n].shape))
                                        for n in names], flat)
        back = load_file(out)
        for name in names:
            np.testing.assert_array_equal(back[name], tensors[name])

    def test_sampler_indices_are_the_documented_order(self):
        workers, batch, n = 2, 8, 1000
        sampler = _native.ShardedSampler(n, workers, 1, batch, 42)
        order = sampler.epoch_permutation(0)
        self.check_layout(order, np.int64, (n,))
        np.testing.assert_array_equal(np.sort(order), np.arange(n))
        step = 3
        indices = sampler.batch_indices(step)
        self.check_layout(indices, np.int64, (batch,))
        # Step s: the W*B positions after s*W*B; rank 1 the second B.
        start = step * workers * batch + batch
        np.testing.assert_array_equal(indices, order[start:start + batch])


if __name__ == "__main__":
    unittest.main(verbosity=2)
