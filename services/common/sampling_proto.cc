#include "services/common/sampling_proto.h"

namespace pdserve {

SamplingParams SamplingFromProto(const v1::SamplingParams& wire) {
  SamplingParams sampling;
  sampling.temperature = wire.temperature();
  sampling.top_p = wire.top_p() == 0.0f ? 1.0f : wire.top_p();
  sampling.top_k = wire.top_k();
  sampling.seed = wire.seed();
  return sampling;
}

}  // namespace pdserve
