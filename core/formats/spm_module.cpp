// The SentencePiece module: a thin C wrapper over sentencepiece::SentencePieceProcessor, built as a
// MODULE library with no LibTorch in it (see spm_module.h for why).
#include "core/formats/spm_module.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

void put_error(const std::string& msg, char* err, int cap) {
  if (!err || cap <= 0) return;
  const size_t n = std::min(msg.size(), static_cast<size_t>(cap - 1));
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

int copy_out(const std::string& s, char* buffer, int capacity) {
  if (buffer && capacity > 0)
    std::memcpy(buffer, s.data(), std::min(s.size(), static_cast<size_t>(capacity)));
  return static_cast<int>(s.size());
}

}  // namespace

extern "C" {

void* difflens_spm_open(const char* model_path, char* err, int err_capacity) {
  try {
    auto* sp = new sentencepiece::SentencePieceProcessor();
    const auto status = sp->Load(model_path);
    if (!status.ok()) {
      put_error(status.ToString(), err, err_capacity);
      delete sp;
      return nullptr;
    }
    return sp;
  } catch (const std::exception& e) {
    put_error(e.what(), err, err_capacity);
    return nullptr;
  }
}

void difflens_spm_close(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

int difflens_spm_vocab_size(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

int difflens_spm_special_id(void* handle, int which) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  switch (which) {
    case 0:
      return sp->unk_id();
    case 1:
      return sp->bos_id();
    case 2:
      return sp->eos_id();
    case 3:
      return sp->pad_id();
  }
  return -1;
}

int difflens_spm_encode(void* handle, const char* text, int len, int32_t* ids, int32_t* begins, int32_t* ends,
                        int capacity, char* err, int err_capacity) {
  try {
    auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
    sentencepiece::ImmutableSentencePieceText spt;
    const auto status = sp->Encode(absl::string_view(text, static_cast<size_t>(len)), spt.mutable_proto());
    if (!status.ok()) {
      put_error(status.ToString(), err, err_capacity);
      return -1;
    }
    const int n = static_cast<int>(spt.pieces_size());
    for (int i = 0; i < n && i < capacity; ++i) {
      const auto piece = spt.pieces(i);
      ids[i] = static_cast<int32_t>(piece.id());
      begins[i] = static_cast<int32_t>(piece.begin());
      ends[i] = static_cast<int32_t>(piece.end());
    }
    return n;
  } catch (const std::exception& e) {
    put_error(e.what(), err, err_capacity);
    return -1;
  }
}

int difflens_spm_piece(void* handle, int id, char* buffer, int capacity) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  if (id < 0 || id >= sp->GetPieceSize()) return -1;
  return copy_out(sp->IdToPiece(id), buffer, capacity);
}

int difflens_spm_decode(void* handle, const int32_t* ids, int count, char* buffer, int capacity) {
  try {
    auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
    std::vector<int> v(ids, ids + count);
    for (int id : v)
      if (id < 0 || id >= sp->GetPieceSize()) return -1;
    std::string out;
    if (!sp->Decode(v, &out).ok()) return -1;
    return copy_out(out, buffer, capacity);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // extern "C"
