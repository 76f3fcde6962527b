// DIFF and baseline decoder models behind a LibTorch-free interface (pimpl): load/save checkpoints,
// run a forward pass and capture a Trace. Only core's model files (model.cpp and its parts) see LibTorch.
// Thread-safety: one Model must be used by one thread at a time (the app's worker thread owns it).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/intervention.h"
#include "core/formats/patch_site.h"
#include "core/formats/safetensors.h"
#include "core/formats/tokenizer.h"
#include "core/formats/trace.h"
#include "core/model/lens.h"

namespace difflens {

enum class DeviceChoice { Auto, Cpu, Cuda };
DeviceChoice parse_device(const std::string& text);  // "auto" | "cpu" | "cuda"; throws Error
bool cuda_available();
// Why a GPU model of this shape would not pool long prompts by core/cuda's kernels ("" when it would): a
// build without them, or components wider than they take (PoolingPath::Kernel).
std::string kernel_pooling_unsupported(const ModelConfig& c);
int cuda_device_count();  // GPUs LibTorch can use (0 without CUDA)
// Each GPU LibTorch can use with its memory, "cuda:0 (140.4 GB)"; empty without CUDA.
std::vector<std::string> cuda_devices();
// The LibTorch this binary was compiled against ("1.13.0", "2.11.0").
std::string libtorch_version();
// Free and total bytes of the CUDA device LibTorch uses, read from the CUDA runtime it has loaded (the CPU
// build links nothing of CUDA). False when there is none. Memory LibTorch holds in its cache for reuse
// counts as used here.
bool cuda_memory(uint64_t& free_bytes, uint64_t& total_bytes);
bool cuda_memory_on(int device, uint64_t& free_bytes, uint64_t& total_bytes);  // GPU `device` (0, 1, ...)
// Intra-op threads for LibTorch work started FROM THE CALLING THREAD (OpenMP settings are per thread):
// a worker thread must call it itself.
void set_num_threads(int threads);
// Tunes glibc malloc for large tensors (see devices.cpp): every thread allocates from the main heap, and
// blocks over 32 MB come from the heap instead of fresh mmaps. Call at the start of main(), before any
// thread exists; Model construction calls it too, but threads that allocated earlier keep their arenas.
void tune_allocator();
int num_threads();

// What a capture keeps. Statistics are always computed; maps/logits/hidden are kept on request.
enum class PoolingPath { Auto, Host, Kernel, Products };

struct CaptureOptions {
  bool keep_maps = true;
  std::vector<int> layers;  // layers whose maps are kept; empty = all
  std::vector<int> heads;   // heads whose maps are kept; empty = all
  // Logits, hidden states and q/k/v follow `layers` (every layer when it is empty) but not `heads`: a kept
  // layer keeps them for all of its heads.
  bool keep_logits = false;  // full pre-softmax logits [heads, T, T] per selected layer
  bool keep_hidden = false;  // full hidden state [T, E] per selected layer
  // Rotated queries and keys, values and the DIFF output norm's weight of each selected layer (LayerTrace
  // q1..v, subln_weight): what the Explain view recomputes a head's computation from. Small beside the maps.
  bool keep_qkv = false;
  bool logit_stats = true;  // top-k / median / histogram of |logits| (O(T²) extra work)
  int next_token_top_k = 10;
  // Every position's prediction (Trace::predictions): the k likeliest next tokens after each position and
  // the probability and rank of the token that follows (0: none). A position costs hidden × vocabulary
  // multiply-adds (the output projection), so only the last prediction_budget / (hidden × vocab) positions
  // are kept (every position for the bundled pair: 38K rows; the last 76 of a Llama-3 1B model).
  int position_top_k = 0;
  double prediction_budget = 2e10;
  int logit_bits = -1;  // quantize attention logits for this capture (0: exact; -1: the model's setting)
  // Statistics (logit_stats, hidden_stats) leave out query positions before this one: a text read in
  // windows that each start with BOS counts BOS's identical state once, not once per window.
  int64_t stats_from = 0;
  // > 0: long-prompt mode. When the full maps would take more than this many bytes, attention is computed
  // in blocks of query rows (memory O(T · block)) and each kept head keeps pooled maps (mean and max) sized
  // so that all of them fit this budget, plus the queries, keys and row log-sum-exps that recompute any
  // tile exactly. Statistics and next-token stay exact (pooled medians are histogram estimates).
  size_t pooled_budget_bytes = 0;
  // Long-prompt mode only: who pools the maps. Auto: a GPU model by core/cuda's kernels (Kernel: straight
  // from the queries and keys, no map is made, nothing leaves the GPU until the layer is done) when this
  // build has them and they take the model's component width, else the host (Host: a CPU model by the fused
  // attention pass as rows are made; a GPU model's blocks of maps copied to the host's loops). Products: the
  // kernels read the logits that cuBLAS matrix products write, a chunk of rows at a time (on the GPU, any
  // component width). All give the same cells.
  PoolingPath pooling = PoolingPath::Auto;
  int64_t block_rows = 0;  // query rows per block (0: chosen from the memory a block takes)
  // Called on the capturing thread as each layer starts (layer, layers): progress for a server's client.
  std::function<void(int64_t, int64_t)> on_layer;
  // What the run changes inside the model (core/formats/intervention.h, resolved for this prompt; empty:
  // nothing). The trace records them (Trace::interventions).
  Interventions interventions;
};

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// How Model::generate continues a prompt.
struct GenerateOptions {
  int max_new = 32;          // tokens at most (fewer after EOS or at the model's context length)
  double temperature = 0.0;  // <= 0: greedy (the most likely token); else sampled from the top_k
  int top_k = 40;
  uint64_t seed = 1;  // the sampler's
  // Keep each layer's keys and values, so that a new token costs its own row of every layer instead of the
  // whole sequence again. Off, or with quantized attention logits (their step spans the whole map, so every
  // new token changes the earlier rows too), every token runs the whole sequence (Generation::cached false);
  // so does every generation while the environment has DIFFLENS_KV_CACHE=0 (for timing).
  bool cache = true;
  // Each written token's own row of every layer's maps (Generation::rows): the last token written is read
  // once more for its row. Without the cache, they come from one capture of the whole text at the end.
  bool keep_rows = false;
  // The attention as the tensor operations a GPU runs (nn::attend_rows), on any device; else the CPU runs
  // its fused pass. For tests.
  bool tensor_ops = false;
  std::function<void(int64_t id)> on_token;  // called with each token as it is chosen
  // Interventions for every token written (resolved for the prompt; mean ablations average the prompt's
  // positions whatever mean_positions says).
  Interventions interventions;
};

// One written token's row of every layer's maps: per layer, [map_heads, position + 1] (the keys it saw);
// a1, a2 empty for a baseline.
struct GeneratedRows {
  std::vector<FloatArray> a1, a2, a;
};

struct Generation {
  std::vector<int64_t> ids;         // the written tokens
  std::vector<GeneratedRows> rows;  // keep_rows: one per written token
  bool cached = false;              // whether the key/value cache ran
};

class Model {
 public:
  // Loads a checkpoint directory: DiffLens's own (config.json + model.safetensors) or a Hugging Face one
  // (LlamaForCausalLM, MistralForCausalLM, DiffLlamaForCausalLM; one file or shards with
  // model.safetensors.index.json; F32/F16/BF16: half-precision weights stay half in memory and are
  // converted to F32 one matrix at a time as the forward pass uses them). Throws ConfigError / FormatError
  // naming the file, the tensor and the expected shape; Error when the weights would not fit in the memory
  // available. `progress(done, total)` is called per tensor; `cancel` is polled between tensors (Cancelled).
  static Model load(const std::filesystem::path& dir, DeviceChoice device = DeviceChoice::Auto,
                    const std::function<void(int64_t, int64_t)>& progress = {},
                    const std::atomic<bool>* cancel = nullptr);
  // The tokenizer a checkpoint directory would get from load(), without reading its weights. `note` says
  // why text cannot be encoded when the directory's tokenizer is missing or unusable (ids-only tokenizer).
  static Tokenizer load_tokenizer(const std::filesystem::path& dir, std::string& note);
  // Bytes of memory a model with this config needs for its weights: F32, or (half_storage) F16/BF16
  // projections and embeddings with F32 norms and λ.
  static uint64_t weight_memory_bytes(const ModelConfig& config, bool half_storage = false);
  // Seeded random initialisation (the same seed gives the same weights on every machine).
  static Model random(const ModelConfig& config, uint64_t seed, DeviceChoice device = DeviceChoice::Cpu);
  // Builds a model from named F32 tensors (Hugging Face Llama names); every parameter must be given.
  static Model from_tensors(const ModelConfig& config, const std::vector<NamedTensor>& tensors,
                            DeviceChoice device = DeviceChoice::Cpu);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // Writes config.json and model.safetensors into `dir` (created if needed), the weights stored as `dtype`
  // (F16 / BF16 rounded to nearest even: what a GPU run brings back in half the bytes; read back as any).
  void save(const std::filesystem::path& dir, DType dtype = DType::F32) const;
  std::vector<NamedTensor> tensors() const;
  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  const std::filesystem::path& path() const;  // empty for models not loaded from disk
  int64_t parameter_count() const;            // counted from the live parameters
  // "cpu", "cuda:0", or for a model spread over GPUs "cuda:0 (layers 0-39), cuda:1 (layers 40-79)".
  std::string device_name() const;
  std::vector<std::string> layer_devices() const;  // each layer's device ("cuda:1")
  // Spreads consecutive layers over `devices` ("cuda:0", "cuda:1", ...; "cpu" entries keep them on the CPU,
  // the same path where no GPU is), planned from each device's free memory by plan_layer_split
  // (core/model/capture_plan.h): the embedding goes with the first layer, the final norm and output with the
  // last; captures move the hidden state from device to device and pool each layer's maps on its own. Throws
  // Error with the numbers when the weights do not fit, before anything moves. Returns each layer's device
  // index.
  std::vector<int> place_layers(const std::vector<std::string>& devices);
  // The checkpoint's weight dtype(s) on disk ("BF16", "F32"); "F32" for models built in memory.
  const std::string& source_dtype() const;
  // How projection and embedding weights are held in memory: "F32", "BF16" or "F16".
  std::string weight_storage() const;
  // Why the model cannot encode text, when it cannot (e.g. a tokenizer kind not available); else "".
  const std::string& tokenizer_note() const;

  // One forward pass over `ids` (1 ≤ T ≤ max_position_embeddings). `cancel` is polled between layers;
  // when it turns true the capture throws Cancelled.
  Trace capture(const std::vector<int64_t>& ids, const CaptureOptions& options = {},
                const std::atomic<bool>* cancel = nullptr) const;

  // The logit lens at every position and the direct attribution of the target's logit at the query
  // (core/model/lens.h), under options.interventions; the tensor operations on the model's device. Throws
  // Error for an empty prompt, a query or target out of range; Cancelled when `cancel` is set.
  AnswerExplanation explain_answer(const std::vector<int64_t>& ids, const LensOptions& options = {},
                                   const std::atomic<bool>* cancel = nullptr) const;

  // Activation patching (core/formats/patch_site.h): the clean and corrupt prompts (as many tokens)
  // unpatched, then one run per entry of `runs`, its sites patched together: denoising copies from the clean
  // run into the corrupt one, noising the other way. The run copied from is `source`'s when given (a model of
  // this one's shape: another checkpoint of it), else this model's. Throws Error for prompts of different
  // lengths, a site the model does not have, a target or alternative out of range or equal; Cancelled when
  // `cancel` is set.
  PatchReport patch(const std::vector<int64_t>& clean, const std::vector<int64_t>& corrupt,
                    const std::vector<std::vector<PatchSite>>& runs, const PatchOptions& options = {},
                    const std::atomic<bool>* cancel = nullptr, const Model* source = nullptr) const;

  // Continues `ids` by up to `max_new` tokens: greedy when temperature <= 0, otherwise sampling from
  // the top_k most likely tokens at that temperature, seeded. Stops after EOS. Returns the new ids.
  std::vector<int64_t> generate(const std::vector<int64_t>& ids, int max_new, double temperature = 0.0,
                                int top_k = 40, uint64_t seed = 1) const;
  // The same with every option (GenerateOptions): the key/value cache, each written token's attention rows,
  // a callback per token, and `cancel` polled before each token and between layers (Cancelled).
  Generation generate(const std::vector<int64_t>& ids, const GenerateOptions& options,
                      const std::atomic<bool>* cancel = nullptr) const;

  // Absmax-quantizes every attention logit to `bits` (per head, dynamic) before the softmax in every
  // later forward (capture, generate, probes), as the paper's quantization study does; 0 turns it off.
  // Throws Error for 1 or more than 32 bits.
  void set_logit_bits(int bits);
  int logit_bits() const;

  // Runs only layer `layer`'s attention on a given input x ([T, E] row-major, i.e. what the attention
  // sees after input_layernorm) at positions 0..T-1. Returns all maps, logits and λ in a LayerTrace and
  // the attention block's output (before the residual add) in `output` ([T, E]). For tests and probes.
  // It computes as a capture does on this device (on the CPU the fused pass, core/cpu/attention_cpu.h);
  // `tensor_ops` runs the tensor operations training and the GPU use instead (tests compare the two).
  LayerTrace attention_probe(int layer, const std::vector<float>& x, int64_t T, std::vector<float>* output,
                             bool tensor_ops = false) const;

 private:
  struct Impl;
  friend struct ModelAccess;  // core-internal access to the modules (train*.cpp)
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// encode_prompt (core/formats/tokenizer.h) with the model's tokenizer, vocabulary and tokenizer note: the
// prompt → token ids rule of every surface. `ids_hint`: how that surface takes token ids; `subject`: how its
// refusal names the model.
Encoding encode_prompt(const Model& model, const PromptInput& in, const std::string& ids_hint,
                       const std::string& subject = "this model");

}  // namespace difflens
