// The wire form of sampling parameters (pdserve.v1.SamplingParams) to the engine's. One rule lives
// here: top_p 0 on the wire means unset, i.e. 1.0. Validation stays with the caller
// (SamplingParams::Validate).
#ifndef PDSERVE_SERVICES_COMMON_SAMPLING_PROTO_H_
#define PDSERVE_SERVICES_COMMON_SAMPLING_PROTO_H_

#include "core/engine/sampler.h"
#include "pdserve/v1/common.pb.h"

namespace pdserve {

SamplingParams SamplingFromProto(const v1::SamplingParams& wire);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_SAMPLING_PROTO_H_
