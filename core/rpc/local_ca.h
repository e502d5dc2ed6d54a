// A throwaway certificate authority for a cluster on one machine: `pdserve up` makes one for its
// processes unless given certificates of its own, and tests make them. Keys are EC P-256;
// certificates are valid from a minute ago for 30 days, for both server and client use, with the
// role as subject common name and subjectAltName IP:127.0.0.1, IP:::1, DNS:localhost and
// DNS:<role>.pdserve.internal (ComponentServerName).
#ifndef PDSERVE_CORE_RPC_LOCAL_CA_H_
#define PDSERVE_CORE_RPC_LOCAL_CA_H_

#include <string>

#include "absl/status/status.h"
#include "core/rpc/tls.h"

namespace pdserve {

// Creates the directory `dir` (mode 0700; InvalidArgument when it exists) and writes into it
// ca.pem (the CA's certificate; its key is never written) and, for every ComponentRole,
// <role>.pem and <role>-key.pem (mode 0600). Internal on an OpenSSL failure.
absl::Status WriteLocalCa(const std::string& dir);

// The files WriteLocalCa wrote for `role` in `dir`.
TlsFiles LocalCaFiles(const std::string& dir, ComponentRole role);

}  // namespace pdserve

#endif  // PDSERVE_CORE_RPC_LOCAL_CA_H_
