#pragma once
// SHA-256 (FIPS 180-4), for the parameter hashes `mgtrain verify` prints: a digest anyone can
// recompute with sha256sum from the checkpoint's raw datasets. OpenSSL's libcrypto computes it
// (libmgtrain already loads it through HDF5's dependencies); its headers stay out of this one.
#include <cstddef>
#include <memory>
#include <string>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace mgt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex_digest();  // finishes the hash

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

}  // namespace mgt
