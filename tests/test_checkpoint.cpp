// Checkpoint directories: save → load round trip gives the identical forward; every kind of broken
// checkpoint gives its own message naming the file and the tensor.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

TEST_CASE("checkpoint round trip gives an identical forward pass", "[checkpoint]") {
  const AttentionKind kind = GENERATE(AttentionKind::Diff, AttentionKind::Baseline);
  test::ScratchDir dir("roundtrip");
  const ModelConfig c = test::tiny_config(kind, 32, 2, 2, 1);
  const Model m = Model::random(c, 60);
  m.save(dir.path());
  REQUIRE(std::filesystem::exists(dir / "config.json"));
  REQUIRE(std::filesystem::exists(dir / "model.safetensors"));
  const Model back = Model::load(dir.path(), DeviceChoice::Cpu);
  CHECK(back.config().attention == kind);
  CHECK(back.parameter_count() == m.parameter_count());
  CHECK(back.path() == dir.path());
  const auto ids = test::random_ids(14, c.vocab_size, 9);
  const Trace a = m.capture(ids), b = back.capture(ids);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    CHECK(a.layers[l].a.data == b.layers[l].a.data);  // bit-identical
    CHECK(a.layers[l].a1.data == b.layers[l].a1.data);
    CHECK(a.layers[l].lambda == b.layers[l].lambda);
  }
  CHECK(a.next_token[0].id == b.next_token[0].id);
  CHECK(a.next_token[0].probability == b.next_token[0].probability);
}

TEST_CASE("a checkpoint saved in BF16 reads back as its weights rounded to nearest even, in half the bytes",
          "[checkpoint]") {
  const AttentionKind kind = GENERATE(AttentionKind::Diff, AttentionKind::DiffV2, AttentionKind::Baseline);
  test::ScratchDir dir("bf16");
  const Model m = Model::random(test::tiny_config(kind, 32, 2, 2, 1), 63);
  m.save(dir / "f32");
  m.save(dir / "bf16", DType::BF16);
  const auto f32 = std::filesystem::file_size(dir / "f32" / "model.safetensors"),
             bf16 = std::filesystem::file_size(dir / "bf16" / "model.safetensors");
  CHECK(bf16 < f32 * 0.55);
  const Model back = Model::load(dir / "bf16", DeviceChoice::Cpu);
  CHECK(back.source_dtype() == "BF16");
  const std::vector<NamedTensor> a = m.tensors(), b = back.tensors();
  REQUIRE(a.size() == b.size());
  size_t values = 0, changed = 0, wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    REQUIRE(a[i].name == b[i].name);
    REQUIRE(a[i].data.size() == b[i].data.size());
    for (size_t k = 0; k < a[i].data.size(); ++k) {
      // The top 16 bits of the float, rounded to nearest even by hand.
      uint32_t u;
      std::memcpy(&u, &a[i].data[k], 4);
      u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
      float want;
      std::memcpy(&want, &u, 4);
      wrong += b[i].data[k] != want;
      changed += b[i].data[k] != a[i].data[k];
      ++values;
    }
  }
  CHECK(wrong == 0);
  CHECK(changed > values / 2);  // random weights: most lose bits
}

TEST_CASE("checkpoint tensor names follow the Hugging Face Llama convention", "[checkpoint]") {
  test::ScratchDir dir("names");
  Model::random(test::tiny_config(AttentionKind::Diff, 32, 1, 2, 2), 61).save(dir.path());
  const SafetensorsFile f(dir / "model.safetensors");
  for (const char* name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.self_attn.lambda_q1", "model.layers.0.self_attn.lambda_k1",
        "model.layers.0.self_attn.lambda_q2", "model.layers.0.self_attn.lambda_k2",
        "model.layers.0.self_attn.subln.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"}) {
    INFO(name);
    CHECK(f.find(name) != nullptr);
  }
  CHECK(f.tensors().size() == 17);
  CHECK(f.at("model.layers.0.self_attn.q_proj.weight").shape == std::vector<int64_t>{32, 32});
  CHECK(f.at("model.layers.0.self_attn.lambda_q1").shape == std::vector<int64_t>{8});
  CHECK(f.at("model.layers.0.self_attn.subln.weight").shape == std::vector<int64_t>{16});
}

namespace {

// Saves a tiny DIFF checkpoint and returns its directory's tensors re-written through `edit`.
void rewrite_tensors(const std::filesystem::path& dir,
                     const std::function<void(std::vector<NamedTensor>&)>& edit) {
  const SafetensorsFile f(dir / "model.safetensors");
  std::vector<NamedTensor> tensors;
  for (const auto& t : f.tensors()) tensors.push_back({t.name, t.shape, f.read_f32(t)});
  edit(tensors);
  std::vector<TensorToWrite> out;
  for (const auto& t : tensors) out.push_back({t.name, t.shape, t.data.data()});
  write_safetensors(dir / "model.safetensors.new", out);
  std::filesystem::rename(dir / "model.safetensors.new", dir / "model.safetensors");
}

}  // namespace

TEST_CASE("broken checkpoints are rejected with a message naming the file and the tensor",
          "[checkpoint][errors]") {
  test::ScratchDir dir("broken");
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  Model::random(c, 62).save(dir.path());
  const std::string weights = (dir / "model.safetensors").string();
  const std::string good = test::read_all(weights);

  SECTION("missing directory") {
    CHECK_THROWS_WITH(Model::load(dir / "nope"), Catch::Contains("not a model directory"));
  }
  SECTION("missing config.json") {
    std::filesystem::remove(dir / "config.json");
    CHECK_THROWS_WITH(Model::load(dir.path()), Catch::Contains("not a model folder (no config.json)") &&
                                                   Catch::Contains("It holds: model.safetensors"));
  }
  SECTION("config.json that is not JSON") {
    test::write_all(dir / "config.json", "{ \"hidden_size\": 32,");
    CHECK_THROWS_AS(Model::load(dir.path()), ConfigError);
    CHECK_THROWS_WITH(Model::load(dir.path()), Catch::Contains("not valid JSON"));
  }
  SECTION("missing model.safetensors") {
    std::filesystem::remove(weights);
    CHECK_THROWS_WITH(Model::load(dir.path()),
                      Catch::Contains("no model.safetensors or model.safetensors.index.json"));
  }
  SECTION("a shard index far larger than any real one") {
    std::filesystem::remove(weights);
    test::write_all(dir / "model.safetensors.index.json", "{\"weight_map\": {}}");
    std::filesystem::resize_file(dir / "model.safetensors.index.json", uintmax_t{200} << 20);  // sparse
    CHECK_THROWS_WITH(Model::load(dir.path()),
                      Catch::Contains("model.safetensors.index.json: 210 MB is not a shard index"));
  }
  SECTION("truncated file") {
    test::write_all(weights, good.substr(0, good.size() - 100));
    CHECK_THROWS_AS(Model::load(dir.path()), FormatError);
    CHECK_THROWS_WITH(Model::load(dir.path()), Catch::Contains("run past the end of the data"));
  }
  SECTION("config disagrees with a tensor shape") {
    ModelConfig wider = c;
    wider.intermediate_size = 96;
    save_config(wider, dir / "config.json");
    CHECK_THROWS_WITH(
        Model::load(dir.path()),
        Catch::Contains("tensor 'model.layers.0.mlp.down_proj.weight' is [32,88], config expects [32,96]"));
  }
  SECTION("config says baseline, file has DIFF tensors") {
    ModelConfig base = c;
    base.attention = AttentionKind::Baseline;
    save_config(base, dir / "config.json");
    CHECK_THROWS_WITH(Model::load(dir.path()),
                      Catch::Contains("unexpected tensor 'model.layers.0.self_attn.lambda_"));
  }
  SECTION("a tensor is missing") {
    rewrite_tensors(dir.path(), [](std::vector<NamedTensor>& t) {
      t.erase(
          std::remove_if(t.begin(), t.end(),
                         [](const NamedTensor& x) { return x.name == "model.layers.1.self_attn.lambda_k2"; }),
          t.end());
    });
    CHECK_THROWS_WITH(Model::load(dir.path()),
                      Catch::Contains("tensor 'model.layers.1.self_attn.lambda_k2' is missing"));
  }
  SECTION("a tensor has the wrong shape") {
    rewrite_tensors(dir.path(), [](std::vector<NamedTensor>& t) {
      for (auto& x : t)
        if (x.name == "model.layers.1.self_attn.q_proj.weight") x.shape = {16, 64};
    });
    CHECK_THROWS_WITH(Model::load(dir.path()),
                      Catch::Contains("model.safetensors: tensor 'model.layers.1.self_attn.q_proj.weight' is "
                                      "[16,64], config expects [32,32]"));
  }
}

TEST_CASE("tied embeddings: no lm_head parameter, unembedding uses embed_tokens", "[checkpoint]") {
  test::ScratchDir dir("tied");
  ModelConfig c = test::tiny_config(AttentionKind::Baseline, 32, 1, 2, 2);
  c.tie_word_embeddings = true;
  const Model m = Model::random(c, 63);
  CHECK(m.parameter_count() == parameter_count(c));
  m.save(dir.path());
  const SafetensorsFile f(dir / "model.safetensors");
  CHECK(f.find("lm_head.weight") == nullptr);
  const Model back = Model::load(dir.path());
  const auto ids = test::random_ids(6, c.vocab_size, 10);
  CHECK(m.capture(ids).next_token[0].probability == back.capture(ids).next_token[0].probability);
}

TEST_CASE("from_tensors rejects unknown, missing and mis-shaped tensors", "[checkpoint][errors]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 1, 2, 2);
  std::vector<NamedTensor> t = Model::random(c, 64).tensors();
  auto extra = t;
  extra.push_back({"model.layers.5.mlp.gate_proj.weight", {1}, {0.0f}});
  CHECK_THROWS_WITH(Model::from_tensors(c, extra),
                    Catch::Contains("'model.layers.5.mlp.gate_proj.weight' is not a parameter"));
  auto fewer = t;
  fewer.pop_back();
  CHECK_THROWS_WITH(Model::from_tensors(c, fewer), Catch::Contains("is missing"));
  auto wrong = t;
  wrong[0].data.pop_back();
  CHECK_THROWS_WITH(Model::from_tensors(c, wrong), Catch::Contains("values for shape"));
}
