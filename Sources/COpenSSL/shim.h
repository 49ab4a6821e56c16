#ifndef WALLET_COPENSSL_SHIM_H
#define WALLET_COPENSSL_SHIM_H
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/objects.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>

/* The STACK_OF(X509) accessors are function-like macros, which Swift cannot
 * call. These fixed-arity wrappers keep the element type checked by clang. */
static inline STACK_OF(X509) *COpenSSL_sk_X509_new_null(void) {
    return sk_X509_new_null();
}

static inline int COpenSSL_sk_X509_push(STACK_OF(X509) *stack, X509 *certificate) {
    return sk_X509_push(stack, certificate);
}

static inline int COpenSSL_sk_X509_num(const STACK_OF(X509) *stack) {
    return sk_X509_num(stack);
}

static inline X509 *COpenSSL_sk_X509_value(const STACK_OF(X509) *stack, int index) {
    return sk_X509_value(stack, index);
}

/* Frees the stack only; the certificates belong to their Swift owners. */
static inline void COpenSSL_sk_X509_free(STACK_OF(X509) *stack) {
    sk_X509_free(stack);
}

/* Composite flag macros do not import into Swift. */
static inline unsigned long COpenSSL_XN_FLAG_RFC2253(void) {
    return XN_FLAG_RFC2253;
}

/* The public-key selection for EVP_PKEY_fromdata (key parameters and the
 * public half), also a composite macro. */
static inline int COpenSSL_EVP_PKEY_PUBLIC_KEY(void) {
    return EVP_PKEY_PUBLIC_KEY;
}

/* TLS client settings that OpenSSL exposes as macros over SSL_ctrl. */
static inline int COpenSSL_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

static inline int COpenSSL_SSL_CTX_set_min_proto_version(SSL_CTX *context, int version) {
    return (int)SSL_CTX_set_min_proto_version(context, version);
}

#endif
