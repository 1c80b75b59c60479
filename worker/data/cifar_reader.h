// Reader for CIFAR-10's binary format (the cifar-10-batches-bin directory of
// https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz): data_batch_1.bin
// ... data_batch_5.bin (10,000 training images each) and test_batch.bin.
// Every record is 1 label byte (0-9) and 3072 pixel bytes: the 32x32 red
// plane, then green, then blue, each row-major.
//
// Images come out NHWC (32x32x3, channels fastest, as the image models
// take them) and normalized per channel with fixed constants,
//   x = (pixel / 255 - kCifarMean[c]) / kCifarStd[c],
// the mean and standard deviation of the 50,000 training images' pixels
// (the widely used values). Fixed constants rather than statistics of the
// files read, so every worker, any subset of the files and the test split
// are normalized identically.
#ifndef LOCKSTEP_WORKER_DATA_CIFAR_READER_H_
#define LOCKSTEP_WORKER_DATA_CIFAR_READER_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace lockstep {

inline constexpr int kCifarHeight = 32;
inline constexpr int kCifarWidth = 32;
inline constexpr int kCifarChannels = 3;
inline constexpr int kCifarClasses = 10;
inline constexpr int kCifarImageBytes =
    kCifarHeight * kCifarWidth * kCifarChannels;
inline constexpr int kCifarRecordBytes = 1 + kCifarImageBytes;
inline constexpr float kCifarMean[kCifarChannels] = {0.4914f, 0.4822f, 0.4465f};
inline constexpr float kCifarStd[kCifarChannels] = {0.2470f, 0.2435f, 0.2616f};

// One batch file. NOT_FOUND when it is missing; INVALID_ARGUMENT naming the
// file when it is empty, its size is not a multiple of 3073 bytes, or a
// label is above 9 (naming the record).
absl::StatusOr<Dataset> ReadCifarFile(const std::string& path);

// The training split (data_batch_1.bin to data_batch_5.bin, in that order)
// or the test split (test_batch.bin) from `dir`; errors as ReadCifarFile's.
absl::StatusOr<Dataset> LoadCifar10(const std::string& dir, bool train);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_CIFAR_READER_H_
