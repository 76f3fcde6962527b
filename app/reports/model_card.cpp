// Model cards (see model_card.h).
#include "app/reports/model_card.h"

#include <nlohmann/json.hpp>

#include "core/formats/bounded_read.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace difflens::app {

std::optional<ModelCard> read_model_card(const std::string& model_dir) {
  if (model_dir.empty()) return std::nullopt;
  const std::filesystem::path path = std::filesystem::path(model_dir) / "card.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  ModelCard card;
  std::string text;
  try {
    text = read_bounded(path, "model card", kMetadataLimit);
  } catch (const std::exception& e) {
    card.summary = e.what();
    return card;
  }
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("summary") || !j["summary"].is_string()) {
    card.summary = path.string() + ": not a model card (a JSON object with a \"summary\" text)";
    return card;
  }
  card.summary = j["summary"].get<std::string>();
  if (j.contains("caveat") && j["caveat"].is_string()) card.caveat = j["caveat"].get<std::string>();
  if (j.contains("brief") && j["brief"].is_string()) card.brief = j["brief"].get<std::string>();
  if (j.contains("views") && j["views"].is_object())
    for (const auto& [view, line] : j["views"].items())
      if (line.is_string() && !line.get<std::string>().empty()) card.views[view] = line.get<std::string>();
  if (j.contains("card") && j["card"].is_string() && !j["card"].get<std::string>().empty()) {
    const std::filesystem::path full = std::filesystem::path(model_dir) / j["card"].get<std::string>();
    card.card_path = full.lexically_normal().string();
  }
  return card;
}

std::string card_line(const ModelCard& card) {
  return card.caveat.empty() ? card.summary : card.summary + ": " + card.caveat;
}

std::string brief_line(const ModelCard& card) {
  return card.brief.empty() ? card_line(card) : card.brief;
}

std::string view_line(const ModelCard& card, const std::string& view) {
  const auto it = card.views.find(view);
  return it == card.views.end() ? "" : it->second;
}

}  // namespace difflens::app
