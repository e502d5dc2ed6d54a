// UCX introspection for reports and the shared-memory check: which transports a ucp context
// opened and which lanes a ucp endpoint uses for what, parsed from UCX's own print_info reports
// (UCX 1.13 has no query API for either). The parsers are pure functions, tested on captured text.
// Thread-safe: no shared state.
#ifndef PDSERVE_CORE_TRANSPORT_UCX_INFO_H_
#define PDSERVE_CORE_TRANSPORT_UCX_INFO_H_

#include <ucp/api/ucp.h>

#include <string>
#include <vector>

namespace pdserve {

struct UcxContextResources {
  std::vector<std::string> transports;  // deduplicated, UCX's order: "self", "tcp", "posix"
  std::vector<std::string> resources;   // with devices: "self/memory0", "tcp/lo", "tcp/eth0"
};
// Parses "resource N : md N dev N flags -- tcp/lo" lines of ucp_context_print_info.
UcxContextResources ParseUcxContextResources(const std::string& context_info);
UcxContextResources ReadUcxContextResources(ucp_context_h context);

struct UcxLane {
  std::string transport;           // "tcp/lo", "posix/memory", "cma/memory"
  std::vector<std::string> roles;  // "am", "am_bw", "rma" (has put/get protocols), "wireup", ...
};
// Parses the "lane[N]: ..." and "put[N]: ..."/"get[N]: ..." lines of ucp_ep_print_info.
std::vector<UcxLane> ParseUcxEndpointLanes(const std::string& ep_info);
// ucp_ep_print_info captured into a string.
std::string PrintUcxEndpoint(ucp_ep_h ep);

// The transports an endpoint moves RMA bytes over: lanes with the rma role or, when there are
// none (UCX emulates RMA with active messages), the am/am_bw lanes. Deduplicated.
std::vector<std::string> UcxRmaTransports(const std::vector<UcxLane>& lanes);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TRANSPORT_UCX_INFO_H_
