#pragma once
// The C interface of libmgtrain-sentencepiece.so, the one library that links SentencePiece.
// Debian's libsentencepiece carries its own copy of protobuf-lite (3.14) under protobuf's exported
// names, which clash with the libprotobuf (3.21) that ONNX export loads into the same process:
// SentencePiece then runs on the other version's code and aborts. datasets/tokenizer.cpp loads
// this library with dlopen and RTLD_DEEPBIND where libprotobuf is present, so SentencePiece binds
// to its own copy; nothing else in mgtrain includes SentencePiece's headers. Every function
// returns 0 on success, or -1 with *error set to a malloc'd message (freed with mgt_spm_free).
#include <cstddef>
#include <cstdint>

#define MGT_SPM_API __attribute__((visibility("default")))

extern "C" {

// Loads a serialized SentencePiece model; *model is released with mgt_spm_unload.
MGT_SPM_API int mgt_spm_load(const char* bytes, size_t size, void** model, char** error);
MGT_SPM_API void mgt_spm_unload(void* model);
MGT_SPM_API int64_t mgt_spm_vocab_size(const void* model);
// Token ids of `text` (no sentence boundaries added), malloc'd into *ids.
MGT_SPM_API int mgt_spm_encode(const void* model, const char* text, size_t size, int32_t** ids, size_t* count,
                               char** error);
// The text of `ids`, malloc'd into *text.
MGT_SPM_API int mgt_spm_decode(const void* model, const int32_t* ids, size_t count, char** text, size_t* size,
                               char** error);
// Trains a model from the sentences next_sentence hands over (returning 0 at the end) with the
// options as key=value entries, each ended by '\x1e' (a value may hold a
// newline); the serialized model malloc'd into *bytes.
typedef int (*mgt_spm_next_sentence)(void* state, const char** text, size_t* size);
MGT_SPM_API int mgt_spm_train(const char* options, mgt_spm_next_sentence next, void* state, char** bytes, size_t* size,
                              char** error);
MGT_SPM_API void mgt_spm_free(void* pointer);

typedef int (*mgt_spm_load_fn)(const char*, size_t, void**, char**);
typedef void (*mgt_spm_unload_fn)(void*);
typedef int64_t (*mgt_spm_vocab_size_fn)(const void*);
typedef int (*mgt_spm_encode_fn)(const void*, const char*, size_t, int32_t**, size_t*, char**);
typedef int (*mgt_spm_decode_fn)(const void*, const int32_t*, size_t, char**, size_t*, char**);
typedef int (*mgt_spm_train_fn)(const char*, mgt_spm_next_sentence, void*, char**, size_t*, char**);
typedef void (*mgt_spm_free_fn)(void*);
}
