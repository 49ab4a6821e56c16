import Crypto
import Foundation
import Locking
import Synchronization

/// Leaf and intermediate pairs that verified to a configured root, so a
/// token from a known pair skips the two P-384 certificate checks.
///
/// What is remembered is that the pair, as exact DER (the key is the SHA-256
/// of leaf ‖ intermediate), builds the path leaf → intermediate → root in
/// strict mode, and the window in which every certificate on that path is
/// valid. The certificate signatures and profile checks do not depend on the
/// time, so a hit only has to check the token's `signedDate` against the
/// window; a date outside it goes through the full check again, which names
/// the reason. An entry is dropped when the first certificate on its path
/// expires, and the cache holds at most `entriesMax` pairs, dropping the
/// least recently used to make room for a new one.
public final class ChainCache: Sendable {
    /// Pairs remembered at most by default: Apple signs with a handful at a
    /// time, and only pairs that verified get in.
    public static let pairsMax = 64

    struct Window: Sendable {
        var notBefore: Date
        var notAfter: Date

        init(path: [Certificate]) {
            notBefore = path.map(\.notBefore).max() ?? .distantFuture
            notAfter = path.map(\.notAfter).min() ?? .distantPast
        }
    }

    public let entriesMax: Int
    private let entries: BoundedCache<[UInt8], Window>
    private let verifications = Atomic<Int>(0)

    init(entriesMax: Int) {
        precondition(entriesMax >= 1, "a chain cache holds at least one pair")
        self.entriesMax = entriesMax
        entries = BoundedCache(entriesMax: entriesMax)
    }

    /// Full chain verifications run so far: the cost a cache hit saves.
    public var verificationCount: Int { verifications.load(ordering: .relaxed) }

    /// Pairs held now.
    public var count: Int { entries.count }

    static func key(leaf: Certificate, intermediate: Certificate) -> [UInt8] {
        SHA256.hash(leaf.derBytes + intermediate.derBytes)
    }

    func countVerification() {
        verifications.add(1, ordering: .relaxed)
    }

    /// The validity window of a known pair whose path has not expired by
    /// `now`. The window is in calendar time, on the verifier's clock, so it
    /// is checked here rather than by the cache's own expiry.
    func window(for key: [UInt8], now: Date) -> Window? {
        entries.update(forKey: key) { window in
            if let held = window, now > held.notAfter { window = nil }
            return window
        }
    }

    func remember(_ key: [UInt8], window: Window, now: Date) {
        guard now <= window.notAfter else { return }
        entries.insert(window, forKey: key)
    }
}
