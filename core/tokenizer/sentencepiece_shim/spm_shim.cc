// pdserve_spm_shim: the C ABI of spm_shim.h over libsentencepiece. Built as a shared module
// without sanitizers (its link namespace has no sanitizer runtime) and loaded with dlmopen by
// core/tokenizer/sentencepiece_tokenizer.cc. Nothing here may throw across the ABI.
#include "core/tokenizer/sentencepiece_shim/spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#define PDSERVE_SPM_EXPORT extern "C" __attribute__((visibility("default")))

struct pdserve_spm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

void SetError(char* error, size_t error_size, const std::string& message) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = message.size() < error_size - 1 ? message.size() : error_size - 1;
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

PDSERVE_SPM_EXPORT int pdserve_spm_abi_version(void) { return PDSERVE_SPM_ABI_VERSION; }

PDSERVE_SPM_EXPORT pdserve_spm* pdserve_spm_load(const char* data, size_t size, char* error,
                                                 size_t error_size) {
  try {
    auto spm = std::make_unique<pdserve_spm>();
    const sentencepiece::util::Status status =
        spm->processor.LoadFromSerializedProto(std::string_view(data, size));
    if (!status.ok()) {
      SetError(error, error_size, status.ToString());
      return nullptr;
    }
    return spm.release();
  } catch (const std::exception& e) {
    SetError(error, error_size, std::string("libsentencepiece threw: ") + e.what());
  } catch (...) {
    SetError(error, error_size, "libsentencepiece threw an unknown exception");
  }
  return nullptr;
}

PDSERVE_SPM_EXPORT void pdserve_spm_free(pdserve_spm* spm) { delete spm; }

PDSERVE_SPM_EXPORT int pdserve_spm_piece_size(const pdserve_spm* spm) {
  return spm->processor.GetPieceSize();
}
PDSERVE_SPM_EXPORT int pdserve_spm_bos_id(const pdserve_spm* spm) {
  return spm->processor.bos_id();
}
PDSERVE_SPM_EXPORT int pdserve_spm_eos_id(const pdserve_spm* spm) {
  return spm->processor.eos_id();
}
PDSERVE_SPM_EXPORT int pdserve_spm_unk_id(const pdserve_spm* spm) {
  return spm->processor.unk_id();
}

PDSERVE_SPM_EXPORT void pdserve_spm_piece(const pdserve_spm* spm, int id, const char** data,
                                          size_t* size) {
  const std::string& piece = spm->processor.IdToPiece(id);
  *data = piece.data();
  *size = piece.size();
}

PDSERVE_SPM_EXPORT float pdserve_spm_score(const pdserve_spm* spm, int id) {
  return spm->processor.GetScore(id);
}

PDSERVE_SPM_EXPORT int pdserve_spm_piece_flags(const pdserve_spm* spm, int id) {
  const sentencepiece::SentencePieceProcessor& p = spm->processor;
  return (p.IsUnknown(id) ? PDSERVE_SPM_UNKNOWN : 0) | (p.IsControl(id) ? PDSERVE_SPM_CONTROL : 0) |
         (p.IsUnused(id) ? PDSERVE_SPM_UNUSED : 0) | (p.IsByte(id) ? PDSERVE_SPM_BYTE : 0);
}

PDSERVE_SPM_EXPORT int pdserve_spm_encode(const pdserve_spm* spm, const char* text, size_t size,
                                          int** ids, size_t* count, char* error,
                                          size_t error_size) {
  *ids = nullptr;
  *count = 0;
  try {
    std::vector<int> out;
    const sentencepiece::util::Status status =
        spm->processor.Encode(std::string_view(text, size), &out);
    if (!status.ok()) {
      SetError(error, error_size, status.ToString());
      return -1;
    }
    if (out.empty()) return 0;
    int* buffer = static_cast<int*>(std::malloc(out.size() * sizeof(int)));
    if (buffer == nullptr) {
      SetError(error, error_size, "out of memory");
      return -1;
    }
    std::memcpy(buffer, out.data(), out.size() * sizeof(int));
    *ids = buffer;
    *count = out.size();
    return 0;
  } catch (const std::exception& e) {
    SetError(error, error_size, std::string("libsentencepiece threw: ") + e.what());
  } catch (...) {
    SetError(error, error_size, "libsentencepiece threw an unknown exception");
  }
  return -1;
}

PDSERVE_SPM_EXPORT void pdserve_spm_free_ids(int* ids) { std::free(ids); }
