// Fuzz target: a Hugging Face tokenizer.json (vocabulary, merges, added tokens, pre-tokenizer regexes).
// What loads must encode text (ASCII, multi-byte UTF-8, invalid UTF-8) into tokens that cover every byte
// once, in order, and decode back to the same bytes.
#include "core/formats/bpe.h"
#include "core/formats/error.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  std::shared_ptr<const ByteLevelBpe> bpe;
  try {
    bpe = ByteLevelBpe::from_json(std::string(reinterpret_cast<const char*>(data), size), "tokenizer.json");
  } catch (const Error&) {
    return 0;
  }
  for (const std::string& text : {std::string("The secret code of Mira is 4821."), std::string(" \n\t  x"),
                                  std::string("na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"),
                                  std::string("\xff\xfe\xc3(\x80 bad", 10), std::string()}) {
    const std::vector<ByteLevelBpe::Token> tokens = bpe->encode(text);
    size_t at = 0;
    std::vector<int64_t> ids;
    for (const auto& t : tokens) {
      FUZZ_CHECK(t.begin == at && t.end >= t.begin && t.end <= text.size());  // [0, 0): a prefix space
      FUZZ_CHECK(t.id >= 0);
      at = t.end;
      ids.push_back(t.id);
      (void)bpe->token_bytes(t.id);
    }
    FUZZ_CHECK(at == text.size());
    (void)bpe->decode(ids);
  }
  (void)bpe->token_bytes(-1);
  (void)bpe->token_bytes(bpe->vocab_size() + 10);
  return 0;
}
