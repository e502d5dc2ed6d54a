// The C ABI of pdserve_spm_shim, a shared module that wraps libsentencepiece.
//
// Debian's libsentencepiece.so.0 exports its builtin copy of protobuf-lite 3.14, which collides
// with the libprotobuf 3.21 the gRPC services link. core/tokenizer/sentencepiece_tokenizer.cc
// therefore loads this module with dlmopen(LM_ID_NEWLM), in a link namespace of its own (with its
// own libc and libstdc++), and reaches it only through these functions: only C types cross, no
// exception escapes, and memory the module allocates is freed by the module.
#ifndef PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_SHIM_SPM_SHIM_H_
#define PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_SHIM_SPM_SHIM_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDSERVE_SPM_ABI_VERSION 1

// Bits of pdserve_spm_piece_flags.
#define PDSERVE_SPM_UNKNOWN 1
#define PDSERVE_SPM_CONTROL 2
#define PDSERVE_SPM_UNUSED 4
#define PDSERVE_SPM_BYTE 8

typedef struct pdserve_spm pdserve_spm;

// PDSERVE_SPM_ABI_VERSION of the module.
int pdserve_spm_abi_version(void);

// Loads a serialized ModelProto. Returns a processor to release with pdserve_spm_free, or null
// with a NUL-terminated message in `error` (truncated to `error_size` bytes).
pdserve_spm* pdserve_spm_load(const char* data, size_t size, char* error, size_t error_size);
void pdserve_spm_free(pdserve_spm* spm);

int pdserve_spm_piece_size(const pdserve_spm* spm);
int pdserve_spm_bos_id(const pdserve_spm* spm);
int pdserve_spm_eos_id(const pdserve_spm* spm);
int pdserve_spm_unk_id(const pdserve_spm* spm);

// The piece of `id` (0 <= id < piece_size): its bytes, owned by `spm`, in *data / *size.
void pdserve_spm_piece(const pdserve_spm* spm, int id, const char** data, size_t* size);
float pdserve_spm_score(const pdserve_spm* spm, int id);
// PDSERVE_SPM_* bits of `id`.
int pdserve_spm_piece_flags(const pdserve_spm* spm, int id);

// Encodes `text` into ids. Returns 0 and an array to release with pdserve_spm_free_ids in *ids /
// *count (null / 0 when empty), or -1 with a message in `error`. Safe from many threads at once.
int pdserve_spm_encode(const pdserve_spm* spm, const char* text, size_t size, int** ids,
                       size_t* count, char* error, size_t error_size);
void pdserve_spm_free_ids(int* ids);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_SHIM_SPM_SHIM_H_
