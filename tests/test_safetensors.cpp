// safetensors reader/writer: round trip, F16/BF16 decoding, and every header validation.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "helpers.h"

using namespace difflens;

namespace {

// A raw file: 8-byte little-endian length, the header text, then `data`.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

std::string error_of(const std::filesystem::path& p) {
  try {
    SafetensorsFile f(p);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("safetensors round trip of F32 tensors with metadata", "[safetensors]") {
  test::ScratchDir dir("st");
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7e20f};
  const std::vector<float> b = {42.0f};
  write_safetensors(dir / "x.safetensors",
                    {{"a", {2, 3}, a.data()}, {"b.c", {1}, b.data()}, {"empty", {0, 4}, nullptr}},
                    {{"producer", "test"}});
  const SafetensorsFile f(dir / "x.safetensors");
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.at("a").shape == std::vector<int64_t>{2, 3});
  CHECK(f.read_f32("a") == a);
  CHECK(f.read_f32("b.c") == b);
  CHECK(f.read_f32("empty").empty());
  CHECK(f.metadata().at("producer") == "test");
  CHECK(f.find("zzz") == nullptr);
  CHECK_THROWS_WITH(f.at("zzz"), Catch::Contains("tensor 'zzz' is missing"));
  // The data buffer starts 8-byte aligned.
  const std::string bytes = test::read_all(dir / "x.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
}

TEST_CASE("F16 and BF16 tensors are decoded to F32", "[safetensors]") {
  test::ScratchDir dir("half");
  // F16: 1.0 = 0x3C00, -2.5 = 0xC100, 65504 = 0x7BFF, smallest subnormal 2^-24 = 0x0001, +inf = 0x7C00.
  // BF16: 1.0 = 0x3F80, -3.0 = 0xC040, 0.15625 = 0x3E20.
  const uint16_t f16[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x7C00};
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x3E20};
  std::string data(reinterpret_cast<const char*>(f16), sizeof f16);
  data.append(reinterpret_cast<const char*>(bf16), sizeof bf16);
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[10,16]}})";
  test::write_all(dir / "h.safetensors", raw_file(header, data));
  const SafetensorsFile f(dir / "h.safetensors");
  const auto h = f.read_f32("h");
  CHECK(h[0] == 1.0f);
  CHECK(h[1] == -2.5f);
  CHECK(h[2] == 65504.0f);
  CHECK(h[3] == std::ldexp(1.0f, -24));
  CHECK(std::isinf(h[4]));
  CHECK(f.read_f32("b") == std::vector<float>{1.0f, -3.0f, 0.15625f});
  CHECK(f.at("b").dtype == DType::BF16);
  // float_to_half inverts half_to_float on representable values and rounds to nearest even.
  for (uint16_t x : {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x8000})
    CHECK(float_to_half(half_to_float(x)) == x);
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // halfway: ties to even
  CHECK(float_to_half(1e6f) == 0x7C00);                          // overflow to +inf
}

TEST_CASE("invalid safetensors headers each produce their own message", "[safetensors][errors]") {
  test::ScratchDir dir("bad");
  const auto p = dir / "bad.safetensors";
  const std::string four = f32_bytes({1, 2, 3, 4});
  auto check = [&](const std::string& bytes, const std::string& expected) {
    test::write_all(p, bytes);
    const std::string msg = error_of(p);
    INFO(msg);
    CHECK(msg.find(p.string()) != std::string::npos);
    CHECK(msg.find(expected) != std::string::npos);
  };
  check("abc", "too short");
  check(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "header length");
  check(raw_file("{\"a\":", ""), "not valid JSON");
  check(raw_file("[1,2]", ""), "must be a JSON object");
  check(raw_file(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,16]}})", four + four),
        "dtype Q4 is not a safetensors dtype");
  // Other safetensors dtypes are checked like the rest (their sizes), and never read as numbers.
  check(raw_file(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", four),
        "holds 8 bytes but I64 [2] needs 16");
  {
    test::write_all(p, raw_file(R"({"a":{"dtype":"U64","shape":[2],"data_offsets":[0,16]}})", four + four));
    const SafetensorsFile f(p);
    CHECK(f.at("a").other_dtype == "U64");
    CHECK_THROWS_WITH(f.read_f32(f.at("a")), Catch::Contains("tensor 'a': dtype U64 is not supported"));
  }
  check(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", four), "run past the end");
  check(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four), "needs 12");
  check(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", four), "reversed");
  check(raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", four), "negative");
  check(
      raw_file(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          four),
      "overlap");
  check(
      raw_file(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          four),
      "tensor 'a' appears twice");
  check(raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", four), "tensor 'a': missing shape");
  check(raw_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", four), "tensor 'a': missing dtype");
  check(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", four),
        "data_offsets must be two");
  check(raw_file(R"({"__metadata__":{"k":1}})", ""), "__metadata__ value 'k'");
  CHECK(error_of(dir / "missing.safetensors").find("cannot open") != std::string::npos);
  CHECK(error_of(dir.path()).find("not a regular file") != std::string::npos);
}

TEST_CASE("writer rejects duplicate names and missing data", "[safetensors][errors]") {
  test::ScratchDir dir("w");
  const float v[2] = {1, 2};
  CHECK_THROWS_WITH(write_safetensors(dir / "a.safetensors", {{"x", {2}, v}, {"x", {2}, v}}),
                    Catch::Contains("written twice"));
  CHECK_THROWS_WITH(write_safetensors(dir / "a.safetensors", {{"x", {2}, nullptr}}),
                    Catch::Contains("has no data"));
  CHECK_THROWS_AS(write_safetensors(dir / "no/such/dir/a.safetensors", {{"x", {2}, v}}), Error);
}

TEST_CASE("declared sizes are checked before anything is allocated, with the numbers",
          "[safetensors][errors][limits]") {
  test::ScratchDir dir("limits");
  const auto p = dir / "big.safetensors";
  auto message = [&](const std::string& bytes) {
    test::write_all(p, bytes);
    return error_of(p);
  };
  // A header that claims a terabyte.
  std::string tera(8, '\0');
  tera[5] = 1;  // 2^40
  CHECK_THAT(message(tera + "{}"),
             Catch::Contains("header length 1099511627776 is invalid for a file of 10 bytes"));
  // A shape whose element count overflows (2^40 x 2^40).
  CHECK_THAT(
      message(raw_file(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})",
                       f32_bytes({1, 2}))),
      Catch::Contains("shape [1099511627776,1099511627776] has more than 2^60 elements"));
  // More tensors than any checkpoint: the reader stops at the first one past 1,000,000 (12 MB of header).
  std::string header = "{";
  for (int i = 0; i <= 1000000; ++i) header += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  header += "}";
  CHECK_THAT(message(raw_file(header, "")), Catch::Contains("lists more than 1000000 tensors"));
}
