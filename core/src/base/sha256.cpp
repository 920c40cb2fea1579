#include "base/sha256.hpp"

#include <openssl/evp.h>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// OpenSSL fails only for want of memory or a provider without SHA-256; say which call did.
void check(int ok, const char* call) {
  if (ok != 1) throw Error(std::string("SHA-256: OpenSSL's ") + call + " failed");
}

}  // namespace

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  check(ctx_ != nullptr, "EVP_MD_CTX_new");
  check(EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

void Sha256::update(const void* data, size_t bytes) {
  check(EVP_DigestUpdate(ctx_.get(), data, bytes), "EVP_DigestUpdate");
}

std::string Sha256::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  check(EVP_DigestFinal_ex(ctx_.get(), digest, &size), "EVP_DigestFinal_ex");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace mgt
