// The pdserve CLI's subcommands. Each reads its flags (tools/cli_flags.h), writes results to stdout
// and logs to stderr, and returns a status that main turns into one error line and exit code 1.
#ifndef PDSERVE_TOOLS_COMMANDS_H_
#define PDSERVE_TOOLS_COMMANDS_H_

#include "absl/status/status.h"

namespace pdserve::cli {

absl::Status RunGenerate();
absl::Status RunEval();
absl::Status RunBench();
absl::Status RunMakeModel();
absl::Status RunConvert();
absl::Status RunQuantize();
absl::Status RunTokenize();
absl::Status RunCalibrate();
absl::Status RunKvStoreCommand();
absl::Status RunPrefillCommand();
absl::Status RunDecodeCommand();
absl::Status RunRouterCommand();
absl::Status RunUp();
absl::Status RunMakeCerts();
absl::Status RunClient();
absl::Status RunLoadgen();

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_COMMANDS_H_
