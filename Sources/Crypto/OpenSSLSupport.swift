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
