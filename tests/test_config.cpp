// config.json parsing, validation messages and serialisation round trip.
#include <catch2/catch.hpp>

#include "core/formats/config.h"
#include "core/formats/error.h"
#include "helpers.h"

using namespace difflens;

TEST_CASE("config round trips through JSON", "[config]") {
  ModelConfig c = test::tiny_config(AttentionKind::Diff, 64, 3, 4, 2);
  c.rope_theta = 640000.0;
  c.diff_pairing = DiffPairing::Half;
  c.rope_style = RopeStyle::Half;
  c.subln_weight = false;
  c.name = "probe";
  const ModelConfig back = config_from_json_text(config_to_json_text(c), "mem");
  CHECK(back.attention == AttentionKind::Diff);
  CHECK(back.hidden_size == 64);
  CHECK(back.num_hidden_layers == 3);
  CHECK(back.num_attention_heads == 8);
  CHECK(back.num_key_value_heads == 4);
  CHECK(back.head_dim == 8);
  CHECK(back.rope_theta == 640000.0);
  CHECK(back.diff_pairing == DiffPairing::Half);
  CHECK(back.rope_style == RopeStyle::Half);
  CHECK_FALSE(back.subln_weight);
  CHECK(back.name == "probe");
  CHECK(back.map_heads() == 4);
  CHECK(back.kv_groups() == 2);
}

TEST_CASE("a Hugging Face style config without DiffLens fields gets Llama defaults", "[config]") {
  const ModelConfig c = config_from_json_text(
      R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
          "vocab_size": 300})",
      "hf");
  CHECK(c.attention == AttentionKind::Baseline);
  CHECK(c.head_dim == 16);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.rms_norm_eps == 1e-5);
}

TEST_CASE("config errors name the file and the field", "[config][errors]") {
  const std::string base =
      R"("hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 300)";
  auto err = [](const std::string& text) {
    try {
      config_from_json_text(text, "my/config.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err("{" + base + "}") == "my/config.json: missing field 'num_attention_heads'");
  CHECK(err("{" + base + R"(, "num_attention_heads": "4"})") ==
        "my/config.json: field 'num_attention_heads' must be an integer");
  CHECK(err("{" + base + R"(, "num_attention_heads": 4, "attention": "sparse"})")
            .find("'attention' must be \"diff\", \"diff-v2\" or \"baseline\"") != std::string::npos);
  CHECK(err("{" + base + R"(, "num_attention_heads": 3, "head_dim": 16, "num_key_value_heads": 2})")
            .find("multiple of 'num_key_value_heads'") != std::string::npos);
  CHECK(err("{" + base + R"(, "num_attention_heads": 4, "head_dim": 15})").find("'head_dim' must be even") !=
        std::string::npos);
  CHECK(err("{" + base +
            R"(, "num_attention_heads": 6, "num_key_value_heads": 6, "head_dim": 8, "attention": "diff"})") ==
        "(no error)");
  CHECK(err("{" + base +
            R"(, "num_attention_heads": 6, "num_key_value_heads": 4, "head_dim": 8, "attention": "diff"})")
            .find("multiple of") != std::string::npos);
  CHECK(
      err(R"({"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, "num_attention_heads": 4})")
          .find("vocab_size >= 259") != std::string::npos);
  CHECK(err("not json").find("not valid JSON") != std::string::npos);
  CHECK(err("[]") == "my/config.json: top level must be a JSON object");
  // Sizes beyond any model, and numbers JSON cannot hold, are refused with the number.
  CHECK(
      err(R"({"hidden_size": 2097152, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 300, "num_attention_heads": 4})") ==
      "my/config.json: 'hidden_size' is 2097152; DiffLens reads models with at most 1048576");
  CHECK(
      err("{" + base + R"(, "num_attention_heads": 4, "max_position_embeddings": 1000000000})") ==
      "my/config.json: 'max_position_embeddings' is 1000000000; DiffLens reads models with at most 134217728");
  CHECK(err("{" + base + R"(, "num_attention_heads": 4, "rope_theta": 1e99999})").find("number overflow") !=
        std::string::npos);
}

TEST_CASE("matched pair factory rejects widths that do not split into heads", "[config][errors]") {
  PairSpec s;
  s.hidden_size = 100;
  s.diff_heads = 3;
  CHECK_THROWS_WITH(make_matched_pair(s), Catch::Contains("not divisible"));
}

TEST_CASE("messages shown to users drop LibTorch's C++ backtrace", "[errors]") {
  // The layout of a c10::Error's what(): the message, then where it was raised and the frames.
  const std::runtime_error oom(
      "CUDA out of memory. Tried to allocate 32.00 GiB (GPU 0; 79.10 GiB total capacity; 60.02 GiB already "
      "allocated)\nException raised from malloc at ../c10/cuda/CUDACachingAllocator.cpp:913 (most recent call "
      "first):\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x3e (0x7f1c in libc10.so)\n"
      "frame #1: <unknown function> + 0x2a3f (0x7f1d in libc10_cuda.so)\n");
  CHECK(user_message(oom) ==
        "CUDA out of memory. Tried to allocate 32.00 GiB (GPU 0; 79.10 GiB total capacity; 60.02 GiB already "
        "allocated)");
  CHECK(user_message(ConfigError("config.json: missing field 'hidden_size'")) ==
        "config.json: missing field 'hidden_size'");
  CHECK(user_message(std::runtime_error("Exception raised from nowhere")) ==
        "LibTorch error without a message");
}
