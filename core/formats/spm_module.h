// C API of the SentencePiece module (libdifflens_spm.so). SentencePiece bundles its own protobuf,
// which clashes with LibTorch's in one namespace (crash before main), so core loads this module
// with dlmopen(LM_ID_NEWLM). Only plain C types cross; every buffer belongs to the caller.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Returns a processor handle, or null with a message in `err`.
void* difflens_spm_open(const char* model_path, char* err, int err_capacity);
void difflens_spm_close(void* handle);
int difflens_spm_vocab_size(void* handle);
// which: 0 unk, 1 bos, 2 eos, 3 pad; -1 when the model has none.
int difflens_spm_special_id(void* handle, int which);
// Encodes `len` bytes; writes up to `capacity` ids and byte spans [begin, end) into the caller's arrays
// and returns the number of pieces (call again with more room when it exceeds capacity), or -1 with
// a message in `err`.
int difflens_spm_encode(void* handle, const char* text, int len, int32_t* ids, int32_t* begins, int32_t* ends,
                        int capacity, char* err, int err_capacity);
// Copies piece text of `id` (not NUL-terminated); returns its length (may exceed capacity), -1 if invalid.
int difflens_spm_piece(void* handle, int id, char* buffer, int capacity);
// Decodes ids to text; returns the text length (may exceed capacity), or -1 on error.
int difflens_spm_decode(void* handle, const int32_t* ids, int count, char* buffer, int capacity);

#ifdef __cplusplus
}
#endif
