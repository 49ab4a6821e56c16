#if canImport(Glibc)
import Glibc
#endif

/// The IMF-fixdate of RFC 9110 (`Sun, 06 Nov 1994 08:49:37 GMT`), for the
/// responses written without libmicrohttpd.
enum HTTPDate {
    static func now() -> String {
        var seconds = time(nil)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { buffer in
            // The C locale is in force unless the process changed it; the
            // format has no locale-dependent parts other than the names.
            let count = strftime(buffer.baseAddress, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
            return String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress, count: count), as: UTF8.self)
        }
    }
}
