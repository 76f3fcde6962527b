// Fuzz target: the bundled models' prompt path, SentencePiece (loaded through its dlmopen'ed module), with
// arbitrary bytes: encoding never fails, every id is in the vocabulary and has a piece, and decoding works.
#include "core/formats/error.h"
#include "core/formats/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

#ifndef DIFFLENS_SOURCE_DIR
#error "DIFFLENS_SOURCE_DIR must name the source tree (assets/models)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  static const Tokenizer tok =
      Tokenizer::sentencepiece(DIFFLENS_SOURCE_DIR "/assets/models/diff-small/tokenizer.model");
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Encoding e = tok.encode(text, true);
  FUZZ_CHECK(!e.ids.empty() && e.ids[0] == tok.bos_id());
  FUZZ_CHECK(e.offsets.size() == e.ids.size() && e.pieces.size() == e.ids.size());
  for (size_t i = 0; i < e.ids.size(); ++i) {
    FUZZ_CHECK(e.ids[i] >= 0 && e.ids[i] < tok.vocab_size());
    FUZZ_CHECK(e.offsets[i].first <= e.offsets[i].second && e.offsets[i].second <= text.size());
    (void)tok.piece(e.ids[i]);
  }
  (void)tok.decode(e.ids);
  return 0;
}
