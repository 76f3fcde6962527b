// Internal to core's plain-C++ CPU passes (attention_cpu.cpp, layer_cpu.cpp): float vectors as GCC vector
// types and the few operations on them those passes share. Included only by .cpp files whose functions are
// compiled per instruction set (__attribute__((target(...)))), so everything here is inlined into them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace difflens::simd {

// Vectors of floats as GCC vector types, element-wise arithmetic; a comparison gives the ints of the same
// width, -1 / 0 per lane. Each instruction set gets the width of its registers — 16 floats for AVX-512, 8
// for AVX2, 4 for plain x86-64 (SSE2) — since a wider type is split into halves and some of its operations
// (selects, comparisons) then run lane by lane.
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
template <typename V>
using IntOf = decltype(V{} < V{});
template <typename V>
constexpr int64_t lanes() {
  return static_cast<int64_t>(sizeof(V) / sizeof(float));
}

template <typename V>
__attribute__((always_inline)) inline V load(const float* p) {
  V x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
template <typename V>
__attribute__((always_inline)) inline void store(float* p, V x) {
  std::memcpy(p, &x, sizeof x);
}
template <typename V>
__attribute__((always_inline)) inline V splat(float f) {
  return V{} + f;
}
// A vector's lanes reduced pairwise: its halves combined, then their halves, ... down to one float (log2 W
// dependent steps, where a lane-by-lane loop is a chain of W).
template <typename V>
struct HalfOf;
template <>
struct HalfOf<v16> {
  using type = v8;
};
template <>
struct HalfOf<v8> {
  using type = v4;
};
template <typename V, typename Op>
__attribute__((always_inline)) inline float lane_reduce(V x, Op op) {
  if constexpr (lanes<V>() == 4) {
    return op(op(x[0], x[2]), op(x[1], x[3]));
  } else {
    using H = typename HalfOf<V>::type;
    H a, b;
    std::memcpy(&a, &x, sizeof a);
    std::memcpy(&b, reinterpret_cast<const char*>(&x) + sizeof a, sizeof b);
    return lane_reduce(op(a, b), op);
  }
}
// The operations, for floats and vectors alike.
struct AddOp {
  template <typename T>
  __attribute__((always_inline)) T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename T>
  __attribute__((always_inline)) T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct MinOp {
  template <typename T>
  __attribute__((always_inline)) T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};
template <typename V>
__attribute__((always_inline)) inline float lane_sum(V x) {
  return lane_reduce(x, AddOp{});
}
template <typename V>
__attribute__((always_inline)) inline float lane_max(V x) {
  return lane_reduce(x, MaxOp{});
}
template <typename V>
__attribute__((always_inline)) inline float lane_min(V x) {
  return lane_reduce(x, MinOp{});
}

// e^x for x <= 0, lane by lane: Cephes' single-precision polynomial after 2^n range reduction (within 2 ulp);
// 0 below -87.3, where e^x leaves the normal floats.
template <typename V>
__attribute__((always_inline)) inline V exp_nonpositive(V x) {
  using I = IntOf<V>;
  const I keep = x >= -87.3f;  // -1 where kept
  x = x < -87.3f ? splat<V>(-87.3f) : x;
  const I ni = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, I);  // round(x / ln 2), x <= 0
  const V n = __builtin_convertvector(ni, V);
  V r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = splat<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const V v = p * (V)((ni + 127) << 23);  // (a cast between vector types keeps the bits)
  return (V)((I)v & keep);
}

}  // namespace difflens::simd
