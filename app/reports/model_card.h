// A model's own line about itself, for the side panel and Figure 1: card.json in the model's folder, written
// by scripts/model-card from its measurements ({"summary": ..., "caveat": ..., "brief": ..., "views":
// {"outliers": ..., "heads": ...}, "card": "../README.md"}), never written into the app. No ImGui, no
// LibTorch.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace difflens::app {

struct ModelCard {
  std::string summary;  // "trained 131.1 M tokens (...); answers held-out single needles at 256 tokens: 1.00"
  std::string caveat;   // what a reader must not conclude from it ("" : nothing)
  std::string brief;    // the same in a few words, for a chart's title area ("" : summary and caveat)
  std::string card_path;  // the full model card (a Markdown file), resolved against the folder; "" : none
  // What the card says beside one view, where the model differs from the paper's or from what trained
  // models usually show: "outliers" (the Outliers view), "heads" (the Model view's head scores).
  std::map<std::string, std::string> views;
};

// The card of the model in `model_dir`; nullopt when the folder has no card.json (a downloaded checkpoint, a
// remote model). A card.json that is not such an object gives a card whose summary says what is wrong with
// it.
std::optional<ModelCard> read_model_card(const std::string& model_dir);

// The line shown for it: "summary" or "summary: caveat"; brief_line: its brief form when it has one.
std::string card_line(const ModelCard& card);
std::string brief_line(const ModelCard& card);
// The card's line for `view` ("" : none).
std::string view_line(const ModelCard& card, const std::string& view);

}  // namespace difflens::app
