import AppStore
import Crypto
import Foundation
import Testing
import TestSupport

/// Mutates valid tokens thousands of ways and checks that the verifier
/// neither crashes nor accepts anything whose signed part changed.
///
/// The mutation choices come from a fixed seed. The base tokens carry fresh
/// keys and ECDSA nonces each run, so byte values differ between runs, but
/// what is asserted holds for any valid base.
@Suite struct ParserFuzzTests {
    static let seed: UInt64 = 0x5EED_CAFE_F00D_0001
    static let mutationCount = 2_400
    static let base64URLAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The bytes before the last dot: `header.payload`, what the signature covers.
    static func signedPortion(_ token: [UInt8]) -> ArraySlice<UInt8> {
        guard let lastDot = token.lastIndex(of: UInt8(ascii: ".")) else { return token[...] }
        return token[..<lastDot]
    }

    static func segments(_ token: [UInt8]) -> [[UInt8]] {
        token.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init)
    }

    static func join(_ segments: [[UInt8]]) -> [UInt8] {
        Array(segments.joined(separator: [UInt8(ascii: ".")]))
    }

    static func mutate(_ base: [UInt8], others: [[UInt8]], kind: Int, random: inout SplitMix64) -> [UInt8] {
        var token = base
        switch kind {
        case 0:  // truncate
            token = Array(token.prefix(random.below(token.count)))
        case 1:  // flip one to three bits
            for _ in 0...random.below(3) {
                token[random.below(token.count)] ^= UInt8(1) << UInt8(random.below(8))
            }
        case 2:  // swap two segments
            var parts = segments(token)
            let first = random.below(3)
            let second = (first + 1 + random.below(2)) % 3
            parts.swapAt(first, second)
            token = join(parts)
        case 3:  // oversize: a long run of valid characters somewhere, sometimes past the limit
            let length = random.below(2) == 0 ? 70_000 + random.below(10_000) : 1 + random.below(4_000)
            let filler = (0..<length).map { _ in base64URLAlphabet[random.below(base64URLAlphabet.count)] }
            token.insert(contentsOf: filler, at: random.below(token.count + 1))
        case 4:  // overwrite a few characters with other plausible ones
            let alphabet = base64URLAlphabet + Array(".=+/ ".utf8)
            for _ in 0...random.below(4) {
                token[random.below(token.count)] = alphabet[random.below(alphabet.count)]
            }
        case 5:  // splice segments of different tokens
            let sources = [base] + others
            let parts = (0..<3).map { index in segments(sources[random.below(sources.count)])[index] }
            token = join(parts)
        case 6:  // delete a range
            let start = random.below(token.count)
            let end = min(token.count, start + 1 + random.below(64))
            token.removeSubrange(start..<end)
        case 7:  // add or remove a dot
            if random.below(2) == 0 {
                token.insert(UInt8(ascii: "."), at: random.below(token.count + 1))
            } else if let dot = token.firstIndex(of: UInt8(ascii: ".")) {
                token.remove(at: dot)
            }
        case 8:  // rewrite the header as valid JSON with one field changed
            var parts = segments(token)
            guard let header = decodedObject(parts[0]) else { break }
            parts[0] = encodedObject(mutateHeader(header, random: &random))
            token = join(parts)
        default:  // rewrite the payload as valid JSON with one claim changed
            var parts = segments(token)
            guard var payload = decodedObject(parts[1]), !payload.isEmpty else { break }
            let keys = payload.keys.sorted()
            let key = keys[random.below(keys.count)]
            let replacements: [Any] = [
                "com.example.other", "Production", "Xcode", 9, 0, -1, Int64.max, NSNull(), [String: Any](), "",
            ]
            payload[key] = replacements[random.below(replacements.count)]
            parts[1] = encodedObject(payload)
            token = join(parts)
        }
        return token
    }

    static func mutateHeader(_ header: [String: Any], random: inout SplitMix64) -> [String: Any] {
        var header = header
        var chain = header["x5c"] as? [String] ?? []
        switch random.below(6) {
        case 0:
            header["alg"] = ["none", "HS256", "ES384", "RS256", "es256", "ES512"][random.below(6)]
        case 1:
            header["alg"] = nil
        case 2:
            if chain.count > 1 { chain.swapAt(0, 1 + random.below(chain.count - 1)) }
            header["x5c"] = chain
        case 3:
            if !chain.isEmpty { chain.remove(at: random.below(chain.count)) }
            header["x5c"] = chain
        case 4:
            if !chain.isEmpty { chain.append(chain[random.below(chain.count)]) }
            header["x5c"] = chain
        default:
            header["crit"] = ["b64"]
        }
        return header
    }

    static func decodedObject(_ segment: [UInt8]) -> [String: Any]? {
        guard let bytes = Base64URL.decode(ascii: segment) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    static func encodedObject(_ object: [String: Any]) -> [UInt8] {
        let json = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return Array(Base64URL.encode(json).utf8)
    }

    @Test(.timeLimit(.minutes(1)))
    func mutatedTokensAreNeverAccepted() throws {
        let store = try FakeAppStore()
        let verifier = store.verifier()
        let bases: [[UInt8]] = [
            Array(store.sign(FakeAppStore.transaction()).utf8),
            Array(store.sign(FakeAppStore.renewalInfo()).utf8),
            Array(store.sign(FakeAppStore.notification(
                signedTransactionInfo: store.sign(FakeAppStore.transaction(transactionID: "2000000000000002")),
                signedRenewalInfo: store.sign(FakeAppStore.renewalInfo())
            )).utf8),
        ]
        // The bases themselves pass, or the test would prove nothing.
        for base in bases {
            #expect(throws: Never.self) { try verifier.verifyAny(String(decoding: base, as: UTF8.self)) }
        }
        let signedPortions = Set(bases.map { Array(Self.signedPortion($0)) })

        var random = SplitMix64(seed: Self.seed)
        var mutants = 0
        var accepted = 0
        var reasons: [VerificationFailure: Int] = [:]
        for index in 0..<Self.mutationCount {
            let base = bases[index % bases.count]
            let others = bases.filter { $0 != base }
            let mutated = Self.mutate(base, others: others, kind: random.below(10), random: &random)
            guard !bases.contains(mutated) else { continue }
            mutants += 1
            // Invalid UTF-8 becomes U+FFFD, as it would arriving in a JSON body.
            let text = String(decoding: mutated, as: UTF8.self)
            do {
                _ = try verifier.verifyAny(text)
                accepted += 1
                #expect(
                    signedPortions.contains(Array(Self.signedPortion(Array(text.utf8)))),
                    "accepted a token whose signed portion changed (mutation \(index))"
                )
            } catch {
                reasons[error.reason, default: 0] += 1
            }
        }

        #expect(mutants >= 2_000)
        // Canonical base64url leaves no second spelling of a signature, so
        // nothing at all should get through.
        #expect(accepted == 0)
        // The mutations reach every stage up to the signature.
        #expect(reasons[.malformed, default: 0] > 0)
        #expect(reasons[.bad_algorithm, default: 0] > 0)
        #expect(reasons[.bad_signature, default: 0] > 0)
        // The chain lives in the signed header and is checked after the
        // signature, so no mutant gets that far: the bases' one chain was
        // verified once, and junk cost no chain work.
        #expect(reasons[.bad_chain, default: 0] + reasons[.untrusted_root, default: 0] == 0)
        #expect(verifier.chainCache.verificationCount == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func splitMix64IsTheReferenceSequence() {
        // First outputs for seed 0, as published with the algorithm.
        var random = SplitMix64(seed: 0)
        #expect(random.next() == 0xE220_A839_7B1D_CDAF)
        #expect(random.next() == 0x6E78_9E6A_A1B9_65F4)
        #expect(random.next() == 0x06C4_5D18_8009_454F)
    }
}
