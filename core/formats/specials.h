// Special tokens in a text: matched, or read as text (Tokenizer::encode, ByteLevelBpe::encode).
#pragma once

namespace difflens {

// How special tokens written in a text are read: matched (their ids; tiktoken's encode(text,
// allowed_special="all"), what Hugging Face tokenizers always does) or as the text they are (tiktoken's
// encode_ordinary; Hugging Face's encode_special_tokens): a document about tokenizers, or one that must
// not forge a document boundary. Only tokens marked special are affected; other added tokens still match.
enum class Specials { match, text };

}  // namespace difflens
