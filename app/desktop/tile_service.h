// Exact tiles of long-prompt maps off the UI thread (the head view's zoomed-in cells). Plain C++, no ImGui.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/formats/tiles.h"
#include "core/formats/trace.h"

namespace difflens::app {

// Exact tiles of long-prompt maps, computed off the UI thread from the trace's queries, keys and row
// log-sum-exps (no model needed): the latest request wins, one computation at a time.
class TileService {
 public:
  struct Key {
    const Trace* trace = nullptr;
    int layer = -1, head = -1;
    int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
    bool operator==(const Key& o) const {
      return trace == o.trace && layer == o.layer && head == o.head && row0 == o.row0 && rows == o.rows &&
             col0 == o.col0 && cols == o.cols;
    }
  };
  // The tile for `key` when it is ready; otherwise starts (or queues) it and returns nullptr.
  const AttentionTile* get(const std::shared_ptr<const Trace>& trace, const Key& key) {
    if (running_.valid() && running_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        done_ = std::make_pair(running_key_, running_.get());
        ++generation_;
        error_.clear();
        failed_.reset();
      } catch (const std::exception& e) {
        done_.reset();
        error_ = e.what();
        failed_ = running_key_;
      }
    }
    if (done_ && done_->first == key) return &done_->second;
    if (failed_ && *failed_ == key) return nullptr;  // it failed: asked again only for another tile
    if (!running_.valid()) {
      ++started_;
      running_key_ = key;
      running_ = std::async(std::launch::async, [trace, key] {
        return attention_tile(*trace, key.layer, key.head, key.row0, key.rows, key.col0, key.cols);
      });
    }
    return nullptr;
  }
  const std::string& error() const { return error_; }
  uint64_t generation() const { return generation_; }  // grows with every finished tile
  uint64_t started() const { return started_; }        // computations started so far
  ~TileService() {
    if (running_.valid()) running_.wait();
  }

 private:
  std::future<AttentionTile> running_;
  Key running_key_;
  std::optional<std::pair<Key, AttentionTile>> done_;
  std::optional<Key> failed_;  // the last tile whose computation threw (error_ says why)
  std::string error_;
  uint64_t generation_ = 0, started_ = 0;
};

}  // namespace difflens::app
