import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import TestSupport
import Testing

/// The signature is checked before the certificate chain, and a chain that
/// verified is remembered without changing any verdict.
@Suite struct ChainCacheTests {
    @Test(.timeLimit(.minutes(1)))
    func junkWithARealChainIsRefusedWithoutChainWork() throws {
        let store = try FakeAppStore()
        let verifier = store.verifier()
        let stranger = PrivateKey()
        for index in 0..<20 {
            var transaction = FakeAppStore.transaction(transactionID: "junk-\(index)")
            transaction["price"] = index
            let junk = store.sign(transaction) { stranger.sign(Array($0.utf8)) }
            #expect(verificationError { try verifier.verifyTransaction(junk) }?.reason == .bad_signature)
        }
        #expect(verifier.chainCache.verificationCount == 0)

        // A real Apple token with its signature spoilt: Apple's chain, no chain work.
        let vector = try JSONSerialization.jsonObject(with: Data(contentsOf: AppleVectorTests.directory
            .appendingPathComponent("real-sandbox-consumable-1.json"))) as? [String: Any]
        let jws = try #require(vector?["jws"] as? String)
        let parts = jws.split(separator: ".")
        let signature = try #require(Base64URL.decode(String(parts[2])))
        let spoilt = String(parts[0]) + "." + String(parts[1]) + "." + Base64URL.encode(signature.map { $0 ^ 0x5a })
        let apple = SignedDataVerifier(configuration: VerifierConfiguration(
            rootCertificates: VerifierConfiguration.defaultRoots, bundleIDs: ["com.cynet.xingqi"],
            environments: [.sandbox], appAppleID: nil, clock: { Date() }))
        #expect(verificationError { try apple.verifyTransaction(spoilt) }?.reason == .bad_signature)
        #expect(apple.chainCache.verificationCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func aKnownPairSkipsTheChainButNotItsDates() throws {
        let store = try FakeAppStore()
        let verifier = store.verifier()
        for index in 0..<5 {
            _ = try verifier.verifyTransaction(store.sign(FakeAppStore.transaction(transactionID: "t-\(index)")))
        }
        #expect(verifier.chainCache.verificationCount == 1)
        #expect(verifier.chainCache.count == 1)

        // Signed before the certificates were valid: the full check runs and refuses.
        let early = FakeAppStore.milliseconds(FakeAppStore.start.addingTimeInterval(-86_400))
        let tooEarly = store.sign(FakeAppStore.transaction(signedDate: early))
        #expect(verificationError { try verifier.verifyTransaction(tooEarly) }?.reason == .bad_chain)
        // Signed in the future: refused as before.
        let future = FakeAppStore.milliseconds(FakeAppStore.signedDate.addingTimeInterval(3_600))
        #expect(verificationError {
            try verifier.verifyTransaction(store.sign(FakeAppStore.transaction(signedDate: future)))
        }?.reason == .bad_chain)
        // A different pair is verified in full, even under a known leaf.
        var siblingProfile = FakeAppStore.profile("Fake WWDR CA", serial: 9)
        siblingProfile.extraExtensions = [.marker(oid: FakeAppStore.intermediateMarkerOID)]
        let sibling = try store.root.intermediate(siblingProfile)
        let wrongIntermediate = store.sign(FakeAppStore.transaction(),
                                           chain: [store.leaf, sibling.certificate, store.root.certificate])
        #expect(verificationError { try verifier.verifyTransaction(wrongIntermediate) }?.reason == .bad_chain)
        // And the known pair still verifies from the cache.
        let before = verifier.chainCache.verificationCount
        _ = try verifier.verifyTransaction(store.sign(FakeAppStore.transaction(transactionID: "t-again")))
        #expect(verifier.chainCache.verificationCount == before)
    }

    @Test(.timeLimit(.minutes(1)))
    func anExpiredPairIsNotRememberedAndTheCacheIsBounded() throws {
        let store = try FakeAppStore()
        // The clock is past the leaf's notAfter; the token was signed while it was valid.
        let late = store.verifier(now: FakeAppStore.end.addingTimeInterval(86_400))
        for _ in 0..<3 {
            _ = try late.verifyTransaction(store.sign(FakeAppStore.transaction()))
        }
        #expect(late.chainCache.verificationCount == 3)
        #expect(late.chainCache.count == 0)

        let stores = try (0..<4).map { _ in try FakeAppStore() }
        let bounded = SignedDataVerifier(
            configuration: VerifierConfiguration(
                rootCertificates: stores.map(\.root.certificate), bundleIDs: [FakeAppStore.bundleID],
                environments: [.sandbox], appAppleID: nil, clock: { FakeAppStore.signedDate }),
            chainCacheEntriesMax: 2)
        for store in stores {
            _ = try bounded.verifyTransaction(store.sign(FakeAppStore.transaction()))
            #expect(bounded.chainCache.count <= 2)
        }
        #expect(bounded.chainCache.verificationCount == 4)
    }

    /// With room for two pairs, a pair that keeps being used stays while a
    /// third comes: the least recently used pair makes room.
    @Test(.timeLimit(.minutes(1)))
    func aPairInUseOutlastsANewOne() throws {
        let stores = try (0..<3).map { _ in try FakeAppStore() }
        let verifier = SignedDataVerifier(
            configuration: VerifierConfiguration(
                rootCertificates: stores.map(\.root.certificate), bundleIDs: [FakeAppStore.bundleID],
                environments: [.sandbox], appAppleID: nil, clock: { FakeAppStore.signedDate }),
            chainCacheEntriesMax: 2)
        func verify(_ store: FakeAppStore) throws {
            _ = try verifier.verifyTransaction(store.sign(FakeAppStore.transaction()))
        }
        try verify(stores[0])
        try verify(stores[1])
        try verify(stores[0])
        #expect(verifier.chainCache.verificationCount == 2)
        try verify(stores[2])
        #expect(verifier.chainCache.count == 2)
        #expect(verifier.chainCache.verificationCount == 3)
        // The pair in use is still known; the one left unused since is not.
        try verify(stores[0])
        #expect(verifier.chainCache.verificationCount == 3)
        try verify(stores[1])
        #expect(verifier.chainCache.verificationCount == 4)
    }
}
