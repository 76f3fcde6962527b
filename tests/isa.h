// Runs a check on every instruction set the CPU passes are compiled for (core/cpu/attention_cpu.h,
// core/cpu/layer_cpu.h).
#pragma once

#include <catch2/catch.hpp>

#include "core/cpu/attention_cpu.h"

namespace difflens::test {

// Runs `check` once per instruction set this CPU has (the passes' AVX-512, AVX2 and plain x86-64 code), then
// returns to the widest.
template <typename Check>
void on_every_isa(Check&& check) {
  struct Widest {  // back to the widest even when a REQUIRE throws: later tests must not run narrower
    ~Widest() { set_cpu_isa(CpuIsa::Auto); }
  } widest;
  for (const CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Plain}) {
    if (!set_cpu_isa(isa)) {
      WARN("this CPU lacks " << (isa == CpuIsa::Avx512 ? "AVX-512" : "AVX2")
                             << ": that code is not run here");
      continue;
    }
    INFO("instruction set " << cpu_isa_name());
    check();
  }
}

}  // namespace difflens::test
