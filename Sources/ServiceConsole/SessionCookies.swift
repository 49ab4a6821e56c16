import Crypto
import Locking
package import WalletStore

/// The console's session cookie: the session's random id and a MAC of it,
/// `<id>.<tag>`, with `tag` = base64url(HMAC-SHA256(key, "wallet console
/// session " + id)).
///
/// The tag is what keeps made-up cookies away from PostgreSQL: a cookie the
/// console did not issue fails it on the server thread, in a microsecond,
/// and is sent to the sign-in form without any database work. A good tag
/// proves only that some instance issued the id; the session itself (live,
/// not expired, its key still an admin's) is still looked up.
///
/// The key is read from the database once the schema is up (every instance
/// the same one, `wallet.console_cookie_keys`); until then no cookie can be
/// checked or issued.
package final class SessionCookies: Sendable {
    /// Base64url of 32 bytes, without padding.
    static let partCharacters = 43
    static let valueCharacters = 2 * partCharacters + 1
    private static let separator = UInt8(ascii: ".")
    private static let context = Array("wallet console session ".utf8)

    private let key = Locked<ConsoleCookieKey?>(nil)

    package init() {}

    /// Whether the key is loaded, so cookies can be checked and issued.
    var isReady: Bool {
        key.withLock { $0 != nil }
    }

    package func load(_ loaded: ConsoleCookieKey) {
        key.withLock { $0 = loaded }
    }

    /// The cookie value for a new session id; nil before the key is loaded.
    func value(for sessionID: String) -> String? {
        guard let key = key.withLock({ $0 }) else { return nil }
        return sessionID + "." + Base64URL.encode(Self.tag(Array(sessionID.utf8), key: key))
    }

    /// The session id a cookie value carries, if this service issued it;
    /// nil for anything else, and before the key is loaded.
    func sessionID(from value: String) -> String? {
        let bytes = Array(value.utf8)
        guard bytes.count == Self.valueCharacters, bytes[Self.partCharacters] == Self.separator,
              let key = key.withLock({ $0 }) else { return nil }
        let id = bytes[..<Self.partCharacters]
        guard let tag = Base64URL.decode(ascii: bytes[(Self.partCharacters + 1)...]),
              constantTimeEquals(tag, Self.tag(id, key: key)) else { return nil }
        return String(decoding: id, as: UTF8.self)
    }

    private static func tag(_ id: some Collection<UInt8>, key: ConsoleCookieKey) -> [UInt8] {
        HMACSHA256.authenticationCode(key: key.bytes, message: context + Array(id))
    }
}
