// (library difflens_worker) What the worker's own files share, included only inside app/worker: the helpers
// that more than one job uses. The jobs themselves are InferenceWorker's private members, each in the file
// named for it (worker_*.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/worker/inference_worker.h"

namespace difflens::app {

// A slot's interventions resolved against its model: those it cannot take are skipped, each with its reason
// in `skipped` (the app applies one list to both models; a baseline has no λ). The prompt job and Continue
// both resolve them this way.
Interventions slot_interventions(const Model& m, const RunEdits& edits, size_t slot, int64_t tokens,
                                 std::vector<std::string>& skipped);

// RunResult::nonfinite of each slot's trace, here on the worker's thread (a long prompt's maps are many).
void note_nonfinite(RunResult& r);

}  // namespace difflens::app
