// The data a training run reads: its corpus, each step's batch (built ahead on worker threads), --rows-out.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

#include "core/formats/error.h"
#include "core/model/train_impl.h"

namespace difflens::training {
namespace {

using at::Tensor;

// Per-token loss weights [B, L] for targets ids[1..L]: `answer_weight` where the target is a retrieval
// answer token, 1 elsewhere; undefined when every weight is 1.
Tensor loss_weights(const std::vector<TrainingRow>& rows, double answer_weight, const at::Device& dev) {
  if (answer_weight == 1.0) return {};
  const int64_t B = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(rows[0].ids.size()) - 1;
  Tensor w = at::ones({B, L}, at::TensorOptions().dtype(at::kFloat));
  auto acc = w.accessor<float, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t pos : rows[static_cast<size_t>(b)].answers)
      if (pos >= 1 && pos <= L) acc[b][pos - 1] = static_cast<float>(answer_weight);
  return w.to(dev);
}

// The phases' training data, each with its phase's mix, in phase order.
std::vector<TrainingData> phase_data_of(const TrainOptions& o, const std::vector<int64_t>& train_stream,
                                        const Haystack& train_hay, const Tokenizer& tok) {
  std::vector<TrainingData> phase_data;
  for (const TrainPhase& p : o.phases) phase_data.emplace_back(train_stream, train_hay, tok, p.mix);
  return phase_data;
}

}  // namespace

// Members in the order the loop used to build them: the phases' data before the validation data.
TrainCorpus::TrainCorpus(const TrainOptions& o, const Tokenizer& tok)
    : train_text(read_text(o.corpus_dir / "train.txt")),
      val_text(read_text(o.corpus_dir / "val.txt")),
      train_hay(train_text, tok),
      eval_hay(val_text, tok),
      train_stream(encode_lines(train_text, tok)),
      phase_data(phase_data_of(o, train_stream, train_hay, tok)),
      val_data(encode_lines(val_text, tok), eval_hay, tok, DataMix{0.0, 0.0, NameSet::SingleToken}) {}

Tensor batch_tensor(const std::vector<TrainingRow>& rows, const at::Device& dev) {
  const int64_t B = static_cast<int64_t>(rows.size()), n = static_cast<int64_t>(rows[0].ids.size());
  Tensor t = at::empty({B, n}, at::TensorOptions().dtype(at::kLong));
  auto acc = t.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) acc[b][i] = rows[static_cast<size_t>(b)].ids[static_cast<size_t>(i)];
  return t.to(dev);
}

StepBatch build_step_batch(const TrainOptions& o, const TrainCorpus& corpus, int64_t step, bool pin) {
  std::mt19937_64 rng(o.seed * 1000003ull + static_cast<uint64_t>(step));
  const size_t phase = phase_at(o, step);
  std::vector<TrainingRow> rows;
  for (int64_t r = 0; r < phase_batch(o, phase); ++r)
    rows.push_back(corpus.phase_data[phase].row(phase_seq_len(o, phase), rng));
  const at::Device cpu(at::kCPU);
  StepBatch b{batch_tensor(rows, cpu), loss_weights(rows, o.phases[phase].answer_weight, cpu)};
  if (pin) {
    b.ids = b.ids.pin_memory();
    if (b.weights.defined()) b.weights = b.weights.pin_memory();
  }
  return b;
}

int batch_workers(const TrainOptions& o, const at::Device& dev) {
  return o.data_workers > 0 ? o.data_workers
         : dev.is_cuda()    ? static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u))
                            : 1;
}

BatchPrefetcher::BatchPrefetcher(Build build, int64_t first, int64_t end, int workers, int depth)
    : build_(std::move(build)), next_build_(first), next_take_(first), end_(end), depth_(depth) {
  for (int i = 0; i < std::max(1, workers); ++i) threads_.emplace_back([this] { work(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

StepBatch BatchPrefetcher::take(int64_t step) {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return ready_.count(step) || error_; });
  if (error_) std::rethrow_exception(error_);
  StepBatch b = std::move(ready_[step]);
  ready_.erase(step);
  next_take_ = step + 1;
  cv_.notify_all();
  return b;
}

void BatchPrefetcher::work() {
  for (;;) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock,
               [&] { return stop_ || error_ || (next_build_ < end_ && next_build_ < next_take_ + depth_); });
      if (stop_ || error_) return;
      step = next_build_++;
    }
    try {
      StepBatch b = build_(step);
      std::lock_guard<std::mutex> lock(m_);
      ready_[step] = std::move(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!error_) error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

RowsFile open_rows_file(const TrainOptions& o) {
  // Opened only if absent ("wx": never over a file, even one made since the check at the start).
  RowsFile rows_file(nullptr, &std::fclose);
  if (!o.rows_out.empty()) {
    rows_file.reset(std::fopen(o.rows_out.c_str(), "wx"));
    if (!rows_file)
      throw Error("train: cannot write " + o.rows_out.string() + ": " +
                  (errno == EEXIST
                       ? std::string("it exists; refusing to overwrite it (give another --rows-out)")
                       : std::string(std::strerror(errno))));
  }
  return rows_file;
}

void write_rows(std::FILE* file, const TrainOptions& o, int64_t step, const StepBatch& b) {
  const Tensor ids = b.ids.to(at::kLong).contiguous();
  const Tensor w = b.weights.defined() ? b.weights.to(at::kFloat).contiguous() : Tensor();
  std::ostringstream line;
  for (int64_t r = 0; r < ids.size(0); ++r) {
    line << "{\"step\":" << step << ",\"row\":" << r << ",\"ids\":[";
    const int64_t* p = ids.data_ptr<int64_t>() + r * ids.size(1);
    for (int64_t i = 0; i < ids.size(1); ++i) line << (i ? "," : "") << p[i];
    line << "]";
    if (w.defined()) {
      line << ",\"weights\":[";
      const float* q = w.data_ptr<float>() + r * w.size(1);
      for (int64_t i = 0; i < w.size(1); ++i) line << (i ? "," : "") << q[i];
      line << "]";
    }
    line << "}\n";
  }
  const std::string text = line.str();
  if (std::fwrite(text.data(), 1, text.size(), file) != text.size())
    throw Error("train: writing " + o.rows_out.string() + " failed: " + std::strerror(errno));
}

}  // namespace difflens::training
