// Owning handles for the OpenSSL objects core/rpc creates: each frees its object with OpenSSL's
// own function when it goes out of scope. Internal to core/rpc.
#ifndef PDSERVE_CORE_RPC_OPENSSL_HANDLES_H_
#define PDSERVE_CORE_RPC_OPENSSL_HANDLES_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

namespace pdserve::openssl {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct StoreFree {
  void operator()(X509_STORE* store) const { X509_STORE_free(store); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* ctx) const { X509_STORE_CTX_free(ctx); }
};

using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Store = std::unique_ptr<X509_STORE, StoreFree>;
using StoreCtx = std::unique_ptr<X509_STORE_CTX, StoreCtxFree>;

}  // namespace pdserve::openssl

#endif  // PDSERVE_CORE_RPC_OPENSSL_HANDLES_H_
