#include "core/rpc/local_ca.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/rpc/openssl_handles.h"

namespace pdserve {
namespace {

using openssl::Bio;
using openssl::Cert;
using openssl::Key;

absl::Status OpenSslError(const char* what) {
  const unsigned long code = ERR_get_error();
  char text[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat("local CA: ", what, ": ", text));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (extension == nullptr) return false;
  const bool added = X509_add_ext(cert, extension, -1) == 1;
  X509_EXTENSION_free(extension);
  return added;
}

// A certificate for `key` named `common_name`, signed by `issuer_key` (`issuer` null: self-signed);
// a component's (not is_ca) also carries `alt_names` (subjectAltName syntax).
absl::StatusOr<Cert> MakeCert(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                              EVP_PKEY* issuer_key, bool is_ca, const std::string& alt_names = "") {
  Cert cert(X509_new());
  unsigned char serial[16];
  if (cert == nullptr || RAND_bytes(serial, sizeof(serial)) != 1) {
    return OpenSslError("new certificate");
  }
  serial[0] &= 0x7f;  // positive
  BIGNUM* number = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(number, X509_get_serialNumber(cert.get()));
  BN_free(number);
  X509_set_version(cert.get(), 2);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 30L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("pdserve local cluster"), -1,
                             -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  const bool extensions =
      is_ca ? AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE") &&
                  AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign")
            : AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE") &&
                  AddExtension(cert.get(), signer, NID_key_usage,
                               "critical,digitalSignature,keyAgreement") &&
                  AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth") &&
                  AddExtension(cert.get(), signer, NID_subject_alt_name, alt_names.c_str());
  if (!extensions) return OpenSslError("certificate extensions");
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("signing");
  return cert;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Writes `write`'s PEM output to `path` with `mode`.
template <typename Write>
absl::Status WritePem(const std::string& path, mode_t mode, Write write) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || !write(bio.get())) return OpenSslError("PEM encoding");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("local CA: cannot create ", path, ": ", std::strerror(errno)));
  }
  const bool written = WriteAll(fd, data, static_cast<size_t>(size));
  close(fd);
  if (!written) return absl::InternalError(absl::StrCat("local CA: cannot write ", path));
  return absl::OkStatus();
}

Key NewKey() { return Key(EVP_EC_gen("P-256")); }

absl::Status WriteCert(const std::string& path, X509* cert) {
  return WritePem(path, 0644, [cert](BIO* bio) { return PEM_write_bio_X509(bio, cert) == 1; });
}

absl::Status WriteKey(const std::string& path, EVP_PKEY* key) {
  return WritePem(path, 0600, [key](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  });
}

}  // namespace

TlsFiles LocalCaFiles(const std::string& dir, ComponentRole role) {
  const std::string name(ComponentRoleName(role));
  return TlsFiles{absl::StrCat(dir, "/", name, ".pem"), absl::StrCat(dir, "/", name, "-key.pem"),
                  absl::StrCat(dir, "/ca.pem")};
}

absl::Status WriteLocalCa(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local CA: cannot create the directory ", dir, ": ", std::strerror(errno)));
  }
  Key ca_key = NewKey();
  if (ca_key == nullptr) return OpenSslError("CA key");
  absl::StatusOr<Cert> ca = MakeCert(ca_key.get(), "pdserve local CA", nullptr, ca_key.get(),
                                     /*is_ca=*/true);
  if (!ca.ok()) return ca.status();
  if (absl::Status s = WriteCert(absl::StrCat(dir, "/ca.pem"), ca->get()); !s.ok()) return s;
  for (ComponentRole role : kComponentRoles) {
    Key key = NewKey();
    if (key == nullptr) return OpenSslError("key");
    absl::StatusOr<Cert> cert = MakeCert(
        key.get(), std::string(ComponentRoleName(role)), ca->get(), ca_key.get(), /*is_ca=*/false,
        absl::StrCat("IP:127.0.0.1,IP:::1,DNS:localhost,DNS:", ComponentServerName(role)));
    if (!cert.ok()) return cert.status();
    const TlsFiles files = LocalCaFiles(dir, role);
    if (absl::Status s = WriteCert(files.cert, cert->get()); !s.ok()) return s;
    if (absl::Status s = WriteKey(files.key, key.get()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace pdserve
