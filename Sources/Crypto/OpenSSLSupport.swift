import COpenSSL

/// Calls `body` with a pointer to the bytes of `bytes` and their count.
///
/// The pointer is never nil, even for an empty collection, because several
/// OpenSSL entry points treat a NULL buffer differently from an empty one
/// (HMAC with a NULL key, for one, means "reuse the previous key").
package func withBytePointer<R>(
    _ bytes: some Collection<UInt8>,
    _ body: (UnsafePointer<UInt8>, Int) -> R
) -> R {
    func call(_ buffer: UnsafeBufferPointer<UInt8>) -> R {
        if let base = buffer.baseAddress, !buffer.isEmpty {
            return body(base, buffer.count)
        }
        var zero: UInt8 = 0
        return withUnsafePointer(to: &zero) { body($0, 0) }
    }
    if let result = bytes.withContiguousStorageIfAvailable(call) {
        return result
    }
    return Array(bytes).withUnsafeBufferPointer(call)
}

/// Drains this thread's OpenSSL error queue into one line of text.
///
/// The text is for `debugDescription` only: it names OpenSSL internals, which
/// callers must not show to clients.
package func drainOpenSSLErrors() -> String {
    var messages: [String] = []
    // Bounded: the queue holds at most 16 entries.
    for _ in 0..<32 {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        messages.append(cString(buffer))
    }
    return messages.isEmpty ? "no OpenSSL error queued" : messages.joined(separator: "; ")
}

/// Text from a NUL-terminated C buffer, decoded as UTF-8.
func cString(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Reads everything a memory BIO holds as UTF-8 text.
func readAll(_ bio: OpaquePointer) -> String {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1024)
    // Ends when the BIO is empty; each pass consumes up to one chunk.
    while true {
        let count = BIO_read(bio, &chunk, Int32(chunk.count))
        if count <= 0 { break }
        bytes.append(contentsOf: chunk[0..<Int(count)])
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Reads an unencrypted PEM private key, or nil. No passphrase is ever
/// supplied, so an encrypted key is unreadable rather than a prompt on the
/// service's terminal. The caller clears OpenSSL's errors: their text may
/// quote the input.
func readPrivateKeyPEM(_ pem: String) -> OpaquePointer? {
    let bytes = Array(pem.utf8)
    return bytes.withUnsafeBufferPointer { buffer in
        guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
        defer { BIO_free(bio) }
        return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil)
    }
}

/// A private key as unencrypted PKCS#8 PEM.
func pkcs8PEM(of pkey: OpaquePointer) -> String {
    guard let bio = BIO_new(BIO_s_mem()) else { fatalError("BIO_new failed") }
    defer { BIO_free(bio) }
    precondition(PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1, "PEM_write_bio_PrivateKey failed")
    return readAll(bio)
}

/// Generates a key of `type` (`EVP_PKEY_EC`, `EVP_PKEY_RSA`), `configure`
/// setting its parameters on the keygen context; stops the process if
/// OpenSSL cannot, which a working OpenSSL never does.
func generateKey(_ type: Int32, _ what: String, configure: (OpaquePointer) -> Int32) -> OpaquePointer {
    var generated: OpaquePointer?
    let context = EVP_PKEY_CTX_new_id(type, nil)
    defer { EVP_PKEY_CTX_free(context) }
    guard let context,
          EVP_PKEY_keygen_init(context) == 1,
          configure(context) == 1,
          EVP_PKEY_keygen(context, &generated) == 1,
          let generated
    else {
        fatalError("\(what) key generation failed: \(drainOpenSSLErrors())")
    }
    return generated
}
