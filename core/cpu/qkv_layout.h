// Which columns of a layer's q | k | v (| λ) projections feed which attention head, per architecture: the one
// description that core/model/nn.h's modules read (as views of each projection) and the CPU's layer pass
// reads (core/cpu/layer_cpu.h, as column offsets into the stacked product). Plain arithmetic, no LibTorch.
// tests/test_layer_cpu.cpp holds every architecture's CPU inputs equal to the modules'.
#pragma once

#include <cstdint>

#include "core/formats/config.h"

namespace difflens {

// One projection's output columns: `heads` heads of `components` d-wide pieces (DIFF: a head's two
// components; else one). component_major: the pieces lie [components, heads, d] (DIFF's split pairing,
// DiffLlama); else [heads, components, d] (a head's components adjacent).
struct HeadColumns {
  int64_t heads = 0, components = 1, d = 0;
  bool component_major = false;

  int64_t width() const { return heads * components * d; }
  // The first column of head h's component `which`, counted from the projection's first column.
  int64_t column(int64_t h, int64_t which) const {
    return (component_major ? which * heads + h : h * components + which) * d;
  }
};

// The attention's inputs in the q, k and v projections (stacked in that order, then DIFF V2's λ logits):
// query head h's components q1, q2 (q2 only when q has two); key/value head g's keys k1, k2 (k2: DIFF V1;
// DIFF V2's two query components share k1) and its value, the pieces of v side by side (dv = components · d).
struct QkvLayout {
  HeadColumns q, k, v;
  int64_t lambda_logits = 0;  // DIFF V2: one λ logit per head after v (lambda_proj's columns); else 0

  bool two_keys() const { return k.components == 2; }
  int64_t dv() const { return v.components * v.d; }
  // Where each projection starts in the stacked row.
  int64_t k_begin() const { return q.width(); }
  int64_t v_begin() const { return k_begin() + k.width(); }
  int64_t lambda_begin() const { return v_begin() + v.width(); }
  int64_t width() const { return lambda_begin() + lambda_logits; }
};

inline QkvLayout qkv_layout(const ModelConfig& c) {
  const int64_t d = c.head_dim, nq = c.num_attention_heads, nk = c.num_key_value_heads;
  QkvLayout l;
  if (!c.is_diff()) {  // baseline: nq query heads, nk key/value heads of width d
    l.q = {nq, 1, d, false};
    l.k = l.v = {nk, 1, d, false};
  } else if (c.is_diff_v2()) {  // q [H, 2, d] (sub-heads 2h, 2h + 1); keys and values [Hkv, d]; H λ logits
    l.q = {nq / 2, 2, d, false};
    l.k = l.v = {nk, 1, d, false};
    l.lambda_logits = nq / 2;
  } else {  // DIFF V1: every projection's heads in two components, adjacent or split
    const bool split = c.diff_pairing != DiffPairing::Adjacent;
    l.q = {nq / 2, 2, d, split};
    l.k = l.v = {nk / 2, 2, d, split};
  }
  return l;
}

}  // namespace difflens
