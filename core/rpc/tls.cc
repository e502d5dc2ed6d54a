#include "core/rpc/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/openssl_handles.h"

namespace pdserve {
namespace {

using openssl::Bio;
using openssl::Cert;

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem`, in order; InvalidArgument naming `flag` when there is none.
absl::StatusOr<std::vector<Cert>> ParseCerts(const std::string& pem, const std::string& path,
                                             const char* flag) {
  std::vector<Cert> certs;
  Bio bio = MemoryBio(pem);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the end of the input reads as an error
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' holds no PEM certificate"));
  }
  return certs;
}

std::string CommonName(X509* cert) {
  char name[256] = {};
  const int size =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, sizeof(name));
  return size > 0 ? std::string(name, static_cast<size_t>(size)) : std::string();
}

std::shared_ptr<const Tls>& ProcessTlsSlot() {
  static std::shared_ptr<const Tls> tls = Tls::Insecure();
  return tls;
}

bool CallIsTls(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return false;
  for (const grpc::string_ref& type : auth->FindPropertyValues("transport_security_type")) {
    if (type == "ssl") return true;
  }
  return false;
}

// The role in the call's verified client certificate, or nullopt (none, or not a role).
std::optional<std::string> PeerCommonName(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  const std::vector<grpc::string_ref> names = auth->FindPropertyValues("x509_common_name");
  if (names.empty()) return std::nullopt;
  return std::string(names.front().data(), names.front().size());
}

}  // namespace

const char* ComponentRoleName(ComponentRole role) {
  switch (role) {
    case ComponentRole::kRouter:
      return "router";
    case ComponentRole::kPrefill:
      return "prefill";
    case ComponentRole::kDecode:
      return "decode";
    case ComponentRole::kKvStore:
      return "kvstore";
    case ComponentRole::kOperator:
      return "operator";
  }
  return "?";
}

std::optional<ComponentRole> ParseComponentRole(std::string_view name) {
  for (ComponentRole role : kComponentRoles) {
    if (std::string_view(ComponentRoleName(role)) == name) return role;
  }
  return std::nullopt;
}

std::string ComponentServerName(ComponentRole role) {
  return absl::StrCat(ComponentRoleName(role), ".pdserve.internal");
}

std::shared_ptr<const Tls> Tls::Insecure() { return std::shared_ptr<const Tls>(new Tls()); }

absl::StatusOr<std::shared_ptr<const Tls>> Tls::Load(const TlsFiles& files,
                                                     std::optional<ComponentRole> expected_role) {
  if (files.ca.empty()) return absl::InvalidArgumentError("TLS needs --tls-ca");
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key come together");
  }
  if (expected_role.has_value() && files.cert.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", ComponentRoleName(*expected_role), " needs --tls-cert and --tls-key"));
  }
  auto tls = std::shared_ptr<Tls>(new Tls());
  tls->enabled_ = true;
  tls->files_ = files;
  auto ca_pem = ReadPem(files.ca, "--tls-ca");
  if (!ca_pem.ok()) return ca_pem.status();
  tls->ca_pem_ = *std::move(ca_pem);
  auto cas = ParseCerts(tls->ca_pem_, files.ca, "--tls-ca");
  if (!cas.ok()) return cas.status();
  if (files.cert.empty()) return std::shared_ptr<const Tls>(std::move(tls));

  auto cert_pem = ReadPem(files.cert, "--tls-cert");
  if (!cert_pem.ok()) return cert_pem.status();
  tls->cert_pem_ = *std::move(cert_pem);
  auto key_pem = ReadPem(files.key, "--tls-key");
  if (!key_pem.ok()) return key_pem.status();
  tls->key_pem_ = *std::move(key_pem);
  auto chain = ParseCerts(tls->cert_pem_, files.cert, "--tls-cert");
  if (!chain.ok()) return chain.status();
  X509* cert = chain->front().get();
  Bio key_bio = MemoryBio(tls->key_pem_);
  openssl::Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key '", files.key, "' holds no PEM private key"));
  }
  if (X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key '", files.key, "' is not the key of --tls-cert '", files.cert, "'"));
  }

  openssl::Store store(X509_STORE_new());
  for (const Cert& ca : *cas) X509_STORE_add_cert(store.get(), ca.get());
  openssl::StoreCtx ctx(X509_STORE_CTX_new());
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < chain->size(); ++i) sk_X509_push(untrusted, (*chain)[i].get());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert, untrusted);
  const bool verified = X509_verify_cert(ctx.get()) == 1;
  const int error = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_free(untrusted);
  ERR_clear_error();
  if (!verified) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert '", files.cert,
                                                   "' does not verify under --tls-ca '", files.ca,
                                                   "': ", X509_verify_cert_error_string(error)));
  }

  const std::string name = CommonName(cert);
  tls->role_ = ParseComponentRole(name);
  if (expected_role.has_value() && tls->role_ != expected_role) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert '", files.cert, "' is a certificate of '", name, "', not of a ",
        ComponentRoleName(*expected_role), " (its subject common name must be the role)"));
  }
  if (expected_role.has_value() && *expected_role != ComponentRole::kOperator) {
    const std::string server_name = ComponentServerName(*expected_role);
    const bool named =
        X509_check_host(cert, server_name.data(), server_name.size(), 0, nullptr) == 1;
    ERR_clear_error();
    if (!named) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls-cert '", files.cert, "' does not name ", server_name, ": every ", name,
          " certificate needs that DNS subject alternative name (peers verify it "
          "instead of the address they dial)"));
    }
  }
  return std::shared_ptr<const Tls>(std::move(tls));
}

std::shared_ptr<grpc::ServerCredentials> Tls::ServerCredentials() const {
  if (!enabled_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> Tls::ChannelCredentials() const {
  if (!enabled_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem_;
  options.pem_private_key = key_pem_;
  options.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(options);
}

void SetProcessTls(std::shared_ptr<const Tls> tls) { ProcessTlsSlot() = std::move(tls); }

const Tls& ProcessTls() { return *ProcessTlsSlot(); }

grpc::Status RequirePeerRole(const grpc::ServerContext& context,
                             std::initializer_list<ComponentRole> allowed) {
  if (!CallIsTls(context)) return grpc::Status::OK;
  std::string roles;
  for (ComponentRole role : allowed) {
    absl::StrAppend(&roles, roles.empty() ? "" : " or ", ComponentRoleName(role));
  }
  const std::optional<std::string> name = PeerCommonName(context);
  if (!name.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("this RPC takes calls from a ", roles,
                                     " only, with its client certificate; the caller has none"));
  }
  const std::optional<ComponentRole> role = ParseComponentRole(*name);
  for (ComponentRole ok : allowed) {
    if (role == ok) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("this RPC takes calls from a ", roles,
                                   " only; the caller's certificate is of '", *name, "'"));
}

bool PeerIsComponent(const grpc::ServerContext& context) {
  if (!CallIsTls(context)) return false;
  const std::optional<std::string> name = PeerCommonName(context);
  return name.has_value() && ParseComponentRole(*name).has_value();
}

}  // namespace pdserve
