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
/// miss cache holds it; a full miss cache is emptied, never the key cache.
final class Authenticator: Sendable {
    private struct Cache: Sendable {
        var clients: [[UInt8]: (client: APIClient, expires: ContinuousClock.Instant)] = [:]
        var misses: [[UInt8]: ContinuousClock.Instant] = [:]
    }

    let timeToLiveSeconds: Double
    let entriesMax: Int
    let missesMax: Int
    private let cache = Locked(Cache())
    private let ledger: Ledger
    private let lookupCount = Atomic<Int>(0)

    init(ledger: Ledger, timeToLiveSeconds: Double = 2, entriesMax: Int = 10_000, missesMax: Int = 10_000) {
        self.ledger = ledger
        self.timeToLiveSeconds = timeToLiveSeconds
        self.entriesMax = entriesMax
        self.missesMax = missesMax
    }

    /// Database lookups made so far.
    var lookups: Int { lookupCount.load(ordering: .relaxed) }

    /// The client for an `Authorization` header value, or an error.
    /// Database failures arrive as the ledger mapped them (503s); anything
    /// else is the service's own fault and stays a bare 500.
    func client(authorization: String?) throws -> APIClient {
        guard let secret = authorization.flatMap(Self.bearerSecret) else { throw WalletError.unauthorized }
        let hash = SHA256.hash(secret)
        let now = ContinuousClock.now
        enum Cached { case client(APIClient), miss, none }
        let cached = cache.withLock { cache -> Cached in
            if let entry = cache.clients[hash], entry.expires > now { return .client(entry.client) }
            if let expires = cache.misses[hash], expires > now { return .miss }
            return .none
        }
        switch cached {
        case .client(let client): return client
        case .miss: throw WalletError.unauthorized
        case .none: break
        }
        lookupCount.add(1, ordering: .relaxed)
        // On a server thread: bounded like every read there.
        let client = try ledger.authenticate(hash: hash)
        let expires = now + .milliseconds(Int(timeToLiveSeconds * 1000))
        cache.withLock { cache in
            if let client {
                cache.misses[hash] = nil
                if cache.clients[hash] == nil, cache.clients.count >= entriesMax {
                    cache.clients = cache.clients.filter { $0.value.expires > now }
                    if cache.clients.count >= entriesMax { cache.clients.removeAll(keepingCapacity: true) }
                }
                cache.clients[hash] = (client, expires)
            } else {
                cache.clients[hash] = nil
                if cache.misses[hash] == nil, cache.misses.count >= missesMax {
                    cache.misses = cache.misses.filter { $0.value > now }
                    if cache.misses.count >= missesMax { cache.misses.removeAll(keepingCapacity: true) }
                }
                cache.misses[hash] = expires
            }
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
