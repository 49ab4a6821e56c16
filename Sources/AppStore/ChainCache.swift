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
/// expires, and the cache holds at most `entriesMax` pairs (Apple signs with
/// a handful at a time; only pairs that verified get in).
public final class ChainCache: Sendable {
    public static let entriesMaxDefault = 64

    struct Window: Sendable {
        var notBefore: Date
        var notAfter: Date

        init(path: [Certificate]) {
            notBefore = path.map(\.notBefore).max() ?? .distantFuture
            notAfter = path.map(\.notAfter).min() ?? .distantPast
        }
    }

    public let entriesMax: Int
    private let entries = Locked<[[UInt8]: Window]>([:])
    private let verifications = Atomic<Int>(0)

    init(entriesMax: Int) {
        precondition(entriesMax >= 1, "a chain cache holds at least one pair")
        self.entriesMax = entriesMax
    }

    /// Full chain verifications run so far: the cost a cache hit saves.
    public var verificationCount: Int { verifications.load(ordering: .relaxed) }

    /// Pairs held now.
    public var count: Int { entries.withLock { $0.count } }

    static func key(leaf: Certificate, intermediate: Certificate) -> [UInt8] {
        SHA256.hash(leaf.derBytes + intermediate.derBytes)
    }

    func countVerification() {
        verifications.add(1, ordering: .relaxed)
    }

    /// The validity window of a known pair whose path has not expired by `now`.
    func window(for key: [UInt8], now: Date) -> Window? {
        entries.withLock { entries in
            guard let window = entries[key] else { return nil }
            guard now <= window.notAfter else {
                entries[key] = nil
                return nil
            }
            return window
        }
    }

    func remember(_ key: [UInt8], window: Window, now: Date) {
        guard now <= window.notAfter else { return }
        entries.withLock { entries in
            if entries[key] == nil, entries.count >= entriesMax {
                entries = entries.filter { now <= $0.value.notAfter }
                if entries.count >= entriesMax { entries.removeAll(keepingCapacity: true) }
            }
            entries[key] = window
        }
    }
}
