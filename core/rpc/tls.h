// TLS for pdserve's gRPC and HTTP endpoints, and the roles of its components.
//
// Every component has a certificate whose subject common name is its role — router, prefill,
// decode, kvstore, or operator (`pdserve up` and admin tools) — signed by the cluster's CA. A
// server presents its certificate and verifies a client's against the CA when the client presents
// one (public clients of the router present none: API keys authenticate them); each internal RPC
// then requires its caller's role (RequirePeerRole). Clients verify servers against the CA.
//
// A process runs with one identity, set once at startup by the command that runs its role
// (SetProcessTls) before any server or channel exists; ServiceServer, HttpServer and
// MakeInternalChannel use it. Until then, and with --insecure, it is plaintext.
#ifndef PDSERVE_CORE_RPC_TLS_H_
#define PDSERVE_CORE_RPC_TLS_H_

#include <grpcpp/grpcpp.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pdserve {

enum class ComponentRole { kRouter, kPrefill, kDecode, kKvStore, kOperator };
inline constexpr ComponentRole kComponentRoles[] = {ComponentRole::kRouter, ComponentRole::kPrefill,
                                                    ComponentRole::kDecode, ComponentRole::kKvStore,
                                                    ComponentRole::kOperator};

// "router", "prefill", "decode", "kvstore", "operator".
const char* ComponentRoleName(ComponentRole role);
// "<role>.pdserve.internal": the DNS name (a subject alternative name) every certificate of a
// serving role carries besides its hosts. Internal channels verify it instead of the address they
// dial — components reach each other by pod or node IP, which a role's certificate cannot list —
// so a peer proves its role under the CA, not its host (MakeInternalChannel).
std::string ComponentServerName(ComponentRole role);
std::optional<ComponentRole> ParseComponentRole(std::string_view name);

// PEM file paths. `ca` verifies peers; `cert` and `key` are this side's identity (both or neither:
// a client with only `ca` verifies servers and presents nothing).
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
};

class Tls {
 public:
  // Plaintext.
  static std::shared_ptr<const Tls> Insecure();
  // Reads and checks `files`: InvalidArgument naming the flag (--tls-cert, --tls-key, --tls-ca)
  // when a file cannot be read or parsed, the key does not match the certificate, the certificate
  // is not valid now under the CA, or its common name is not `expected_role` (when given), or a
  // serving role's certificate lacks ComponentServerName(role).
  static absl::StatusOr<std::shared_ptr<const Tls>> Load(
      const TlsFiles& files, std::optional<ComponentRole> expected_role = std::nullopt);

  bool enabled() const { return enabled_; }
  // The role in this side's certificate; nullopt when plaintext or without one.
  std::optional<ComponentRole> role() const { return role_; }
  const TlsFiles& files() const { return files_; }

  // TLS with the CA verifying client certificates when presented (plaintext: insecure).
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  // TLS verifying the server against the CA, presenting this side's certificate when it has one.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

 private:
  Tls() = default;

  bool enabled_ = false;
  TlsFiles files_;
  std::string cert_pem_, key_pem_, ca_pem_;
  std::optional<ComponentRole> role_;
};

void SetProcessTls(std::shared_ptr<const Tls> tls);
const Tls& ProcessTls();

// OK when the call came over TLS from a client certificate of one of `allowed` — or did not come
// over TLS at all (a plaintext server, or an in-process channel). Otherwise UNAUTHENTICATED
// without a client certificate, PERMISSION_DENIED for another role, naming both.
grpc::Status RequirePeerRole(const grpc::ServerContext& context,
                             std::initializer_list<ComponentRole> allowed);
// Whether the call came over TLS with a verified client certificate of a pdserve component.
bool PeerIsComponent(const grpc::ServerContext& context);

}  // namespace pdserve

#endif  // PDSERVE_CORE_RPC_TLS_H_
