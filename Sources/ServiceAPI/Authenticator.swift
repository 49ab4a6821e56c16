import Crypto
import Foundation
import Locking
import Synchronization
import WalletCore
import WalletStore

/// Finds the client for a bearer secret, with a short cache so a hot key
/// costs no query. Entries live `timeToLiveSeconds` (revocation reaches
/// every instance within that).
///
/// Known keys and unknown ones are cached apart, each with its own bound
/// (`entriesMax`, `missesMax`): anyone can present random secrets, and a
/// flood of them must neither evict the keys in use nor cost a query each
/// time one repeats. An unknown secret costs one lookup per period while the
/// miss cache holds it. A full cache drops its least recently used entry, so
/// a flood of unknown secrets pushes out older misses, never a key in use.
/// An entry's life is counted on the service's clock.
final class Authenticator: Sendable {
    /// Keys in use remembered at most; more than a service has callers.
    static let entriesMax = 10_000
    /// Unknown secrets remembered at most, apart from the keys in use.
    static let missesMax = 10_000

    private struct Known: Sendable {
        var client: APIClient
        var expires: ContinuousClock.Instant
    }

    let timeToLiveSeconds: Double
    private let clients: BoundedCache<[UInt8], Known>
    /// Unknown secrets, each with when it may be looked up again.
    private let misses: BoundedCache<[UInt8], ContinuousClock.Instant>
    private let ledger: Ledger
    private let clock: any WorkClock
    private let lookupCount = Atomic<Int>(0)

    init(ledger: Ledger, clock: any WorkClock, timeToLiveSeconds: Double = 2, entriesMax: Int = Authenticator.entriesMax,
         missesMax: Int = Authenticator.missesMax) {
        self.ledger = ledger
        self.clock = clock
        self.timeToLiveSeconds = timeToLiveSeconds
        clients = BoundedCache(entriesMax: entriesMax, expires: { $0.expires })
        misses = BoundedCache(entriesMax: missesMax, expires: { $0 })
    }

    /// Database lookups made so far.
    var lookups: Int { lookupCount.load(ordering: .relaxed) }

    /// The client for an `Authorization` header value, or an error.
    /// Database failures arrive as the ledger mapped them (503s); anything
    /// else is the service's own fault and stays a bare 500.
    func client(authorization: String?) throws -> APIClient {
        guard let secret = authorization.flatMap(Self.bearerSecret) else { throw WalletError.unauthorized }
        let hash = SHA256.hash(secret)
        let now = clock.now
        if let known = clients.value(forKey: hash, now: now) { return known.client }
        if misses.value(forKey: hash, now: now) != nil { throw WalletError.unauthorized }
        lookupCount.add(1, ordering: .relaxed)
        // On a server thread: bounded like every read there.
        let client = try ledger.authenticate(hash: hash)
        let expires = now + .milliseconds(Int(timeToLiveSeconds * 1000))
        if let client {
            misses.removeValue(forKey: hash)
            clients.insert(Known(client: client, expires: expires), forKey: hash)
        } else {
            clients.removeValue(forKey: hash)
            misses.insert(expires, forKey: hash)
        }
        guard let client else { throw WalletError.unauthorized }
        return client
    }

    /// The secret of `Bearer <secret>` (the scheme in any case), if it looks
    /// like one of ours. Read byte by byte: it runs on every request.
    static func bearerSecret(_ header: String) -> ArraySlice<UInt8>? {
        let bytes = Array(header.utf8)
        guard bytes.count > 7, bytes.count <= 512 else { return nil }
        let scheme: [UInt8] = Array("bearer ".utf8)
        for index in 0..<7 where bytes[index] | (index < 6 ? 0x20 : 0) != scheme[index] { return nil }
        var start = 7
        var end = bytes.count
        while start < end, bytes[start] == UInt8(ascii: " ") { start += 1 }
        while end > start, bytes[end - 1] == UInt8(ascii: " ") { end -= 1 }
        let secret = bytes[start..<end]
        guard secret.starts(with: APIKeys.secretPrefix.utf8) else { return nil }
        return secret
    }
}
