// Protobuf's base-128 varint, written by hand where a message is encoded
// without the protobuf library: the gRPC replies' in-place wire format
// (common/rpc/wire_format.cc) and TensorBoard's event records
// (worker/train/tensorboard_writer.cc, which must stay protobuf-free).
#ifndef LOCKSTEP_COMMON_RPC_VARINT_H_
#define LOCKSTEP_COMMON_RPC_VARINT_H_

#include <cstdint>
#include <string>

namespace lockstep {

// Appends `value` as a varint: seven bits a byte, low bits first, the high
// bit set on every byte but the last.
inline void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RPC_VARINT_H_
