// TLS for pt2serve's HTTP front, from PEM text read once at start (gRPC takes the same text).
#pragma once

#include <openssl/ssl.h>

#include "http_server.h"

namespace pt2serve {

// A server context: TLS 1.2 or newer, no renegotiation, the certificate (chain) and its key, and with client CAs
// clients must present a certificate one of them signed. Throws std::runtime_error saying what is wrong.
SSL_CTX* make_tls_context(const ListenOptions::Tls& tls);
// Throws as make_tls_context() would (a start checks the material before loading models).
void check_tls(const ListenOptions::Tls& tls);

}  // namespace pt2serve
