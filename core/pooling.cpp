// The pooled maps of a long-prompt capture (pooling.h): the grid, the host's loops over a block's maps, and
// the same cells by tensor operations on the maps' device.
#include "core/pooling.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

#include "core/to_host.h"

namespace difflens {

using at::Tensor;

PoolGrid::PoolGrid(int64_t T_, int64_t P_) : T(T_), P(P_) {
  if (P == 0) return;
  start.resize(static_cast<size_t>(P + 1));
  for (int64_t r = 0; r <= P; ++r) start[static_cast<size_t>(r)] = r * T / P;
  bin.resize(static_cast<size_t>(T));
  for (int64_t r = 0; r < P; ++r)
    for (int64_t i = r * T / P; i < (r + 1) * T / P; ++i) bin[static_cast<size_t>(i)] = r;
  count.assign(static_cast<size_t>(P * P), 0);
  for (int64_t i = 0; i < T; ++i) {
    const int64_t r = bin[static_cast<size_t>(i)];
    for (int64_t cc = 0; cc <= r; ++cc) {
      const int64_t c0 = cc * T / P, c1 = std::min((cc + 1) * T / P, i + 1);
      count[static_cast<size_t>(r * P + cc)] += c1 - c0;
    }
  }
}

void pool_block_on_host(const PoolGrid& grid, const std::vector<int64_t>& keep_heads, int64_t maps,
                        const float* const src[3], int64_t row0, int64_t rows,
                        std::vector<std::vector<float>>& sum, std::vector<std::vector<float>>& best) {
  const int64_t P = grid.P;
  const size_t nh = keep_heads.size();
  const int64_t K = row0 + rows;
  at::parallel_for(0, static_cast<int64_t>(nh) * maps, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t job = lo; job < hi; ++job) {
      const int64_t k = job / maps, m = job % maps;
      const float* a = src[m] + keep_heads[static_cast<size_t>(k)] * rows * K;
      float* su = sum[static_cast<size_t>(job)].data();
      float* be = best[static_cast<size_t>(job)].data();
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t q = row0 + i;
        const int64_t rb = grid.bin[static_cast<size_t>(q)];
        const float* row = a + i * K;
        // One column cell at a time: a tight loop over its keys, then one update of the cell.
        for (int64_t c = 0; c <= rb; ++c) {
          const int64_t j0 = grid.start[static_cast<size_t>(c)];
          const int64_t j1 = std::min(grid.start[static_cast<size_t>(c + 1)], q + 1);
          float sum = 0, top = be[static_cast<size_t>(rb * P + c)];
          for (int64_t j = j0; j < j1; ++j) {
            const float v = row[j];
            sum += v;
            if (std::fabs(v) > std::fabs(top)) top = v;
          }
          su[static_cast<size_t>(rb * P + c)] += sum;
          be[static_cast<size_t>(rb * P + c)] = top;
        }
      }
    }
  });
}

DevicePooler::DevicePooler(const PoolGrid& grid, int64_t heads, int64_t maps, bool signed_last,
                           at::Device dev)
    : grid_(grid), signed_last_(signed_last) {
  int64_t W = 1;
  for (int64_t c = 0; c < grid.P; ++c) W = std::max(W, grid.start[c + 1] - grid.start[c]);
  std::vector<int64_t> slots(static_cast<size_t>(grid.P * W));
  std::vector<uint8_t> own(slots.size());
  for (int64_t c = 0; c < grid.P; ++c)
    for (int64_t w = 0; w < W; ++w) {
      const int64_t t = grid.start[c] + w;
      const bool in = t < grid.start[c + 1];
      slots[static_cast<size_t>(c * W + w)] = in ? t : grid.start[c];
      own[static_cast<size_t>(c * W + w)] = in;
    }
  slots_ = at::tensor(slots, at::TensorOptions().dtype(at::kLong)).view({grid.P, W}).to(dev);
  own_ = at::tensor(at::ArrayRef<uint8_t>(own), at::TensorOptions().dtype(at::kByte))
             .view({grid.P, W})
             .to(dev, at::kBool);
  for (int64_t m = 0; m < maps; ++m) {
    sum_.push_back(at::zeros({heads, grid.P, grid.P}, at::TensorOptions().device(dev)));
    best_.push_back(at::zeros({heads, grid.P, grid.P}, at::TensorOptions().device(dev)));
  }
}

void DevicePooler::add(int64_t m, const Tensor& a, int64_t row0) {
  const int64_t heads = a.size(0), rows = a.size(1), keys = a.size(2);
  const bool may_be_negative = signed_last_ && m + 1 == static_cast<int64_t>(sum_.size());
  auto [kc0, kslot, kown] = cells(0, keys);
  auto [rc0, rslot, rown] = cells(row0, row0 + rows);
  const int64_t kp = kslot.size(0), kw = kslot.size(1), rp = rslot.size(0), rw = rslot.size(1);
  // Keys first: [heads, rows, kp, kw] -> per row and key cell.
  const Tensor g = a.index_select(2, kslot.flatten()).view({heads, rows, kp, kw});
  const Tensor colsum = (g * kown).sum(-1);  // [heads, rows, kp]
  const Tensor colmax = g.amax(-1);
  // Then rows: [heads, rp, rw, kp] -> per cell.
  auto by_rows = [&](const Tensor& t) {
    return t.index_select(1, rslot.flatten()).view({heads, rp, rw, kp});
  };
  const Tensor cellsum = (by_rows(colsum) * rown.unsqueeze(-1)).sum(2);  // [heads, rp, kp]
  Tensor top = by_rows(colmax).amax(2);
  if (may_be_negative) {
    const Tensor low = by_rows(g.amin(-1)).amin(2);
    top = at::where(top.ge(low.neg()), top, low);  // ties of +x and -x: +x
  }
  sum_[static_cast<size_t>(m)].narrow(1, rc0, rp).narrow(2, kc0, kp).add_(cellsum);
  Tensor best = best_[static_cast<size_t>(m)].narrow(1, rc0, rp).narrow(2, kc0, kp);
  best.copy_(at::where(top.abs().gt(best.abs()), top, best));
}

std::vector<float> DevicePooler::sums(int64_t m) const {
  return to_vector(sum_[static_cast<size_t>(m)]);
}
std::vector<float> DevicePooler::bests(int64_t m) const {
  return to_vector(best_[static_cast<size_t>(m)]);
}

std::tuple<int64_t, Tensor, Tensor> DevicePooler::cells(int64_t t0, int64_t t1) const {
  const int64_t c0 = grid_.bin[static_cast<size_t>(t0)], c1 = grid_.bin[static_cast<size_t>(t1 - 1)];
  const Tensor s = slots_.narrow(0, c0, c1 - c0 + 1);
  const Tensor own = own_.narrow(0, c0, c1 - c0 + 1).logical_and(s.ge(t0)).logical_and(s.lt(t1));
  return {c0, s.clamp(t0, t1 - 1).sub_(t0), own};
}

}  // namespace difflens
