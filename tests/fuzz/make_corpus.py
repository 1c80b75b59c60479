#!/usr/bin/env python3
"""Writes the seed corpus of the fuzzers (tests/fuzz/corpus/<target>/).

Run from anywhere: python3 tests/fuzz/make_corpus.py. The seeds are small
valid inputs plus a few broken ones, encoded by hand here (protobuf wire
format, IDX, the checkpoint format of server/core/checkpoint.h) so that no
generated code is needed. The output is deterministic; the files are
committed, and re-running rewrites them identically.
"""

import gzip
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def vfield(field, n):
    return key(field, 0) + varint(n) if n else b""


def lfield(field, data):
    return key(field, 2) + varint(len(data)) + data


def dfield(field, x):
    return key(field, 1) + struct.pack("<d", x) if x else b""


def signature(tensors, optimizer="adam", lr=0.001, chunk_bytes=4096,
              workers=2, shards=1, mode="sync", total_steps=0, state=()):
    out = b""
    for name, shape in tensors:
        spec = lfield(1, name.encode())
        spec += lfield(2, b"".join(varint(d) for d in shape))  # packed
        out += lfield(1, spec)
    opt = lfield(1, optimizer.encode()) + dfield(2, lr)
    if optimizer.startswith("adam"):
        opt += dfield(5, 0.9) + dfield(6, 0.999) + dfield(7, 1e-7)
    out += lfield(2, opt)
    out += vfield(3, chunk_bytes) + vfield(4, workers) + vfield(5, shards)
    out += lfield(6, lfield(1, mode.encode()))
    out += vfield(7, total_steps)
    for name, shape in state:
        spec = lfield(1, name.encode())
        spec += lfield(2, b"".join(varint(d) for d in shape))
        out += lfield(8, spec)
    return out


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def idx(dims, body=None):
    head = bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    if body is None:
        n = 1
        for d in dims:
            n *= d
        body = bytes(i % 251 for i in range(n))
    return head + body


def checkpoint(sig, chunks):
    """A format-1 checkpoint of chunks [(index, version, {name: floats})]."""
    data = b""
    tensors = b""
    for index, version, slots in chunks:
        for name, values in slots:
            # An int claims that many elements with no data behind them.
            claimed = values if isinstance(values, int) else len(values)
            raw = b"" if isinstance(values, int) else struct.pack(
                "<%df" % len(values), *values)
            t = (vfield(1, index) + lfield(2, name.encode()) + vfield(3, len(data))
                 + vfield(4, claimed) + vfield(5, zlib.crc32(raw))
                 + vfield(6, version))
            tensors += lfield(6, t)
            data += raw
    header = (lfield(1, sig) + vfield(2, 0) + vfield(3, 1) + vfield(4, 2)
              + vfield(5, 3) + tensors + vfield(7, 1700000000000000))
    return (b"LSCKPT\n\0" + struct.pack("<I", 1) + struct.pack("<Q", len(header))
            + struct.pack("<I", zlib.crc32(header)) + header + data)


# The small model of the register and checkpoint seeds.
MLP = [("dense/kernel", [4, 3]), ("dense/bias", [3])]


def idx_seeds():
    """IDX files: images and labels, plain and gzip, and broken ones."""
    # IDX files: images and labels, plain and gzip, and broken ones.
    images = idx([3, 2, 2])
    write("idx_reader", "images.idx", images)
    write("idx_reader", "labels.idx", idx([5], bytes([0, 1, 2, 9, 3])))
    write("idx_reader", "images.idx.gz", gzip.compress(images, mtime=0))
    write("idx_reader", "truncated.idx", images[:-3])
    write("idx_reader", "huge_claim.idx", bytes([0, 0, 8, 3]) + b"\xff" * 12)
    write("idx_reader", "wrong_type.idx", bytes([0, 0, 0x0d, 1, 0, 0, 0, 1]) + b"\0" * 4)


def tf_config_seeds():
    """TF_CONFIG texts, good and bad."""
    # TF_CONFIG.
    tf = {
        "worker.json": '{"cluster": {"ps": ["ps0:2222"], "worker": ["w0:2222", '
                       '"w1:2222"]}, "task": {"type": "worker", "index": 1}}',
        "chief.json": '{"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": '
                      '["p:1", "p:2"]}, "task": {"type": "chief", "index": 0}}',
        "ps.json": '{"cluster": {"ps": ["a:1"], "worker": ["b:2"]}, "task": '
                   '{"type": "ps", "index": 0}}',
        "bad_index.json": '{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", '
                          '"index": 1.5}}',
        "not_json.txt": '{"cluster": [',
        "nested.json": '{"cluster": {"ps": [["a"]]}, "task": {"type": "ps"}}',
    }
    for name, text in tf.items():
        write("tf_config", name, text.encode())


def wire_format_seeds():
    """PushRequests and weights replies."""
    # PushRequest and weights replies (the first byte of each seed steers
    # how the fuzzer cuts the rest into slices).
    payload = struct.pack("<4f", 0.5, -1.0, 2.0, 0.25)
    push = (vfield(1, 1) + vfield(2, 7) + vfield(3, 3) + vfield(4, 0)
            + vfield(5, 1) + lfield(6, payload))
    reply = vfield(1, 4) + vfield(2, 0) + vfield(3, 1) + lfield(4, payload)
    write("wire_format", "push", b"\x03" + push)
    write("wire_format", "reply", b"\x05" + reply)
    write("wire_format", "push_bf16", b"\x01" + vfield(1, 1) + vfield(5, 2)
          + lfield(6, b"\x00\x3f\x80\xbf"))
    write("wire_format", "huge_length", b"\x00" + key(6, 2) + varint(1 << 32))
    write("wire_format", "nan", b"\x02" + vfield(1, 0) + lfield(6, struct.pack(
        "<2f", float("nan"), 1.0)))


def register_seeds():
    """RegisterRequests."""
    # RegisterRequests.
    write("register", "mlp", vfield(1, 0) + lfield(2, signature(MLP)))
    write("register", "rank1_sgd", vfield(1, 1) + lfield(2, signature(
        MLP, optimizer="sgd", lr=0.01, chunk_bytes=16)))
    write("register", "two_shards", vfield(1, 0) + lfield(2, signature(
        MLP, shards=2, mode="ssp")))
    write("register", "huge", vfield(1, 0) + lfield(2, signature(
        [("w", [1 << 31, 1 << 31])])))
    write("register", "negative", vfield(1, 0) + lfield(2, signature(
        [("w", [-4, 3])])))
    # Batch-norm state after the parameters, and a state tensor of 2^40
    # values behind a one-parameter model (it must count against the limit).
    write("register", "batch_norm_state", vfield(1, 0) + lfield(2, signature(
        MLP, state=[("bn/moving_mean", [3]), ("bn/moving_variance", [3])])))
    write("register", "huge_state", vfield(1, 0) + lfield(2, signature(
        [("w", [1])], state=[("bn", [1 << 40])])))
    # Two shards shrink chunks to the parameters per shard, state included.
    write("register", "sharded_state", vfield(1, 0) + lfield(2, signature(
        [("w", [2])], shards=2, state=[("bn", [1 << 20])])))


def checkpoint_seeds():
    """Checkpoints of the small model, intact and damaged."""
    # Checkpoints of the small model (one chunk of 15 values with Adam's
    # two slots), intact and damaged.
    sig = signature(MLP, chunk_bytes=4096)
    w = [0.1 * i for i in range(15)]
    ckpt = checkpoint(sig, [(0, 3, [("weights", w), ("m", [0.0] * 15),
                                    ("v", [0.0] * 15)])])
    # The fuzzer reads a first byte: even, the file as it is; odd,
    # [header length][header][data] that it wraps with correct checksums.
    write("checkpoint", "intact.lsc", b"\x00" + ckpt)
    write("checkpoint", "truncated.lsc", b"\x00" + ckpt[: len(ckpt) - 17])
    flipped = bytearray(ckpt)
    flipped[-5] ^= 0x40
    write("checkpoint", "bad_crc.lsc", b"\x00" + bytes(flipped))
    # 2^62 elements: 4 * 2^62 wraps to 0 in 64 bits (a decoder that
    # multiplies before it compares would allocate 16 EiB).
    write("checkpoint", "huge_elements.lsc",
          b"\x00" + checkpoint(sig, [(0, 1, [("weights", 1 << 62)])]))
    header_len = struct.unpack("<Q", ckpt[12:20])[0]
    header, data = ckpt[24:24 + header_len], ckpt[24 + header_len:]
    write("checkpoint", "structured.bin",
          b"\x01" + struct.pack("<I", len(header)) + header + data)


def main():
    idx_seeds()
    tf_config_seeds()
    wire_format_seeds()
    register_seeds()
    checkpoint_seeds()


if __name__ == "__main__":
    main()
