// Where a model runs: the CPU or CUDA devices (their memory read from the CUDA runtime LibTorch loaded),
// layers spread over several GPUs, LibTorch's intra-op threads, and glibc's allocator tuned for large maps.
#include "core/model/devices.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>

#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/model/capture_plan.h"
#include "core/model/model_impl.h"

namespace difflens {

at::Device resolve_device(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::Cpu:
      return at::Device(at::kCPU);
    case DeviceChoice::Cuda:
      if (!torch::cuda::is_available())
        throw Error("CUDA was requested but this LibTorch build has no usable CUDA device");
      return at::Device(at::kCUDA, 0);
    case DeviceChoice::Auto:
      break;
  }
  return torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

at::Device device_of(const torch::nn::Module& m) {
  for (const auto& p : m.parameters()) return p.device();
  return at::Device(at::kCPU);
}

// glibc serves every block over 32 MB with a fresh mmap and unmaps it on free, so each [H, T, T] map
// of a capture is page-faulted in anew: measured here at T=1024, 3.5-5.6 s per capture with more system
// than user time, against 0.42 s when large blocks come from the heap and stay there. A 512 MB trim
// threshold still let DIFF captures (≈0.5 GB transient) bounce between 0.41 and 1.15 s, so up to 2 GB of
// freed heap is kept for reuse. Process-wide; applied once, before the first model exists.
void tune_allocator() {
#if defined(__GLIBC__)
  static const bool done = [] {
    mallopt(M_ARENA_MAX, 1);  // other threads' arenas are 64 MB heaps: a worker thread ran 7x slower
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 2047 * 1024 * 1024);
    mallopt(M_TOP_PAD, 64 * 1024 * 1024);
    return true;
  }();
  (void)done;
#endif
}

DeviceChoice parse_device(const std::string& text) {
  if (text == "auto") return DeviceChoice::Auto;
  if (text == "cpu") return DeviceChoice::Cpu;
  if (text == "cuda") return DeviceChoice::Cuda;
  throw Error("device must be auto, cpu or cuda, got '" + text + "'");
}

bool cuda_available() {
  return torch::cuda::is_available();
}

bool cuda_memory(uint64_t& free_bytes, uint64_t& total_bytes) {
  free_bytes = total_bytes = 0;
  if (!torch::cuda::is_available()) return false;
  // cudaError_t cudaMemGetInfo(size_t*, size_t*) of the runtime LibTorch's CUDA library links (0: success).
  using MemGetInfo = int (*)(size_t*, size_t*);
  static const auto get_info = reinterpret_cast<MemGetInfo>(dlsym(RTLD_DEFAULT, "cudaMemGetInfo"));
  size_t f = 0, t = 0;
  if (!get_info || get_info(&f, &t) != 0 || t == 0) return false;
  free_bytes = f;
  total_bytes = t;
  return true;
}
int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

bool cuda_memory_on(int device, uint64_t& free_bytes, uint64_t& total_bytes) {
  free_bytes = total_bytes = 0;
  if (!torch::cuda::is_available()) return false;
  using GetDevice = int (*)(int*);
  using SetDevice = int (*)(int);
  static const auto get_device = reinterpret_cast<GetDevice>(dlsym(RTLD_DEFAULT, "cudaGetDevice"));
  static const auto set_device = reinterpret_cast<SetDevice>(dlsym(RTLD_DEFAULT, "cudaSetDevice"));
  int current = 0;
  if (!get_device || !set_device || get_device(&current) != 0 || set_device(device) != 0) return false;
  const bool ok = cuda_memory(free_bytes, total_bytes);
  set_device(current);
  return ok;
}

std::vector<std::string> cuda_devices() {
  std::vector<std::string> out;
  for (int i = 0; i < cuda_device_count(); ++i) {
    uint64_t free_bytes = 0, total = 0;
    out.push_back("cuda:" + std::to_string(i) +
                  (cuda_memory_on(i, free_bytes, total) ? " (" + human_bytes(total) + ")" : std::string()));
  }
  return out;
}

std::string libtorch_version() {
  return TORCH_VERSION;
}

void set_num_threads(int threads) {
  at::set_num_threads(std::max(1, threads));
}
int num_threads() {
  return at::get_num_threads();
}

std::string Model::device_name() const {
  const auto devices = layer_devices();
  std::string out;
  size_t first = 0;
  for (size_t i = 1; i <= devices.size(); ++i)
    if (i == devices.size() || devices[i] != devices[first]) {
      if (first == 0 && i == devices.size()) return devices[0];  // one device
      out += (out.empty() ? "" : ", ") + devices[first] + " (layers " + std::to_string(first) +
             (i - 1 > first ? "-" + std::to_string(i - 1) : "") + ")";
      first = i;
    }
  return out.empty() ? impl_->device.str() : out;
}

std::vector<std::string> Model::layer_devices() const {
  std::vector<std::string> out;
  for (const auto& layer : impl_->net->model->layer_ptrs) out.push_back(device_of(*layer).str());
  return out;
}

std::vector<int> Model::place_layers(const std::vector<std::string>& devices) {
  if (devices.empty()) throw Error("--device: no devices given");
  std::vector<at::Device> ds;
  std::vector<double> capacity;
  const uint64_t host = available_memory_bytes();
  size_t cpus = 0;
  for (const std::string& d : devices) cpus += d == "cpu";
  for (const std::string& d : devices) {
    at::Device dev(at::kCPU);
    try {
      dev = at::Device(d);
    } catch (const c10::Error&) {
      throw Error("--device: '" + d + "' is not a device (cuda:0, cuda:1, ... or cpu)");
    }
    if (dev.is_cuda()) {
      if (!torch::cuda::is_available())
        throw Error("--device " + d + ": this LibTorch build has no usable CUDA device");
      const int index = dev.has_index() ? dev.index() : 0;
      if (index >= static_cast<int>(torch::cuda::device_count()))
        throw Error("--device " + d + ": this machine has " + std::to_string(torch::cuda::device_count()) +
                    " GPU(s)");
      dev = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
      uint64_t free_bytes = 0, total = 0;
      if (!cuda_memory_on(index, free_bytes, total))
        throw Error("--device " + d + ": cannot read its free memory");
      // What this model already holds there counts as room; a tenth is kept for the activations.
      double held = 0;
      for (const auto& p : impl_->net->parameters())
        if (p.device() == dev) held += static_cast<double>(p.numel() * p.element_size());
      capacity.push_back(0.9 * static_cast<double>(free_bytes) + held);
    } else if (dev.is_cpu()) {
      capacity.push_back(host > 0 ? static_cast<double>(host) / static_cast<double>(cpus) : 1e18);
    } else {
      throw Error("--device: '" + d + "' is neither a GPU nor the CPU");
    }
    if (!ds.empty() && dev.is_cuda() != ds.front().is_cuda())
      throw Error("--device " + d + ": the layers go on GPUs or on the CPU, not both");
    ds.push_back(dev);
  }
  auto bytes_of = [](const torch::nn::Module& m) {
    double b = 0;
    for (const auto& p : m.parameters()) b += static_cast<double>(p.numel() * p.element_size());
    return b;
  };
  auto& model = *impl_->net->model;
  std::vector<double> layer_bytes;
  for (const auto& layer : model.layer_ptrs) layer_bytes.push_back(bytes_of(*layer));
  const double last = bytes_of(*model.norm) + (impl_->net->lm_head ? bytes_of(*impl_->net->lm_head) : 0.0);
  const std::vector<int> plan =
      plan_layer_split(layer_bytes, bytes_of(*model.embed_tokens), last, capacity, devices);
  at::NoGradGuard no_grad;
  model.embed_tokens->to(ds[static_cast<size_t>(plan.front())]);
  for (size_t i = 0; i < plan.size(); ++i) model.layer_ptrs[i]->to(ds[static_cast<size_t>(plan[i])]);
  model.norm->to(ds[static_cast<size_t>(plan.back())]);
  if (impl_->net->lm_head) impl_->net->lm_head->to(ds[static_cast<size_t>(plan.back())]);
  impl_->device = ds[static_cast<size_t>(plan.front())];
  return plan;
}

}  // namespace difflens
