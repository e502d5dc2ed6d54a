// Conversion between absl::Status (pdserve's error currency) and grpc::Status (the wire). Codes
// map one to one; messages are kept.
#ifndef PDSERVE_SERVICES_COMMON_GRPC_STATUS_H_
#define PDSERVE_SERVICES_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pdserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_GRPC_STATUS_H_
