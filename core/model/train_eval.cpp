// Evaluation: the validation loss and needle accuracy logged during training, and text_loss.
#include <algorithm>
#include <fstream>
#include <random>

#include <c10/core/InferenceMode.h>

#include "core/formats/error.h"
#include "core/model/train.h"
#include "core/model/train_impl.h"

namespace difflens {
namespace {

using at::Tensor;
using training::encode_lines;
using training::lm_loss;

struct NeedleScore {
  double exact = 0;   // fraction of episodes whose whole code is reproduced
  double digits = 0;  // fraction of code tokens predicted right (chance: 0.1)
};

// Scores the final answer of each episode: a code token counts when it is the argmax given the true
// prefix; an episode counts when all of them do (what greedy decoding would produce).
NeedleScore needle_accuracy(nn::CausalLm& net, const std::vector<Episode>& episodes, const at::Device& dev) {
  c10::InferenceMode guard;
  int correct = 0;
  int64_t digits = 0, digit_total = 0;
  for (const Episode& ep : episodes) {
    Tensor ids = at::tensor(ep.ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(dev);
    Tensor pred = net->forward(ids).argmax(-1)[0].to(at::kCPU);  // [T]
    const Span a = ep.answer_spans.back();
    bool ok = true;
    for (int64_t i = a.begin; i < a.end; ++i) {
      const bool hit = pred[i - 1].item<int64_t>() == ep.ids[static_cast<size_t>(i)];
      ok &= hit;
      digits += hit;
      ++digit_total;
    }
    // The code must also end where it ends: the token after it (its full stop) is the model's choice too.
    if (a.end < static_cast<int64_t>(ep.ids.size()))
      ok &= pred[a.end - 1].item<int64_t>() == ep.ids[static_cast<size_t>(a.end)];
    correct += ok;
  }
  NeedleScore s;
  if (!episodes.empty()) s.exact = static_cast<double>(correct) / static_cast<double>(episodes.size());
  if (digit_total) s.digits = static_cast<double>(digits) / static_cast<double>(digit_total);
  return s;
}

// Held-out episodes per kind of needle in use (names, wordings, code lengths), each drawn from the same
// seed. Varied wordings are evaluated on the held-out ones.
std::string eval_kind(const DataMix& m) {
  std::string k = to_string(m.names);
  if (m.varied_wording) k += " held-out wording";
  if (m.code_digits_min != 4 || m.code_digits_max != 4)
    k += " " + std::to_string(m.code_digits_min) + "-" + std::to_string(m.code_digits_max) + " digits";
  return k;
}

}  // namespace

TextLoss text_loss(const Model& model, const std::string& text, int64_t window, int64_t max_windows,
                   const std::function<void(int64_t, int64_t)>& progress, const std::atomic<bool>* stop) {
  if (window < 1) throw Error("text loss: the window must be at least 1 token");
  const std::vector<int64_t> ids = encode_lines(text, model.tokenizer());
  const int64_t n = static_cast<int64_t>(ids.size()) / (window + 1);
  if (n == 0)
    throw Error("text loss: the text has " + std::to_string(ids.size()) +
                " tokens, fewer than one window of " + std::to_string(window + 1));
  const int64_t windows = max_windows > 0 ? std::min(n, max_windows) : n;
  auto& impl = ModelAccess::impl(model);
  c10::InferenceMode guard;
  const Tensor all = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + windows * (window + 1)),
                                at::TensorOptions().dtype(at::kLong))
                         .view({windows, window + 1});  // [W, window + 1]
  double sum = 0;
  int64_t done = 0;
  constexpr int64_t kRowsPerPass = 8;  // bounds the [rows, window, V] logits
  for (int64_t w0 = 0; w0 < windows; w0 += kRowsPerPass) {
    if (stop && *stop) break;
    const Tensor batch = all.narrow(0, w0, std::min(kRowsPerPass, windows - w0)).to(impl.device);
    sum += lm_loss(impl.net, batch).mean.item<double>() * static_cast<double>(batch.size(0) * window);
    done += batch.size(0);
    if (progress) progress(done, windows);
  }
  if (done == 0) throw Cancelled();
  TextLoss r;
  r.windows = done;
  r.planned = windows;
  r.tokens = done * window;
  r.nats_per_token = sum / static_cast<double>(r.tokens);
  return r;
}

namespace training {

// Fixed evaluation material: validation batches and held-out needle episodes.
TrainEvaluation::TrainEvaluation(const TrainOptions& o, const TrainCorpus& corpus, const Tokenizer& tok,
                                 const at::Device& dev)
    : o_(o), dev_(dev) {
  {
    std::mt19937_64 rng(o.seed + 7777);
    for (int b = 0; b < 4; ++b) {
      std::vector<TrainingRow> rows;
      for (int64_t r = 0; r < o.batch; ++r) rows.push_back(corpus.val_data.text_row(o.seq_len, rng));
      val_batches_.push_back(batch_tensor(rows, dev));
    }
  }
  for (const TrainPhase& p : o.phases) {
    const std::string kind = eval_kind(p.mix);
    if (episodes_.count(kind)) continue;
    EpisodeBuilder eval_builder(corpus.eval_hay, tok, NeedleSplit::Eval, p.mix.names);
    if (p.mix.varied_wording) eval_builder.set_wordings(needle_wordings(NeedleSplit::Eval));
    eval_builder.set_code_digits(p.mix.code_digits_min, p.mix.code_digits_max);
    std::mt19937_64 rng(o.seed + 8888);
    for (int64_t L : o.eval_lengths)
      for (int64_t e = 0; e < o.eval_episodes; ++e) {
        EpisodeSpec es;
        es.context_tokens = L;
        es.depths = {static_cast<double>(e % 5) / 4.0};
        es.depth_by_tokens = false;  // the placement the bundled pair's logs were measured with
        episodes_[kind][L].push_back(eval_builder.build(es, rng));
      }
  }
}

void TrainEvaluation::run(std::vector<ModelState>& models, int64_t step, int64_t tokens) {
  const TrainOptions& o = o_;
  for (auto& s : models) {
    auto& net = ModelAccess::impl(s.model).net;
    net->eval();
    double val = 0;
    {
      c10::InferenceMode guard;
      for (const Tensor& b : val_batches_) val += lm_loss(net, b).mean.item<double>();
    }
    val /= static_cast<double>(val_batches_.size());
    const double train_loss =
        s.loss_count ? s.loss_sum.item<double>() / static_cast<double>(s.loss_count) : 0.0;
    std::ofstream(s.dir / "train_log.csv", std::ios::app)
        << step << "," << train_loss << "," << val << "," << tokens << "\n";
    // Evaluated with the names of the phase that produced these weights.
    const std::string kind = eval_kind(o.phases[phase_at(o, step - 1)].mix);
    std::vector<NeedleScore> scores;
    for (int64_t L : o.eval_lengths) scores.push_back(needle_accuracy(net, episodes_[kind][L], dev_));
    std::ofstream ev(s.dir / "eval_log.csv", std::ios::app);
    ev << step << "," << tokens;
    for (const auto& sc : scores) ev << "," << sc.exact;
    for (const auto& sc : scores) ev << "," << sc.digits;
    ev << "," << kind << "\n";
    s.loss_sum = Tensor();
    s.loss_count = 0;
    net->train();
  }
}

}  // namespace training
}  // namespace difflens
