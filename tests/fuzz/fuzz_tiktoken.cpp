// Fuzz target: tiktoken rank files (`.tiktoken`, one "BASE64-TOKEN RANK" line a token). What loads must
// encode any bytes so that every byte lands in exactly one token and the tokens decode to the input.
#include "core/formats/bpe.h"
#include "core/formats/error.h"
#include "core/formats/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  const std::string all(reinterpret_cast<const char*>(data), size);
  // The file, then after a NUL byte (if any) a text to encode with it.
  const size_t cut = all.find('\0');
  const std::string file = all.substr(0, cut),
                    text = cut == std::string::npos ? "hi there" : all.substr(cut + 1);
  std::shared_ptr<const ByteLevelBpe> bpe;
  try {
    bpe = ByteLevelBpe::from_tiktoken(file, "fuzz.tiktoken", Tokenizer::cl100k_split_pattern(), {}, 300);
  } catch (const Error&) {
    return 0;
  }
  std::vector<ByteLevelBpe::Token> tokens;
  try {
    tokens = bpe->encode(text);
  } catch (const Error&) {
    return 0;  // a rank file without every byte refuses a text that needs the missing one
  }
  size_t at = 0;
  std::vector<int64_t> ids;
  for (const auto& t : tokens) {
    FUZZ_CHECK(t.begin == at && t.end > t.begin);
    at = t.end;
    ids.push_back(t.id);
  }
  FUZZ_CHECK(at == text.size());
  FUZZ_CHECK(bpe->decode(ids) == text);
  return 0;
}
