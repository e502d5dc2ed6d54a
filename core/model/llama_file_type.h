// llama.cpp's general.file_type (llama_ftype): the type most of a GGUF file's matrices have.
#ifndef PDSERVE_CORE_MODEL_LLAMA_FILE_TYPE_H_
#define PDSERVE_CORE_MODEL_LLAMA_FILE_TYPE_H_

#include <cstdint>

#include "core/tensor/dtype.h"

namespace pdserve {

// The llama_ftype of a file whose matrices are mostly `dtype` (Q4_K and Q5_K: the _M mixtures).
uint32_t LlamaFileType(DType dtype);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_LLAMA_FILE_TYPE_H_
