#include "tls.h"

#include <stdexcept>

#include <openssl/err.h>
#include <openssl/pem.h>

namespace pt2serve {
namespace {

std::string ssl_error() {
  const unsigned long e = ERR_get_error();
  char text[256] = "unknown error";
  if (e) ERR_error_string_n(e, text, sizeof text);
  ERR_clear_error();
  return text;
}

// PEM text as OpenSSL reads it; freed with the scope.
struct PemBio {
  explicit PemBio(const std::string& pem) : bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))) {
    if (!bio) throw std::runtime_error("OpenSSL: " + ssl_error());
  }
  ~PemBio() { BIO_free(bio); }
  BIO* bio;
};

// The certificate, then its chain; the key; the client CAs (mutual TLS) - all from PEM text.
// A PEM file read to its end: the last read failed for want of another PEM block, and nothing else went wrong (a
// damaged block further down fails the whole file, as OpenSSL's own file readers do).
bool read_to_the_end() {
  const unsigned long e = ERR_peek_last_error();
  if (ERR_GET_LIB(e) != ERR_LIB_PEM || ERR_GET_REASON(e) != PEM_R_NO_START_LINE) return false;
  ERR_clear_error();
  return true;
}

void use_tls_material(SSL_CTX* ctx, const ListenOptions::Tls& tls) {
  {
    PemBio in(tls.cert);
    X509* cert = PEM_read_bio_X509_AUX(in.bio, nullptr, nullptr, nullptr);
    const bool used = cert && SSL_CTX_use_certificate(ctx, cert) == 1;
    X509_free(cert);
    bool chain = used;
    while (chain) {
      X509* ca = PEM_read_bio_X509(in.bio, nullptr, nullptr, nullptr);
      if (!ca) {
        chain = read_to_the_end();
        break;
      }
      chain = SSL_CTX_add0_chain_cert(ctx, ca) == 1;
      if (!chain) X509_free(ca);
    }
    if (!used || !chain) {
      throw std::runtime_error("cannot use the TLS certificate (chain) (not PEM certificates): " + ssl_error());
    }
    PemBio key_in(tls.key);
    // an encrypted key is refused, not asked for on a terminal
    pem_password_cb* no_password = [](char*, int, int, void*) { return 0; };
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_in.bio, nullptr, no_password, nullptr);
    const bool key_used = key && SSL_CTX_use_PrivateKey(ctx, key) == 1;
    EVP_PKEY_free(key);
    if (!key_used || SSL_CTX_check_private_key(ctx) != 1) {
      throw std::runtime_error("cannot use the TLS certificate and key (not PEM, or the key is not the "
                               "certificate's): " + ssl_error());
    }
  }
  if (tls.client_ca.empty()) return;
  PemBio in(tls.client_ca);
  STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int read = 0;
  bool whole = names != nullptr;
  while (whole) {
    X509* ca = PEM_read_bio_X509(in.bio, nullptr, nullptr, nullptr);
    if (!ca) {
      whole = read_to_the_end();
      break;
    }
    ++read;
    X509_NAME* name = X509_NAME_dup(X509_get_subject_name(ca));
    whole = name && X509_STORE_add_cert(store, ca) == 1 && sk_X509_NAME_push(names, name) > 0;
    X509_free(ca);
    if (!whole) X509_NAME_free(name);
  }
  if (read == 0 || !whole) {
    if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
    throw std::runtime_error("cannot use the TLS client CA file (not PEM certificates): " + ssl_error());
  }
  SSL_CTX_set_client_CA_list(ctx, names);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

}  // namespace

SSL_CTX* make_tls_context(const ListenOptions::Tls& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) throw std::runtime_error("OpenSSL: " + ssl_error());
  try {
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    use_tls_material(ctx, tls);
  } catch (...) {
    SSL_CTX_free(ctx);
    throw;
  }
  return ctx;
}


void check_tls(const ListenOptions::Tls& tls) { SSL_CTX_free(make_tls_context(tls)); }

}  // namespace pt2serve
