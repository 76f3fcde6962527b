// A decoder layer around its attention on the CPU (see layer_cpu.h).
//
// Each pass hands blocks of rows to the workers; a worker runs its block through every step of the pass
// with the intermediates in its own scratch, so the layer's weights (a few hundred KB for the bundled
// models) stay in its cache from block to block. The matrix kernel keeps a tile of MR rows × (NV vectors)
// of y in registers over all of K: per k, NV loads of the packed weights and MR broadcasts of x feed MR ×
// NV fused multiply-adds.
#include "core/cpu/layer_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/cpu/cpu_simd.h"

#ifdef DIFFLENS_CBLAS
#include <cblas.h>  // OpenBLAS's (libopenblas-openmp-dev): cblas_sgemm, openblas_get_corename
#endif

namespace difflens {
namespace {
using namespace simd;  // NOLINT: the vector helpers of core/cpu/cpu_simd.h

constexpr int64_t kPanel = PackedMatrix::kPanel;

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(man & 0x400u)) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float weight_at(const MatrixPart& p, int64_t i) {
  switch (p.dtype) {
    case WeightDtype::F32:
      return static_cast<const float*>(p.data)[i];
    case WeightDtype::F16:
      return half_to_float(static_cast<const uint16_t*>(p.data)[i]);
    case WeightDtype::BF16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p.data)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
  }
  return 0;
}

// A tile of y: rows [0, MR) × columns [0, cols) (cols <= NV lanes) of x · Wᵀ over all of K, from the panel
// columns at p (row stride kPanel).
template <typename V, int MR, int NV>
__attribute__((always_inline)) inline void tile(const float* x, int64_t ldx, const float* p, int64_t K,
                                                float* y, int64_t ldy, int64_t cols, bool accumulate) {
  constexpr int64_t L = lanes<V>();
  V c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = V{};
  for (int64_t k = 0; k < K; ++k) {
    V b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load<V>(p + k * kPanel + v * L);
    for (int r = 0; r < MR; ++r) {
      const V a = splat<V>(x[r * ldx + k]);
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  if (cols == NV * L) {
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        float* q = y + r * ldy + v * L;
        store(q, accumulate ? load<V>(q) + c[r][v] : c[r][v]);
      }
    return;
  }
  float t[NV * L];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) store(t + v * L, c[r][v]);
    float* q = y + r * ldy;
    for (int64_t j = 0; j < cols; ++j) q[j] = accumulate ? q[j] + t[j] : t[j];
  }
}

template <typename V, int MR, int NV>
__attribute__((always_inline)) inline void matmul(const float* x, int64_t M, int64_t ldx,
                                                  const PackedMatrix& w, float* y, int64_t ldy,
                                                  bool accumulate) {
  constexpr int64_t width = NV * lanes<V>();
  static_assert(kPanel % width == 0, "a panel holds whole tiles");
  const int64_t K = w.K;
  for (int64_t n0 = 0; n0 < w.N; n0 += kPanel) {
    const float* panel = w.panels.data() + n0 * K;
    for (int64_t s = 0; s < kPanel && n0 + s < w.N; s += width) {
      const int64_t cols = std::min(width, w.N - n0 - s);
      int64_t m = 0;
      for (; m + MR <= M; m += MR)
        tile<V, MR, NV>(x + m * ldx, ldx, panel + s, K, y + m * ldy + n0 + s, ldy, cols, accumulate);
      for (; m < M; ++m)
        tile<V, 1, NV>(x + m * ldx, ldx, panel + s, K, y + m * ldy + n0 + s, ldy, cols, accumulate);
    }
  }
}

// act[t, f] = silu(gu[t, f]) · gu[t, F + f] for rows [0, n): silu(g) = g σ(g), σ from e^−|g| (never
// overflows).
template <typename V>
__attribute__((always_inline)) inline void swiglu(const float* gu, int64_t n, int64_t F, float* act) {
  constexpr int64_t L = lanes<V>();
  for (int64_t t = 0; t < n; ++t) {
    const float* g = gu + t * 2 * F;
    const float* u = g + F;
    float* a = act + t * F;
    int64_t f = 0;
    for (; f + L <= F; f += L) {
      const V x = load<V>(g + f);
      const V e = exp_nonpositive(x < 0 ? x : -x);
      const V one = splat<V>(1.0f);
      const V sigma = x >= 0 ? one / (one + e) : e / (one + e);
      store(a + f, x * sigma * load<V>(u + f));
    }
    for (; f < F; ++f) {
      const float x = g[f];
      a[f] = x / (1.0f + std::exp(-x)) * u[f];
    }
  }
}

__attribute__((target("avx512f"))) void matmul_avx512(const float* x, int64_t M, int64_t ldx,
                                                      const PackedMatrix& w, float* y, int64_t ldy,
                                                      bool acc) {
  matmul<v16, 4, 4>(x, M, ldx, w, y, ldy, acc);
}
__attribute__((target("avx2,fma"))) void matmul_avx2(const float* x, int64_t M, int64_t ldx,
                                                     const PackedMatrix& w, float* y, int64_t ldy, bool acc) {
  matmul<v8, 4, 2>(x, M, ldx, w, y, ldy, acc);
}
void matmul_plain(const float* x, int64_t M, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
                  bool acc) {
  matmul<v4, 4, 2>(x, M, ldx, w, y, ldy, acc);
}

__attribute__((target("avx512f"))) void swiglu_avx512(const float* gu, int64_t n, int64_t F, float* act) {
  swiglu<v16>(gu, n, F, act);
}
__attribute__((target("avx2,fma"))) void swiglu_avx2(const float* gu, int64_t n, int64_t F, float* act) {
  swiglu<v8>(gu, n, F, act);
}
void swiglu_plain(const float* gu, int64_t n, int64_t F, float* act) {
  swiglu<v4>(gu, n, F, act);
}
void swiglu_rows(const float* gu, int64_t n, int64_t F, float* act) {
  const CpuIsa isa = cpu_isa();
  (isa == CpuIsa::Avx512 ? swiglu_avx512 : isa == CpuIsa::Avx2 ? swiglu_avx2 : swiglu_plain)(gu, n, F, act);
}

// y[t] = x[t] / sqrt(mean(x[t]²) + eps) · w (w null: ones), for rows [0, n) of width E.
void rms_norm_rows(const float* x, int64_t n, int64_t E, const float* w, double eps, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* a = x + t * E;
    float* b = y + t * E;
    float part[8] = {};  // eight running sums (a vector's worth), in float as LibTorch's mean
    int64_t i = 0;
    for (; i + 8 <= E; i += 8)
      for (int l = 0; l < 8; ++l) part[l] += a[i + l] * a[i + l];
    for (; i < E; ++i) part[i % 8] += a[i] * a[i];
    float ss = 0;
    for (float p : part) ss += p;
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(E) + static_cast<float>(eps));
    if (w)
      for (int64_t i = 0; i < E; ++i) b[i] = a[i] * r * w[i];
    else
      for (int64_t i = 0; i < E; ++i) b[i] = a[i] * r;
  }
}

// One d-wide piece rotated by position's cos/sin [d/2] and scaled, into dst.
void rotate(const float* src, int64_t d, const float* cos, const float* sin, bool interleaved, float scale,
            float* dst) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = src[a], x1 = src[b], c = cos[i], s = sin[i];
    dst[a] = (x0 * c - x1 * s) * scale;
    dst[b] = (x0 * s + x1 * c) * scale;
  }
}

}  // namespace

// About four blocks per worker, a multiple of the kernel's 4 rows, 4 to 256.
int64_t layer_block_rows(int64_t T, int workers) {
  const int64_t per = (T + 4 * workers - 1) / (4 * static_cast<int64_t>(workers));
  return std::clamp<int64_t>((per + 3) / 4 * 4, 4, 256);
}

PackedMatrix pack_matrix(const std::vector<MatrixPart>& parts, int64_t K) {
  PackedMatrix m;
  m.K = K;
  for (const MatrixPart& p : parts) m.N += p.rows;
  const bool keep_rows = matmul_keeps_rows(m.N, K);
  const int64_t panels = (m.N + kPanel - 1) / kPanel;
  m.panels.assign(static_cast<size_t>(panels * K * kPanel), 0.0f);
  if (keep_rows) m.rows.resize(static_cast<size_t>(m.N * K));
  int64_t n = 0;
  for (const MatrixPart& p : parts)
    for (int64_t r = 0; r < p.rows; ++r, ++n) {
      float* col = m.panels.data() + (n / kPanel) * K * kPanel + n % kPanel;
      for (int64_t k = 0; k < K; ++k) col[k * kPanel] = weight_at(p, r * K + k);
      if (keep_rows)
        for (int64_t k = 0; k < K; ++k) m.rows[static_cast<size_t>(n * K + k)] = col[k * kPanel];
    }
  return m;
}

namespace {

std::atomic<MatmulCode> g_matmul_code{MatmulCode::Auto};

// The class of OpenBLAS's kernels on this CPU: its AVX-512 ones (a CPU it knows as AVX-512), its AVX2 ones
// ("Haswell"; "Zen" runs them too), or others (its generic "Prescott" on a CPU it does not know).
enum class BlasKernels { Avx512, Avx2, Other };
BlasKernels blas_kernels() {
  static const BlasKernels kind = [] {
    const std::string core = blas_core_name();
    if (core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids") return BlasKernels::Avx512;
    if (core == "Haswell" || core == "Zen") return BlasKernels::Avx2;
    return BlasKernels::Other;
  }();
  return kind;
}

// Whether cblas_sgemm computes a call of M rows through W [N, K]: where the kernel did not beat it by more
// than 5% in `difflens bench --matmul` on the bundled and 1B-class layers' products, 1 to 256 rows per call
// (docs/benchmarks.md, each pairing of OpenBLAS's kernels with ours). Many rows go to OpenBLAS when it runs
// AVX-512 kernels, or AVX2 ones against ours for AVX2; a single row of the largest matrices goes to it where
// the kernel lost there (the passes give a single row to one thread, OpenBLAS spreads it over all). Our
// plain x86-64 kernel was not measured against OpenBLAS: it keeps every call.
bool blas_beats_kernel(int64_t M, int64_t N, int64_t K) {
  const bool large = N * K >= (int64_t{1} << 24);  // the 1B-class's gate_up and down
  const CpuIsa isa = cpu_isa();
  switch (blas_available() ? blas_kernels() : BlasKernels::Other) {
    case BlasKernels::Avx512:
      if (isa == CpuIsa::Avx512) return M >= 128 || (M >= 64 && K >= 2048) || (large && (M >= 32 || M == 1));
      return isa == CpuIsa::Avx2 && M >= 32;
    case BlasKernels::Avx2:
      if (isa == CpuIsa::Avx2)
        return M >= 64 || (M >= 32 && K >= 2048) || (M >= 8 && K >= 4096) || (large && M == 1);
      return isa == CpuIsa::Avx512 && ((M >= 128 && K >= 4096) || (large && M == 1));
    case BlasKernels::Other:
      break;
  }
  return isa != CpuIsa::Plain && blas_available() && large && M == 1 && K >= 4096;
}

bool use_blas(int64_t M, const PackedMatrix& w) {
  if (w.rows.empty()) return false;  // packed while the kernel alone was in force
  switch (g_matmul_code.load(std::memory_order_relaxed)) {
    case MatmulCode::Kernel:
      return false;
    case MatmulCode::Blas:
      return true;
    case MatmulCode::Auto:
      break;
  }
  return blas_beats_kernel(M, w.N, w.K);
}

}  // namespace

bool set_matmul_code(MatmulCode code) {
  if (code == MatmulCode::Blas && !blas_available()) return false;
  g_matmul_code.store(code);
  return true;
}

MatmulCode matmul_code() {
  return g_matmul_code.load(std::memory_order_relaxed);
}

bool matmul_keeps_rows(int64_t N, int64_t K) {
  const MatmulCode code = matmul_code();
  if (code != MatmulCode::Auto) return code == MatmulCode::Blas;
  // blas_beats_kernel holds from some row count on, or for a single row alone (the passes' calls: 1 to 256).
  return blas_beats_kernel(1, N, K) || blas_beats_kernel(256, N, K);
}

void matmul_cpu(const float* x, int64_t M, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
                bool accumulate) {
  if (M <= 0 || w.N == 0) return;
#ifdef DIFFLENS_CBLAS
  if (use_blas(M, w)) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(w.N),
                static_cast<int>(w.K), 1.0f, x, static_cast<int>(ldx), w.rows.data(), static_cast<int>(w.K),
                accumulate ? 1.0f : 0.0f, y, static_cast<int>(ldy));
    return;
  }
#endif
  const CpuIsa isa = cpu_isa();
  (isa == CpuIsa::Avx512 ? matmul_avx512
   : isa == CpuIsa::Avx2 ? matmul_avx2
                         : matmul_plain)(x, M, ldx, w, y, ldy, accumulate);
}

bool blas_available() {
#ifdef DIFFLENS_CBLAS
  return true;
#else
  return false;
#endif
}

std::string blas_core_name() {
#ifdef DIFFLENS_CBLAS
  const char* name = openblas_get_corename();
  return name ? name : "";
#else
  return "";
#endif
}

void layer_inputs_cpu(const CpuLayer& L, const float* h, int64_t T, const float* cos, const float* sin,
                      const CpuLayerInputs& out, int workers, const CpuParallelFor& parallel) {
  workers = std::max(1, workers);
  const QkvLayout& cols = L.columns;
  const int64_t rb = layer_block_rows(T, workers), blocks = (T + rb - 1) / rb, E = L.E, N = L.qkv.N,
                d = cols.q.d;
  const int64_t dv = cols.dv(), k0 = cols.k_begin(), v0 = cols.v_begin();
  std::vector<std::vector<float>> scratch(static_cast<size_t>(workers));
  parallel(blocks, [&](int64_t b0, int64_t b1, int worker) {
    std::vector<float>& s = scratch[static_cast<size_t>(worker)];
    s.resize(static_cast<size_t>(rb * (E + N)));
    float* x = s.data();
    float* y = x + rb * E;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * rb, n = std::min(rb, T - r0);
      rms_norm_rows(h + r0 * E, n, E, L.input_norm, L.eps, x);
      matmul_cpu(x, n, E, L.qkv, y, N, false);
      for (int64_t t = 0; t < n; ++t) {
        const float* row = y + t * N;
        const int64_t pos = r0 + t;
        const float* c = cos + pos * (d / 2);
        const float* sn = sin + pos * (d / 2);
        for (int64_t hd = 0; hd < cols.q.heads; ++hd) {
          rotate(row + cols.q.column(hd, 0), d, c, sn, L.rope_interleaved, L.q_scale,
                 out.q1 + (hd * T + pos) * d);
          if (cols.q.components == 2)
            rotate(row + cols.q.column(hd, 1), d, c, sn, L.rope_interleaved, L.q_scale,
                   out.q2 + (hd * T + pos) * d);
        }
        for (int64_t g = 0; g < cols.k.heads; ++g) {
          rotate(row + k0 + cols.k.column(g, 0), d, c, sn, L.rope_interleaved, 1.0f,
                 out.k1 + (g * T + pos) * d);
          if (cols.two_keys())
            rotate(row + k0 + cols.k.column(g, 1), d, c, sn, L.rope_interleaved, 1.0f,
                   out.k2 + (g * T + pos) * d);
          for (int64_t p = 0; p < cols.v.components; ++p)  // a value head's pieces side by side
            std::memcpy(out.v + (g * T + pos) * dv + p * d, row + v0 + cols.v.column(g, p),
                        static_cast<size_t>(d) * sizeof(float));
        }
        for (int64_t hd = 0; hd < cols.lambda_logits; ++hd) {
          const float z = row[cols.lambda_begin() + hd];
          out.lambda_logits[hd * T + pos] = z;
          out.lambda_rows[hd * T + pos] = 1.0f / (1.0f + std::exp(-z));
        }
      }
    }
  });
}

void layer_output_cpu(const CpuLayer& L, const float* o, float* h, int64_t T, int workers,
                      const CpuParallelFor& parallel, const std::vector<const float*>* replace) {
  workers = std::max(1, workers);
  const int64_t rb = layer_block_rows(T, workers), blocks = (T + rb - 1) / rb, E = L.E, F = L.F;
  const int64_t heads = L.columns.q.heads, dv = L.columns.dv(), width = heads * dv;  // o_proj's input
  if (L.o.K != width || L.gate_up.N != 2 * F || L.down.K != F)
    throw std::logic_error("layer_output_cpu: packed shapes do not match the layer");
  if (replace && static_cast<int64_t>(replace->size()) != heads)
    throw std::logic_error("layer_output_cpu: one replacement pointer per head");
  std::vector<std::vector<float>> scratch(static_cast<size_t>(workers));
  parallel(blocks, [&](int64_t b0, int64_t b1, int worker) {
    std::vector<float>& s = scratch[static_cast<size_t>(worker)];
    s.resize(static_cast<size_t>(rb * (width + E + 3 * F)));
    float* outs = s.data();        // [rb, width]: the heads' outputs
    float* y = outs + rb * width;  // [rb, E]
    float* gu = y + rb * E;        // [rb, 2F]
    float* act = gu + rb * 2 * F;  // [rb, F]
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * rb, n = std::min(rb, T - r0);
      float* hb = h + r0 * E;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t hd = 0; hd < heads; ++hd) {
          const float* src = o + (hd * T + r0 + t) * dv;
          float* dst = outs + t * width + hd * dv;
          if (replace && (*replace)[static_cast<size_t>(hd)]) {
            std::memcpy(dst, (*replace)[static_cast<size_t>(hd)], static_cast<size_t>(dv) * sizeof(float));
            continue;
          }
          if (!L.head_norm) {
            std::memcpy(dst, src, static_cast<size_t>(dv) * sizeof(float));
            continue;
          }
          rms_norm_rows(src, 1, dv, L.head_norm_weight, L.head_norm_eps, dst);
          const float scale = static_cast<float>(L.head_scale);
          for (int64_t j = 0; j < dv; ++j) dst[j] *= scale;
        }
      matmul_cpu(outs, n, width, L.o, hb, E, true);
      rms_norm_rows(hb, n, E, L.post_norm, L.eps, y);
      matmul_cpu(y, n, E, L.gate_up, gu, 2 * F, false);
      swiglu_rows(gu, n, F, act);
      matmul_cpu(act, n, F, L.down, hb, E, true);
    }
  });
}

}  // namespace difflens
