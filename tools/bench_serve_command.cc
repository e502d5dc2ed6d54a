// `pdserve bench-serve`: placeholder until the serving benchmark lands.
#include "absl/status/status.h"
#include "tools/commands.h"

namespace pdserve::cli {

absl::Status RunBenchServe() { return absl::UnimplementedError("bench-serve is being written"); }

}  // namespace pdserve::cli
