#include "worker/data/idx_reader.h"

#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bytes = std::vector<uint8_t>;

// IDX header for unsigned-byte data of the given shape.
Bytes Header(const std::vector<uint32_t>& dims, uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  return out;
}

Bytes Concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/idx_reader_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string WritePlain(const std::string& name, const Bytes& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  std::string WriteGzip(const std::string& name, const Bytes& bytes) {
    const std::string path = dir_ + "/" + name;
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (f == nullptr) return path;
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()),
                static_cast<int>(bytes.size()));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }

  Bytes ReadRaw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }

  // Expects INVALID_ARGUMENT whose message names the file and the problem.
  void ExpectInvalid(const std::string& path, const std::string& problem) {
    absl::StatusOr<IdxArray> result = ReadIdxFile(path);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(problem));
  }

  std::string dir_;
};

const Bytes kImageBody = {0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255};

TEST_F(IdxReaderTest, ReadsPlainThreeDimensionalFile) {
  const std::string path =
      WritePlain("images", Concat(Header({2, 2, 3}), kImageBody));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(2, 2, 3));
  EXPECT_EQ(array->data, kImageBody);
}

TEST_F(IdxReaderTest, ReadsGzipDetectedByContentNotName) {
  // No ".gz" suffix: compression must be recognised from the bytes.
  const std::string path =
      WriteGzip("images", Concat(Header({2, 2, 3}), kImageBody));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(2, 2, 3));
  EXPECT_EQ(array->data, kImageBody);
}

TEST_F(IdxReaderTest, ReadsOneDimensionalGzipFile) {
  const std::string path =
      WriteGzip("labels.gz", Concat(Header({5}), {9, 0, 3, 7, 1}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(5));
  EXPECT_THAT(array->data, ElementsAre(9, 0, 3, 7, 1));
}

TEST_F(IdxReaderTest, ReadsEmptyArray) {
  const std::string path = WritePlain("empty", Header({0, 28, 28}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(0, 28, 28));
  EXPECT_TRUE(array->data.empty());
}

TEST_F(IdxReaderTest, ReadsBodyLargerThanOneReadChunk) {
  // Just over 16 MiB, the reader's chunk size, in both encodings.
  const uint32_t rows = (1u << 24) / 1000 + 7;
  Bytes body(static_cast<size_t>(rows) * 1000);
  for (size_t i = 0; i < body.size(); ++i) {
    body[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  }
  const Bytes file = Concat(Header({rows, 1000}), body);
  for (const std::string& path :
       {WritePlain("big", file), WriteGzip("big.gz", file)}) {
    absl::StatusOr<IdxArray> array = ReadIdxFile(path);
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_THAT(array->dims, ElementsAre(rows, 1000));
    EXPECT_TRUE(array->data == body) << path;
  }
}

TEST_F(IdxReaderTest, MissingFileIsNotFound) {
  const std::string path = dir_ + "/no-such-file";
  absl::StatusOr<IdxArray> result = ReadIdxFile(path);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(path));
}

TEST_F(IdxReaderTest, WrongMagicIsInvalid) {
  Bytes bytes = Concat(Header({2, 2, 3}), kImageBody);
  bytes[0] = 0x42;
  ExpectInvalid(WritePlain("magic", bytes), "magic");
  ExpectInvalid(WriteGzip("magic.gz", bytes), "magic");
}

TEST_F(IdxReaderTest, UnsupportedTypeIsInvalid) {
  // 0x0D is float: valid IDX, but not something we read.
  ExpectInvalid(WritePlain("float", Concat(Header({3}, 0x0D), Bytes(12, 0))),
                "type 0x0d");
}

TEST_F(IdxReaderTest, ZeroDimensionsIsInvalid) {
  ExpectInvalid(WritePlain("scalar", {0, 0, 8, 0, 42}), "0 dimensions");
}

TEST_F(IdxReaderTest, TooManyDimensionsIsInvalid) {
  ExpectInvalid(WritePlain("deep", Header(std::vector<uint32_t>(9, 1))),
                "9 dimensions");
}

TEST_F(IdxReaderTest, AbsurdSizeIsRefusedBeforeAllocating) {
  // 2^16 * 2^16 * 2 = 2^33 bytes claimed by a 16-byte file.
  ExpectInvalid(WritePlain("huge", Header({65536, 65536, 2})), "more than");
  ExpectInvalid(WritePlain("huge2", Header({0xffffffffu, 0xffffffffu})),
                "more than");
}

TEST_F(IdxReaderTest, TruncatedHeaderIsInvalid) {
  ExpectInvalid(WritePlain("empty", {}), "truncated header");
  ExpectInvalid(WritePlain("short-magic", {0, 0, 8}), "truncated header");
  const Bytes header = Header({2, 2, 3});
  ExpectInvalid(
      WritePlain("short-dims", Bytes(header.begin(), header.begin() + 10)),
      "truncated header");
  ExpectInvalid(
      WriteGzip("short-dims.gz", Bytes(header.begin(), header.begin() + 10)),
      "truncated header");
}

TEST_F(IdxReaderTest, TruncatedBodyIsInvalid) {
  const Bytes bytes = Concat(Header({2, 2, 3}),
                             Bytes(kImageBody.begin(), kImageBody.end() - 1));
  ExpectInvalid(WritePlain("short", bytes), "truncated body: 11 of 12");
  ExpectInvalid(WriteGzip("short.gz", bytes), "truncated body: 11 of 12");
}

TEST_F(IdxReaderTest, TruncatedGzipStreamIsInvalid) {
  const Bytes file = Concat(Header({2, 2, 3}), kImageBody);
  const Bytes gz = ReadRaw(WriteGzip("full.gz", file));
  ASSERT_GT(gz.size(), 20u);
  // Cut inside the compressed data.
  ExpectInvalid(WritePlain("cut-data.gz", Bytes(gz.begin(), gz.begin() + 15)),
                "truncated");
  // Every data byte decompresses, but the CRC/length trailer is missing: the
  // file cannot be trusted.
  ExpectInvalid(WritePlain("cut-trailer.gz", Bytes(gz.begin(), gz.end() - 4)),
                "truncated gzip");
}

TEST_F(IdxReaderTest, CorruptGzipIsInvalid) {
  const Bytes file = Concat(Header({2, 2, 3}), kImageBody);
  Bytes gz = ReadRaw(WriteGzip("full.gz", file));
  gz[gz.size() - 6] ^= 0xff;  // Inside the CRC-32.
  ExpectInvalid(WritePlain("bad-crc.gz", gz), "corrupt gzip");
}

TEST_F(IdxReaderTest, TrailingBytesAreInvalid) {
  const Bytes bytes = Concat(Concat(Header({2, 2, 3}), kImageBody), {7});
  ExpectInvalid(WritePlain("long", bytes), "trailing bytes");
  ExpectInvalid(WriteGzip("long.gz", bytes), "trailing bytes");
}

}  // namespace
}  // namespace lockstep
