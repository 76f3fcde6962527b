// Needle-in-a-haystack lab: builds retrieval episodes at chosen lengths and depths, asks a model for the
// codes (greedy) and measures where its attention goes while it reads the question. LibTorch-free: runs
// through Model's public interface, so it works for any model DiffLens can load.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/needle_records.h"
#include "core/model/model.h"

namespace difflens {

// Runs one episode: a capture of the prompt up to the last question (maps of every layer and head)
// for the attention readout, and greedy decoding of each code with earlier answers given.
// `interventions` (core/formats/intervention.h, as written): the episode runs under them, resolved per
// question with the asked needle's code as the answer and the question's first token as the query (knockouts
// act on the question and the answer written after it). The capture keeps each layer's queries, keys and
// values (the output shares need the values); `keep_trace` hands it back in NeedleRun::trace.
NeedleRun run_needle(const Model& model, const EpisodeBuilder& builder, const NeedleCell& cell, uint64_t seed,
                     const std::atomic<bool>* cancel = nullptr,
                     const std::vector<std::string>& interventions = {}, bool keep_trace = false);

}  // namespace difflens
