// One line about a loaded model, as the app's side panel, `serve` and `difflens info` say it (app/common).
#pragma once

#include <string>
#include "core/model/model.h"

namespace difflens::cli {

// One line about a loaded model: "diff, 4 layers x 4 heads, 1.84 M params, cpu" (+ its checkpoint's notes),
// as the app's side panel, `serve` and its GET /v1/info say it.
std::string describe_model(const Model& model);

}  // namespace difflens::cli
