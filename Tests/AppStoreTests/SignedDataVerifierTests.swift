import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import TestSupport
import Testing

@Suite struct AcceptanceTests {
    @Test(.timeLimit(.minutes(1)))
    func validTransactionIsAcceptedAndDecoded() throws {
        let store = try FakeAppStore()
        let jws = store.sign(FakeAppStore.transaction())
        let verified = try store.verifier().verifyTransaction(jws)
        let payload = verified.payload
        #expect(payload.transactionId == "2000000000000001")
        #expect(payload.bundleId == FakeAppStore.bundleID)
        #expect(payload.productId == "coins.1000")
        #expect(payload.type == .consumable)
        #expect(payload.quantity == 1)
        #expect(payload.environment == .sandbox)
        #expect(payload.signedDate == FakeAppStore.signedDateMilliseconds)
        #expect(payload.price == 4990)
        #expect(payload.currency == "USD")
        #expect(payload.appAccountTokenUUID == UUID(uuidString: "7E3FB20B-4CDB-47CC-936D-99D65F608138"))
        #expect(payload.revocationDate == nil)
        // The raw payload is exactly what was signed.
        let payloadSegment = jws.split(separator: ".")[1]
        #expect(Array(verified.payloadJSON) == Base64URL.decode(String(payloadSegment)))
    }

    @Test(.timeLimit(.minutes(1)))
    func refundFieldsAreDecoded() throws {
        let store = try FakeAppStore()
        var transaction = FakeAppStore.transaction()
        transaction["revocationDate"] = FakeAppStore.signedDateMilliseconds - 1000
        transaction["revocationReason"] = 1
        transaction["revocationType"] = "REFUND_PRORATED"
        transaction["revocationPercentage"] = 67932
        transaction["someFutureField"] = ["ignored": true]
        let payload = try store.verifier().verifyTransaction(store.sign(transaction)).payload
        #expect(payload.revocationReason == 1)
        #expect(payload.revocationType == "REFUND_PRORATED")
        #expect(payload.revocationPercentage == 67932)
    }

    @Test(.timeLimit(.minutes(1)))
    func notificationWithNestedTokensIsAccepted() throws {
        let store = try FakeAppStore()
        let notification = FakeAppStore.notification(
            signedTransactionInfo: store.sign(FakeAppStore.transaction()),
            signedRenewalInfo: store.sign(FakeAppStore.renewalInfo())
        )
        let verified = try store.verifier().verifyNotification(store.sign(notification))
        #expect(verified.payload.notificationType == "ONE_TIME_CHARGE")
        #expect(verified.payload.data?.bundleId == FakeAppStore.bundleID)
        #expect(verified.payload.data?.appAppleId == FakeAppStore.appAppleID)
        #expect(verified.transaction?.payload.transactionId == "2000000000000001")
        #expect(verified.renewalInfo?.payload.autoRenewStatus == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func productionNotificationWithMatchingAppAppleIDIsAccepted() throws {
        let store = try FakeAppStore()
        let notification = FakeAppStore.notification(
            type: "TEST", environment: "Production", appAppleID: FakeAppStore.appAppleID
        )
        let verified = try store.verifier(environments: [.production]).verifyNotification(store.sign(notification))
        #expect(verified.transaction == nil)
        #expect(verified.payload.data?.environment == .production)
    }

    @Test(.timeLimit(.minutes(1)))
    func verifyAnyTellsTheKindsApart() throws {
        let store = try FakeAppStore()
        let verifier = store.verifier()
        guard case .transaction = try verifier.verifyAny(store.sign(FakeAppStore.transaction())) else {
            Issue.record("a transaction was not recognised")
            return
        }
        guard case .renewalInfo = try verifier.verifyAny(store.sign(FakeAppStore.renewalInfo())) else {
            Issue.record("renewal info was not recognised")
            return
        }
        guard case .notification = try verifier.verifyAny(store.sign(FakeAppStore.notification())) else {
            Issue.record("a notification was not recognised")
            return
        }
        let unknown = verificationError { try verifier.verifyAny(store.sign(["signedDate": FakeAppStore.signedDateMilliseconds])) }
        #expect(unknown?.reason == .malformed)
    }

    @Test(.timeLimit(.minutes(1)))
    func x5cRootIsIgnoredInFavourOfConfiguredRoots() throws {
        let store = try FakeAppStore()
        let stranger = try FakeAppStore()
        // x5c[2] names some other root: trust still comes from the configuration.
        let jws = store.sign(FakeAppStore.transaction(), chain: [store.leaf, store.intermediate.certificate, stranger.root.certificate])
        #expect(throws: Never.self) { try store.verifier().verifyTransaction(jws) }
        // And naming the configured root in x5c[2] does not make a foreign chain trusted.
        let foreign = stranger.sign(
            FakeAppStore.transaction(), chain: [stranger.leaf, stranger.intermediate.certificate, store.root.certificate]
        )
        #expect(verificationError { try store.verifier().verifyTransaction(foreign) }?.reason == .untrusted_root)
    }

    @Test(.timeLimit(.minutes(1)))
    func oneVerifierServesManyThreads() async throws {
        let store = try FakeAppStore()
        let verifier = store.verifier()
        let good = store.sign(FakeAppStore.transaction())
        let bad = store.sign(FakeAppStore.transaction(bundleID: "com.example.other"))
        let outcomes = await withTaskGroup(of: (Bool, Bool).self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var allGood = true
                    var allBad = true
                    for _ in 0..<25 {
                        allGood = allGood && (try? verifier.verifyTransaction(good)) != nil
                        allBad = allBad && (try? verifier.verifyTransaction(bad)) == nil
                    }
                    return (allGood, allBad)
                }
            }
            var results: [(Bool, Bool)] = []
            for await result in group { results.append(result) }
            return results
        }
        #expect(outcomes.count == 8)
        #expect(outcomes.allSatisfy { $0.0 && $0.1 })
    }

    @Test(.timeLimit(.minutes(1)))
    func signedDateUpToSixtySecondsAheadIsAccepted() throws {
        let store = try FakeAppStore()
        let jws = store.sign(FakeAppStore.transaction())
        let verifier = store.verifier(now: FakeAppStore.signedDate.addingTimeInterval(-60))
        #expect(throws: Never.self) { try verifier.verifyTransaction(jws) }
    }
}

@Suite struct RejectionTests {
    func reason(
        _ store: FakeAppStore,
        _ jws: String,
        verifier: SignedDataVerifier? = nil
    ) -> VerificationFailure? {
        verificationError { try (verifier ?? store.verifier()).verifyAny(jws) }?.reason
    }

    @Test(.timeLimit(.minutes(1)))
    func malformedTokens() throws {
        let store = try FakeAppStore()
        let good = store.sign(FakeAppStore.transaction())
        let parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let cases: [(String, String)] = [
            ("empty", ""),
            ("two segments", parts[0] + "." + parts[1]),
            ("four segments", good + "." + parts[2]),
            ("padding", parts[0] + "=." + parts[1] + "." + parts[2]),
            ("standard alphabet", parts[0] + "." + parts[1] + "+." + parts[2]),
            ("whitespace", " " + good),
            ("header not JSON", Base64URL.encode(Array("{alg".utf8)) + "." + parts[1] + "." + parts[2]),
            ("header is an array", Base64URL.encode(Array("[1]".utf8)) + "." + parts[1] + "." + parts[2]),
            ("oversized", good + String(repeating: "A", count: 70_000)),
        ]
        for (name, jws) in cases {
            #expect(reason(store, jws) == .malformed, "\(name)")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func malformedHeaders() throws {
        let store = try FakeAppStore()
        let transaction = FakeAppStore.transaction()
        let chain = store.defaultChain
        let x5c = chain.map { Base64.encode($0.derBytes) }
        let headers: [(String, [String: Any])] = [
            ("no alg", ["x5c": x5c]),
            ("alg not a string", ["alg": 7, "x5c": x5c]),
            ("no x5c", ["alg": "ES256"]),
            ("misspelled x5c", ["alg": "ES256", "x5cwrong": x5c]),
            ("x5c with 1", ["alg": "ES256", "x5c": Array(x5c.prefix(1))]),
            ("x5c with 2", ["alg": "ES256", "x5c": Array(x5c.prefix(2))]),
            ("x5c with 4", ["alg": "ES256", "x5c": x5c + [x5c[2]]]),
            ("x5c not strings", ["alg": "ES256", "x5c": [1, 2, 3]]),
            ("x5c base64url", ["alg": "ES256", "x5c": x5c.map { Base64URL.encode(Base64.decode($0)!) }]),
            ("x5c not DER", ["alg": "ES256", "x5c": [x5c[0], Base64.encode(Array("hello".utf8)), x5c[2]]]),
            ("crit", ["alg": "ES256", "x5c": x5c, "crit": ["exp"], "exp": 1]),
        ]
        for (name, header) in headers {
            let jws = store.sign(headerJSON: FakeAppStore.json(header), payloadJSON: FakeAppStore.json(transaction))
            #expect(reason(store, jws) == .malformed, "\(name)")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func malformedPayloads() throws {
        let store = try FakeAppStore()
        var noDate = FakeAppStore.transaction()
        noDate["signedDate"] = nil
        var fractionalDate = FakeAppStore.transaction()
        fractionalDate["signedDate"] = 1_697_679_936_056.485
        var stringDate = FakeAppStore.transaction()
        stringDate["signedDate"] = "1700000000000"
        var missingProduct = FakeAppStore.transaction()
        missingProduct["productId"] = nil
        var badQuantity = FakeAppStore.transaction()
        badQuantity["quantity"] = "one"
        for (name, payload) in [
            ("no signedDate", noDate), ("fractional signedDate", fractionalDate),
            ("string signedDate", stringDate), ("no productId", missingProduct), ("string quantity", badQuantity),
        ] {
            #expect(reason(store, store.sign(payload), verifier: store.verifier()) == .malformed, "\(name)")
            #expect(
                verificationError { try store.verifier().verifyTransaction(store.sign(payload)) }?.reason == .malformed,
                "\(name)"
            )
        }
        let header = FakeAppStore.json(["alg": "ES256", "x5c": store.defaultChain.map { Base64.encode($0.derBytes) }])
        #expect(reason(store, store.sign(headerJSON: header, payloadJSON: Array("not json".utf8))) == .malformed)
        #expect(reason(store, store.sign(headerJSON: header, payloadJSON: Array("[]".utf8))) == .malformed)

        let noData: [String: Any] = [
            "notificationType": "TEST", "notificationUUID": "x", "signedDate": FakeAppStore.signedDateMilliseconds,
        ]
        #expect(verificationError { try store.verifier().verifyNotification(store.sign(noData)) }?.reason == .malformed)
    }

    @Test(.timeLimit(.minutes(1)))
    func onlyES256IsAccepted() throws {
        let store = try FakeAppStore()
        for alg in ["none", "HS256", "ES384", "RS256", "es256", "ES256 ", ""] {
            let jws = store.sign(FakeAppStore.transaction(), alg: alg)
            let error = verificationError { try store.verifier().verifyTransaction(jws) }
            #expect(error?.reason == .bad_algorithm, "alg \(alg)")
        }
        // An unsigned token in the classic "alg: none" shape.
        let unsigned = store.sign(FakeAppStore.transaction(), alg: "none") { _ in [] }
        #expect(reason(store, unsigned) == .bad_algorithm)
    }

    @Test(.timeLimit(.minutes(1)))
    func aHeaderThatNamesAMemberTwiceIsRefused() throws {
        let store = try FakeAppStore()
        let chain = String(decoding: FakeAppStore.json(store.defaultChain.map { Base64.encode($0.derBytes) }), as: UTF8.self)
        let payload = FakeAppStore.json(FakeAppStore.transaction())
        let single = store.sign(headerJSON: Array(#"{"alg":"ES256","x5c":\#(chain)}"#.utf8), payloadJSON: payload)
        #expect(reason(store, single) == nil)
        // Which value a reader sees would depend on its parser: the token is refused whole.
        for header in [#"{"alg":"none","alg":"ES256","x5c":\#(chain)}"#, #"{"alg":"ES256","alg":"none","x5c":\#(chain)}"#,
                       #"{"alg":"ES256","x5c":[],"x5c":\#(chain)}"#] {
            let jws = store.sign(headerJSON: Array(header.utf8), payloadJSON: payload)
            #expect(reason(store, jws) == .malformed, "\(header.prefix(40))")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func futureSignedDateIsRejected() throws {
        let store = try FakeAppStore()
        let jws = store.sign(FakeAppStore.transaction())
        let verifier = store.verifier(now: FakeAppStore.signedDate.addingTimeInterval(-61))
        let error = verificationError { try verifier.verifyTransaction(jws) }
        #expect(error?.reason == .bad_chain)
        #expect(error?.detail.contains("60 s ahead") == true)
    }

    @Test(.timeLimit(.minutes(1)))
    func absurdClocksFailClosed() throws {
        let store = try FakeAppStore()
        let jws = store.sign(FakeAppStore.transaction())
        for now in [Date.distantPast, Date(timeIntervalSince1970: -1e300), Date(timeIntervalSince1970: .nan)] {
            #expect(verificationError { try store.verifier(now: now).verifyTransaction(jws) }?.reason == .bad_chain)
        }
        let farFuture = store.sign(FakeAppStore.transaction(signedDate: .max))
        #expect(verificationError { try store.verifier().verifyTransaction(farFuture) }?.reason == .bad_chain)
    }

    @Test(.timeLimit(.minutes(1)))
    func leafExpiredAtSignedDateIsRejected() throws {
        var options = FakeAppStore.Options()
        options.leafNotAfter = FakeAppStore.signedDate.addingTimeInterval(-1)
        let store = try FakeAppStore(options)
        let error = verificationError { try store.verifier().verifyTransaction(store.sign(FakeAppStore.transaction())) }
        #expect(error?.reason == .bad_chain)
        #expect(error?.detail == "x5c[0] (leaf) expired at signedDate")
        // The OpenSSL text stays out of the description, for logs only.
        #expect(error?.description.contains("OpenSSL") == false)
        #expect(error?.debugDescription.contains("OpenSSL") == true)
    }

    @Test(.timeLimit(.minutes(1)))
    func signedDateBeforeTheChainIsRejected() throws {
        let store = try FakeAppStore()
        let early = FakeAppStore.milliseconds(FakeAppStore.start) - 1000
        let jws = store.sign(FakeAppStore.transaction(signedDate: early))
        #expect(verificationError { try store.verifier().verifyTransaction(jws) }?.reason == .bad_chain)
    }

    @Test(.timeLimit(.minutes(1)))
    func brokenChainsAreRejected() throws {
        let store = try FakeAppStore()
        let transaction = FakeAppStore.transaction()

        // An intermediate from the same root that did not issue the leaf.
        var siblingProfile = FakeAppStore.profile("Fake WWDR CA", serial: 9)
        siblingProfile.extraExtensions = [.marker(oid: FakeAppStore.intermediateMarkerOID)]
        let sibling = try store.root.intermediate(siblingProfile)
        let wrongIntermediate = store.sign(transaction, chain: [store.leaf, sibling.certificate, store.root.certificate])
        #expect(reason(store, wrongIntermediate) == .bad_chain)

        // Leaf and intermediate swapped.
        let swapped = store.sign(transaction, chain: [store.intermediate.certificate, store.leaf, store.root.certificate])
        #expect(reason(store, swapped) != nil)

        // The root itself in x5c[1]: the path is too short to be Apple's shape.
        let shortcut = store.sign(transaction, chain: [store.leaf, store.root.certificate, store.root.certificate])
        #expect(reason(store, shortcut) == .bad_chain)

        // A leaf that is a CA.
        var caLeaf = FakeAppStore.Options()
        caLeaf.leafIsCA = true
        let caStore = try FakeAppStore(caLeaf)
        let caSigned = caStore.sign(transaction)
        #expect(reason(caStore, caSigned) == .bad_chain)

        // No key identifiers: X509 strict mode says no.
        var bare = FakeAppStore.Options()
        bare.keyIdentifiers = false
        let bareStore = try FakeAppStore(bare)
        #expect(reason(bareStore, bareStore.sign(transaction)) == .bad_chain)
    }

    @Test(.timeLimit(.minutes(1)))
    func wrongRootIsUntrusted() throws {
        let store = try FakeAppStore()
        let other = try FakeAppStore()
        let jws = store.sign(FakeAppStore.transaction())
        #expect(reason(store, jws, verifier: other.verifier()) == .untrusted_root)
        // The real Apple root does not vouch for the fake chain either.
        let appleOnly = SignedDataVerifier(configuration: VerifierConfiguration(
            bundleIDs: [FakeAppStore.bundleID], environments: [.sandbox],
            clock: { FakeAppStore.signedDate }
        ))
        #expect(reason(store, jws, verifier: appleOnly) == .untrusted_root)
        // No roots at all trusts nothing.
        var empty = store.configuration()
        empty.rootCertificates = []
        #expect(reason(store, jws, verifier: SignedDataVerifier(configuration: empty)) == .untrusted_root)
    }

    @Test(.timeLimit(.minutes(1)))
    func appleMarkerExtensionsAreRequired() throws {
        var noLeafMarker = FakeAppStore.Options()
        noLeafMarker.leafMarker = false
        let leafStore = try FakeAppStore(noLeafMarker)
        let leafError = verificationError { try leafStore.verifier().verifyTransaction(leafStore.sign(FakeAppStore.transaction())) }
        #expect(leafError?.reason == .missing_apple_oid)
        #expect(leafError?.detail.contains("1.2.840.113635.100.6.11.1") == true)

        var noIntermediateMarker = FakeAppStore.Options()
        noIntermediateMarker.intermediateMarker = false
        let intermediateStore = try FakeAppStore(noIntermediateMarker)
        let intermediateError = verificationError {
            try intermediateStore.verifier().verifyTransaction(intermediateStore.sign(FakeAppStore.transaction()))
        }
        #expect(intermediateError?.reason == .missing_apple_oid)
        #expect(intermediateError?.detail.contains("1.2.840.113635.100.6.2.1") == true)
    }

    @Test(.timeLimit(.minutes(1)))
    func badSignaturesAreRejected() throws {
        let store = try FakeAppStore()
        let transaction = FakeAppStore.transaction()

        let der = store.sign(transaction) { store.leafKey.signDER(Array($0.utf8)) }
        #expect(reason(store, der) == .bad_signature)

        let otherKey = PrivateKey()
        let wrongKey = store.sign(transaction) { otherKey.sign(Array($0.utf8)) }
        #expect(reason(store, wrongKey) == .bad_signature)

        let short = store.sign(transaction) { Array(store.leafKey.sign(Array($0.utf8)).prefix(63)) }
        #expect(reason(store, short) == .bad_signature)

        let zero = store.sign(transaction) { _ in [UInt8](repeating: 0, count: 64) }
        #expect(reason(store, zero) == .bad_signature)

        let empty = store.sign(transaction) { _ in [] }
        #expect(reason(store, empty) == .bad_signature)

        // Re-encode the payload with another quantity; keep header and signature.
        let good = store.sign(transaction)
        let parts = good.split(separator: ".").map(String.init)
        var changed = transaction
        changed["quantity"] = 9
        let tampered = parts[0] + "." + Base64URL.encode(FakeAppStore.json(changed)) + "." + parts[2]
        #expect(reason(store, tampered) == .bad_signature)
    }

    @Test(.timeLimit(.minutes(1)))
    func bundleMustBeConfigured() throws {
        let store = try FakeAppStore()
        let jws = store.sign(FakeAppStore.transaction(bundleID: "com.example.other"))
        #expect(reason(store, jws) == .bundle_mismatch)
        #expect(reason(store, store.sign(FakeAppStore.transaction()), verifier: store.verifier(bundleIDs: [])) == .bundle_mismatch)
        // Case matters.
        let shouting = store.sign(FakeAppStore.transaction(bundleID: FakeAppStore.bundleID.uppercased()))
        #expect(reason(store, shouting) == .bundle_mismatch)
        let notification = store.sign(FakeAppStore.notification(bundleID: "com.example.other"))
        #expect(reason(store, notification) == .bundle_mismatch)
    }

    /// A refusal says whether Apple signed what it refused: only a token
    /// whose signature and chain held can have its claims refused.
    @Test(.timeLimit(.minutes(1)))
    func aRefusalSaysWhetherAppleSignedIt() throws {
        let store = try FakeAppStore()
        let verifier = store.verifier(environments: [.sandbox])
        let forgedSignature = store.sign(FakeAppStore.notification(), signer: { _ in [UInt8](repeating: 1, count: 64) })
        let otherRoot = try FakeAppStore().sign(FakeAppStore.notification())
        for (name, jws, reason) in [("not a token", "a.b.c", VerificationFailure.malformed),
                                    ("forged signature", forgedSignature, .bad_signature),
                                    ("another root", otherRoot, .untrusted_root)] {
            let error = verificationError { try verifier.verifyNotification(jws) }
            #expect(error?.reason == reason, "\(name)")
            #expect(error?.isAppleSigned == false, "\(name)")
        }
        let nestedForgery = store.sign(FakeAppStore.notification(
            signedTransactionInfo: store.sign(FakeAppStore.transaction(), signer: { _ in [UInt8](repeating: 1, count: 64) })))
        for (name, jws, reason) in [
            ("another bundle", store.sign(FakeAppStore.notification(bundleID: "com.example.other")), VerificationFailure.bundle_mismatch),
            ("Production", store.sign(FakeAppStore.notification(environment: "Production")), .environment_not_allowed),
            ("a payload without data", store.sign(["notificationType": "TEST", "signedDate": FakeAppStore.signedDateMilliseconds]),
             .malformed),
            // Whatever is nested, the notification that carries it is Apple's.
            ("a bad nested transaction", nestedForgery, .bad_signature),
        ] {
            let error = verificationError { try verifier.verifyNotification(jws) }
            #expect(error?.reason == reason, "\(name)")
            #expect(error?.isAppleSigned == true, "\(name)")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func environmentMustBeAllowed() throws {
        let store = try FakeAppStore()
        let everything: Set<Environment> = [.production, .sandbox, .xcode, .localTesting]
        for environment in ["Xcode", "LocalTesting"] {
            let jws = store.sign(FakeAppStore.transaction(environment: environment))
            let error = verificationError { try store.verifier(environments: everything).verifyTransaction(jws) }
            #expect(error?.reason == .environment_not_allowed, "\(environment)")
        }
        let sandbox = store.sign(FakeAppStore.transaction(environment: "Sandbox"))
        #expect(reason(store, sandbox, verifier: store.verifier(environments: [.production])) == .environment_not_allowed)
        let huawei = store.sign(FakeAppStore.transaction(environment: "SANDBOX"))
        #expect(reason(store, huawei) == .environment_not_allowed)
        let notification = store.sign(FakeAppStore.notification(environment: "Xcode"))
        #expect(reason(store, notification, verifier: store.verifier(environments: everything)) == .environment_not_allowed)
        let renewal = store.sign(FakeAppStore.renewalInfo(environment: "Sandbox"))
        #expect(reason(store, renewal, verifier: store.verifier(environments: [.production])) == .environment_not_allowed)
    }

    @Test(.timeLimit(.minutes(1)))
    func productionNotificationNeedsTheRightAppAppleID() throws {
        let store = try FakeAppStore()
        let wrong = store.sign(FakeAppStore.notification(environment: "Production", appAppleID: 42))
        #expect(reason(store, wrong) == .bundle_mismatch)
        let missing = store.sign(FakeAppStore.notification(environment: "Production", appAppleID: nil))
        #expect(reason(store, missing) == .bundle_mismatch)
        let right = store.sign(FakeAppStore.notification(environment: "Production"))
        #expect(reason(store, right, verifier: store.verifier(appAppleID: nil)) == .bundle_mismatch)
        // Sandbox: checked only when both sides have a value.
        let sandboxWrong = store.sign(FakeAppStore.notification(environment: "Sandbox", appAppleID: 42))
        #expect(reason(store, sandboxWrong) == .bundle_mismatch)
        #expect(reason(store, sandboxWrong, verifier: store.verifier(appAppleID: nil)) == nil)
        let sandboxMissing = store.sign(FakeAppStore.notification(environment: "Sandbox", appAppleID: nil))
        #expect(reason(store, sandboxMissing) == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func nestedTokensAreVerifiedOnTheirOwn() throws {
        let store = try FakeAppStore()
        let verifier = store.verifier()
        let nested = store.sign(FakeAppStore.transaction())
        let parts = nested.split(separator: ".").map(String.init)
        var changed = FakeAppStore.transaction()
        changed["quantity"] = 50
        let tampered = parts[0] + "." + Base64URL.encode(FakeAppStore.json(changed)) + "." + parts[2]

        // The outer signature is fine; the nested transaction is not.
        let outer = store.sign(FakeAppStore.notification(signedTransactionInfo: tampered))
        let error = verificationError { try verifier.verifyNotification(outer) }
        #expect(error?.reason == .bad_signature)
        #expect(error?.detail.hasPrefix("data.signedTransactionInfo: ") == true)

        let stranger = try FakeAppStore()
        let foreign = store.sign(FakeAppStore.notification(signedTransactionInfo: stranger.sign(FakeAppStore.transaction())))
        #expect(verificationError { try verifier.verifyNotification(foreign) }?.reason == .untrusted_root)

        let badRenewal = store.sign(FakeAppStore.notification(signedRenewalInfo: String(nested.dropLast(2))))
        #expect(verificationError { try verifier.verifyNotification(badRenewal) }?.detail.hasPrefix("data.signedRenewalInfo: ") == true)

        // Nested claims must agree with the notification's.
        let otherBundle = store.sign(FakeAppStore.notification(
            signedTransactionInfo: store.sign(FakeAppStore.transaction(bundleID: "com.example.sibling"))
        ))
        let both = store.verifier(bundleIDs: [FakeAppStore.bundleID, "com.example.sibling"])
        #expect(verificationError { try both.verifyNotification(otherBundle) }?.reason == .bundle_mismatch)
        let otherEnvironment = store.sign(FakeAppStore.notification(
            environment: "Sandbox", signedTransactionInfo: store.sign(FakeAppStore.transaction(environment: "Production"))
        ))
        #expect(verificationError { try verifier.verifyNotification(otherEnvironment) }?.reason == .environment_not_allowed)
        let renewalEnvironment = store.sign(FakeAppStore.notification(
            environment: "Sandbox", signedRenewalInfo: store.sign(FakeAppStore.renewalInfo(environment: "Production"))
        ))
        #expect(verificationError { try verifier.verifyNotification(renewalEnvironment) }?.reason == .environment_not_allowed)
    }

    @Test(.timeLimit(.minutes(1)))
    func checksRunInApplesOrder() throws {
        // A token wrong in every way reports the earliest stage.
        var options = FakeAppStore.Options()
        options.leafMarker = false
        let store = try FakeAppStore(options)
        let other = try FakeAppStore()
        let everythingWrong = FakeAppStore.transaction(bundleID: "com.example.other", environment: "Xcode")
        let derSigned = store.sign(everythingWrong) { store.leafKey.signDER(Array($0.utf8)) }

        // The signature comes first: it is the cheapest check that anyone
        // without Apple's key fails.
        #expect(reason(store, derSigned, verifier: other.verifier()) == .bad_signature)
        #expect(reason(store, derSigned) == .bad_signature)
        let signed = store.sign(everythingWrong)
        #expect(reason(store, signed, verifier: other.verifier()) == .untrusted_root)
        #expect(reason(store, signed) == .missing_apple_oid)
        let noMarkerCheck = try FakeAppStore()
        let signedWrongly = noMarkerCheck.sign(everythingWrong) { noMarkerCheck.leafKey.signDER(Array($0.utf8)) }
        #expect(reason(noMarkerCheck, signedWrongly) == .bad_signature)
        #expect(reason(noMarkerCheck, noMarkerCheck.sign(everythingWrong)) == .bundle_mismatch)
        #expect(reason(noMarkerCheck, noMarkerCheck.sign(everythingWrong, alg: "HS256")) == .bad_algorithm)
    }
}
