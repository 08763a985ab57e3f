// The safetensors reader and writer against hand-built files and every malformed-file case.
#include "ctitan/checkpoint/hf/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ctitan/common/error.h"
#include "support/test_support.h"

namespace ctitan::checkpoint::hf {
namespace {

using testing::TempDir;

// A file laid out by hand from the format description, independent of save_safetensors.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string float_bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// The error message of load_safetensors on `bytes`, or "" if it loaded.
std::string load_error(const TempDir& dir, const std::string& bytes) {
  auto path = dir.file("bad.safetensors");
  testing::write_file(path, bytes);
  try {
    load_safetensors(path);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsAHandBuiltFile) {
  TempDir dir;
  auto path = dir.file("a.safetensors");
  testing::write_file(path, raw_file(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", float_bytes({1.5f, -2.f, 7.f})));
  auto file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(file.tensors.at("a"), torch::tensor({1.5f, -2.f})));
  EXPECT_TRUE(torch::equal(file.tensors.at("b"), torch::tensor({7.f})));
  EXPECT_EQ(file.metadata.at("format"), "pt");
}

TEST(Safetensors, WritesTheDocumentedLayout) {
  TempDir dir;
  auto path = dir.file("w.safetensors");
  save_safetensors(path, {{"x", torch::tensor({3.f, 4.f})}}, {{"format", "pt"}});
  auto bytes = testing::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u) << "data section must start 8-byte aligned";
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["x"]["dtype"], "F32");
  EXPECT_EQ(header["x"]["shape"], nlohmann::json({2}));
  EXPECT_EQ(header["x"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(bytes.substr(8 + n), float_bytes({3.f, 4.f}));
}

TEST(Safetensors, RoundTripsEveryDtypeBitwise) {
  TempDir dir;
  torch::manual_seed(0);
  NamedTensors tensors{
      {"f32", torch::randn({3, 5})},
      {"bf16", torch::randn({4, 2}).to(torch::kBFloat16)},
      {"f16", torch::randn({7}).to(torch::kHalf)},
      {"i64", torch::arange(6, torch::kLong).view({2, 3})},
      {"u8", torch::randint(0, 255, {9}, torch::kByte)},
      {"scalar", torch::tensor(2.5, torch::kDouble)},
      {"empty", torch::zeros({0, 4})},
  };
  save_safetensors(dir.file("t.safetensors"), tensors);
  auto loaded = load_safetensors(dir.file("t.safetensors")).tensors;
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(loaded.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(loaded.at(name).sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(loaded.at(name), t)) << name;
  }
}

TEST(Safetensors, RejectsMalformedFilesWithOneLineNamingTheFile) {
  TempDir dir;
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  auto data = float_bytes({1.f, 2.f});
  EXPECT_NE(load_error(dir, "abc").find("truncated file"), std::string::npos);
  EXPECT_NE(load_error(dir, raw_file("{" + ok_entry + "}", data).substr(0, 20)).find("header length"), std::string::npos);
  EXPECT_NE(load_error(dir, raw_file("{not json", data)).find("bad header"), std::string::npos);
  EXPECT_NE(load_error(dir, raw_file("[1,2]", data)).find("bad header"), std::string::npos);
  EXPECT_NE(load_error(dir, raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", data))
                .find("unknown dtype 'F8_E4M3'"), std::string::npos);
  EXPECT_NE(load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", data)).find("bad header"),
            std::string::npos);
  // Data cut short: the offsets now point past the end of the file.
  EXPECT_NE(load_error(dir, raw_file("{" + ok_entry + "}", data.substr(0, 6))).find("out of range"), std::string::npos);
  EXPECT_NE(load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data))
                .find("need 12"), std::string::npos);
  EXPECT_EQ(load_error(dir, raw_file("{" + ok_entry + "}", data)), "");
  // Found by fuzz/safetensors_fuzzer (corpus regress_*): names quoted raw broke the one line.
  EXPECT_NE(load_error(dir, raw_file(R"({"a\nb":{"dtype":"F32","shape":[2]}})", data)).find("tensor 'a\\nb'"),
            std::string::npos);
  EXPECT_NE(load_error(dir, raw_file(R"({"__metadata__":{"k\nx":1},)" + ok_entry + "}", data))
                .find("__metadata__ 'k\\nx' is not a string"), std::string::npos);
}

// The format's data section is tiled exactly by the tensors (safetensors' README: "the byte buffer
// needs to be entirely indexed, and cannot contain holes"; the reference reader, safetensors 0.8,
// refuses each case below with "invalid offset" or "file not fully covered"). Issue #17: a file
// whose tensors overlapped loaded one layer's bytes into another's tensor without complaint.
TEST(Safetensors, RefusesOverlapsGapsAndTrailingBytes) {
  TempDir dir;
  auto data = float_bytes({1.f, 2.f, 3.f, 4.f});
  auto overlap = load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                                          R"("c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", data));
  EXPECT_NE(overlap.find("tensors 'a' [0, 8) and 'b' [4, 12) overlap"), std::string::npos) << overlap;
  // Two names for the same bytes are an overlap too.
  auto alias = load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data.substr(0, 8)));
  EXPECT_NE(alias.find("overlap"), std::string::npos) << alias;
  auto gap = load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data));
  EXPECT_NE(gap.find("bytes [4, 8) before tensor 'b' belong to no tensor"), std::string::npos) << gap;
  auto leading = load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[4,16]}})", data));
  EXPECT_NE(leading.find("bytes [0, 4) before tensor 'a'"), std::string::npos) << leading;
  auto trailing = load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data));
  EXPECT_NE(trailing.find("bytes [12, 16) after the last tensor"), std::string::npos) << trailing;
  // An empty tensor inside another's bytes is an overlap as well.
  auto inside = load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", data));
  EXPECT_NE(inside.find("overlap"), std::string::npos) << inside;
}

// What the format allows: offsets in any order relative to the names, and empty tensors (no
// bytes) at a boundary, as the reference reader accepts them.
TEST(Safetensors, AcceptsAnyTensorOrderAndEmptyTensorsAtBoundaries) {
  TempDir dir;
  auto path = dir.file("ok.safetensors");
  testing::write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},)"
                                     R"("z":{"dtype":"F32","shape":[0],"data_offsets":[16,16]}})",
                                     float_bytes({1.f, 2.f, 3.f, 4.f})));
  auto file = load_safetensors(path);
  EXPECT_TRUE(torch::equal(file.tensors.at("a"), torch::tensor({3.f, 4.f})));
  EXPECT_TRUE(torch::equal(file.tensors.at("b"), torch::tensor({1.f, 2.f})));
  EXPECT_EQ(file.tensors.at("e").sizes(), torch::IntArrayRef({0, 3}));
  EXPECT_EQ(file.tensors.at("z").numel(), 0);
}

// Issue #17: shape [2^62, 2^62] wrapped to 0 bytes, passed the size check and ended in
// "internal error: Storage size calculation overflowed" naming no file. The element count and
// byte size are now checked products; the error names the file (load_error) and the tensor.
TEST(Safetensors, RefusesShapesWhoseSizeOverflows) {
  TempDir dir;
  const std::string big = std::to_string(uint64_t(1) << 62);
  for (const std::string& shape : {"[" + big + "," + big + "]", "[" + big + ",4]",  // 2^64 bytes of F32
                                   std::string("[18446744073709551615]"), std::string("[9223372036854775808]")}) {
    auto error = load_error(dir, raw_file(R"({"huge":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,0]}})", ""));
    EXPECT_NE(error.find("tensor 'huge' has shape"), std::string::npos) << shape << ": " << error;
    EXPECT_NE(error.find("overflows"), std::string::npos) << shape << ": " << error;
  }
}

}  // namespace
}  // namespace ctitan::checkpoint::hf
