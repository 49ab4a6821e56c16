import Crypto
import Foundation
import GooglePlay
import TestSupport
import StoreHTTP
import Testing

/// Each test runs its own fake key endpoint on loopback, so the fetch counts
/// are its own.
@Suite(.timeLimit(.minutes(1)))
struct PushAuthenticationTests {
    static func authenticator(_ fake: FakeGoogleCerts, timeoutSeconds: Double = 2,
                              observe: @escaping @Sendable (PushAuthenticator.StatusClass, Double) -> Void = { _, _ in })
        -> PushAuthenticator {
        PushAuthenticator(
            configuration: .init(jwksURL: fake.url, audience: FakeGoogleCerts.defaultAudience,
                                 serviceAccountEmail: FakeGoogleCerts.defaultEmail, timeoutSeconds: timeoutSeconds),
            observe: observe)
    }

    /// The reason `verify` refuses with; nil if it accepts.
    static func refusal(_ authenticator: PushAuthenticator, _ authorization: String?,
                        now: Date = Date()) -> PushAuthenticationError.Reason? {
        do {
            _ = try authenticator.verify(authorization: authorization, now: now)
            return nil
        } catch {
            return error.reason
        }
    }

    static func bearer(_ token: String) -> String { "Bearer " + token }

    // MARK: Accepted

    @Test func aGoodTokenVerifiesWithItsClaims() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let statuses = Guarded<[PushAuthenticator.StatusClass]>([])
        let authenticator = Self.authenticator(fake) { status, _ in statuses.withLock { $0.append(status) } }
        let issuedAt = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))

        let claims = try authenticator.verify(authorization: Self.bearer(fake.token(issuedAt: issuedAt)))

        #expect(claims == PushClaims(email: FakeGoogleCerts.defaultEmail, audience: FakeGoogleCerts.defaultAudience,
                                     issuer: "https://accounts.google.com", subject: "110000000000000000000",
                                     expiresAt: issuedAt.addingTimeInterval(3_600), issuedAt: issuedAt))
        #expect(fake.fetchCount == 1)
        #expect(statuses.withLock { $0 } == [.success])
        #expect(authenticator.keyCount == 1)

        // The keys are cached: a second token costs no fetch.
        _ = try authenticator.verify(authorization: Self.bearer(fake.token()))
        #expect(fake.fetchCount == 1)
    }

    @Test func theOtherIssuerSpellingAnAudienceArrayAndAStringEmailVerifiedAreAccepted() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let now = Int64(Date().timeIntervalSince1970)
        let token = fake.token(claims: [
            "iss": "accounts.google.com", "aud": ["https://other.example.com", FakeGoogleCerts.defaultAudience],
            "email": FakeGoogleCerts.defaultEmail, "email_verified": "true", "exp": now + 600,
        ])
        let claims = try authenticator.verify(authorization: Self.bearer(token))
        #expect(claims.issuer == "accounts.google.com")
        #expect(claims.audience == FakeGoogleCerts.defaultAudience)
        #expect(claims.subject == nil)
        #expect(claims.issuedAt == nil)
    }

    @Test func theBearerSchemeIsCaseInsensitive() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        #expect(Self.refusal(authenticator, "bearer " + fake.token()) == nil)
        #expect(Self.refusal(authenticator, "BEARER  " + fake.token()) == nil)
    }

    @Test func clockSkewIsTolerated() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        // Expired 30 s ago, and issued 30 s ahead: both within the 60 s skew.
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(expiresIn: -30))) == nil)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(issuedAt: Date().addingTimeInterval(30)))) == nil)
    }

    // MARK: Refused, one reason each

    @Test func aMissingHeaderOrAnotherSchemeIsMissingToken() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let token = fake.token()
        for header in [nil, "", "Bearer", "Bearer ", "Bearer    ", "Basic dXNlcjpwYXNz", "Token " + token, token,
                       "Bearer" + token] {
            #expect(Self.refusal(authenticator, header) == .missing_token, "\(String(describing: header?.prefix(12)))")
        }
        #expect(fake.fetchCount == 0)
    }

    @Test func malformedTokensAreMalformed() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let good = fake.token()
        let parts = good.split(separator: ".").map(String.init)
        let header = Base64URL.encode(Array(#"{"alg":"RS256","kid":"fake-key-1"}"#.utf8))
        let claims = parts[1]
        let signature = parts[2]
        let cases = [
            "abc",
            "a.b",
            good + ".extra",
            parts[0] + "." + parts[1],
            parts[0] + "=." + claims + "." + signature,
            parts[0] + "." + claims + "." + signature + "=",
            "!!!." + claims + "." + signature,
            Base64URL.encode(Array("not json".utf8)) + "." + claims + "." + signature,
            Base64URL.encode(Array("[1,2]".utf8)) + "." + claims + "." + signature,
            header + "." + Base64URL.encode(Array("not json".utf8)) + "." + signature,
            header + "." + Base64URL.encode(Array(#""a string""#.utf8)) + "." + signature,
            // No kid, a kid that is not a string, an empty kid, a crit list.
            Base64URL.encode(Array(#"{"alg":"RS256"}"#.utf8)) + "." + claims + "." + signature,
            Base64URL.encode(Array(#"{"alg":"RS256","kid":7}"#.utf8)) + "." + claims + "." + signature,
            Base64URL.encode(Array(#"{"alg":"RS256","kid":""}"#.utf8)) + "." + claims + "." + signature,
            Base64URL.encode(Array(#"{"alg":"RS256","crit":["exp"],"kid":"fake-key-1"}"#.utf8)) + "." + claims
                + "." + signature,
            // Over the size limit.
            header + "." + String(repeating: "A", count: PushAuthenticator.tokenBytesMax) + "." + signature,
            "tok en.a.b",
        ]
        for (index, token) in cases.enumerated() {
            #expect(Self.refusal(authenticator, Self.bearer(token)) == .malformed, "case \(index)")
        }
        #expect(fake.fetchCount == 0)
    }

    @Test func aHeaderOrClaimNamedTwiceIsMalformed() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let kid = fake.currentKey.kid
        let now = Int64(Date().timeIntervalSince1970)
        let claims = #"{"aud":"\#(FakeGoogleCerts.defaultAudience)","email":"\#(FakeGoogleCerts.defaultEmail)","#
            + #""email_verified":true,"exp":\#(now + 3_600),"iat":\#(now),"iss":"https://accounts.google.com"}"#
        let header = #"{"alg":"RS256","kid":"\#(kid)","typ":"JWT"}"#
        func signed(_ header: String, _ claims: String) throws -> String {
            let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
            return input + "." + Base64URL.encode(try fake.currentKey.key.signRS256(Array(input.utf8)))
        }
        #expect(Self.refusal(authenticator, Self.bearer(try signed(header, claims))) == nil)
        // Which value a reader sees would depend on its parser: the token is refused whole.
        let twice = [
            (#"{"alg":"none","alg":"RS256","kid":"\#(kid)"}"#, claims),
            (header, claims.replacingOccurrences(of: #""aud":"#, with: #""aud":"https://other.example","aud":"#)),
            (header, claims.replacingOccurrences(of: #""email":"#, with: #""email":"someone@else.example","email":"#)),
        ]
        for (index, (header, claims)) in twice.enumerated() {
            #expect(Self.refusal(authenticator, Self.bearer(try signed(header, claims))) == .malformed, "case \(index)")
        }
    }

    @Test func anAlgorithmOtherThanRS256IsWrongAlgorithm() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let claims = String(fake.token().split(separator: ".")[1])
        for algorithm in ["ES256", "none", "HS256", "rs256", "RS512", "PS256"] {
            let header = Base64URL.encode(Array(#"{"alg":"\#(algorithm)","kid":"fake-key-1"}"#.utf8))
            #expect(Self.refusal(authenticator, Self.bearer(header + "." + claims + ".")) == .wrong_algorithm, "\(algorithm)")
        }
        // Signed honestly with the published key, but labelled otherwise.
        let mislabelled = FakeGoogleCerts.token(header: ["alg": "ES256", "kid": fake.currentKey.kid],
                                                claims: ["iss": "accounts.google.com"], signWith: fake.currentKey.key)
        #expect(Self.refusal(authenticator, Self.bearer(mislabelled)) == .wrong_algorithm)
        let numeric = Base64URL.encode(Array(#"{"alg":256,"kid":"fake-key-1"}"#.utf8))
        #expect(Self.refusal(authenticator, Self.bearer(numeric + "." + claims + ".")) == .wrong_algorithm)
        #expect(fake.fetchCount == 0)
    }

    @Test func aKidThatIsNotPublishedIsUnknownKey() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(kid: "never-published"))) == .unknown_key)
        // The first need fetched the keys; the kid was not among them.
        #expect(fake.fetchCount == 1)
    }

    @Test func anotherKeyUnderAPublishedKidIsBadSignature() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let forged = fake.token(kid: fake.currentKey.kid, signWith: fake.strayKey)
        #expect(Self.refusal(authenticator, Self.bearer(forged)) == .bad_signature)

        // Claims changed after signing.
        let parts = fake.token().split(separator: ".").map(String.init)
        let now = Int64(Date().timeIntervalSince1970)
        let altered = Base64URL.encode(Array(#"{"aud":"x","email":"y","email_verified":true,"exp":\#(now + 60),"iss":"accounts.google.com"}"#.utf8))
        #expect(Self.refusal(authenticator, Self.bearer(parts[0] + "." + altered + "." + parts[2])) == .bad_signature)
        // No signature at all, and one cut short.
        #expect(Self.refusal(authenticator, Self.bearer(parts[0] + "." + parts[1] + ".")) == .bad_signature)
        let short = Base64URL.encode(Base64URL.decode(parts[2])?.dropLast(3) ?? [])
        #expect(Self.refusal(authenticator, Self.bearer(parts[0] + "." + parts[1] + "." + short)) == .bad_signature)
    }

    @Test func anotherIssuerIsWrongIssuer() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        for issuer in ["https://accounts.google.com/", "http://accounts.google.com", "https://evil.example.com", ""] {
            #expect(Self.refusal(authenticator, Self.bearer(fake.token(issuer: issuer))) == .wrong_issuer, "\(issuer)")
        }
    }

    @Test func anotherAudienceIsWrongAudience() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(audience: "https://other.example.com/push")))
            == .wrong_audience)
        let now = Int64(Date().timeIntervalSince1970)
        let base: [String: Any] = ["iss": "https://accounts.google.com", "email": FakeGoogleCerts.defaultEmail,
                                   "email_verified": true, "exp": now + 600]
        let audiences: [Any] = [["https://other.example.com"], 42, [String](), NSNull()]
        for audience in audiences {
            var claims = base
            claims["aud"] = audience
            #expect(Self.refusal(authenticator, Self.bearer(fake.token(claims: claims))) == .wrong_audience)
        }
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(claims: base))) == .wrong_audience)
    }

    @Test func anotherEmailIsWrongEmail() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        for email in ["someone@wallet-project.iam.gserviceaccount.com", FakeGoogleCerts.defaultEmail.uppercased(), ""] {
            #expect(Self.refusal(authenticator, Self.bearer(fake.token(email: email))) == .wrong_email)
        }
    }

    @Test func emailVerifiedNotTrueIsEmailNotVerified() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(emailVerified: false))) == .email_not_verified)
        let now = Int64(Date().timeIntervalSince1970)
        let values: [Any?] = [1, "false", "TRUE", "yes", nil]
        for verified in values {
            var claims: [String: Any] = ["iss": "https://accounts.google.com", "aud": FakeGoogleCerts.defaultAudience,
                                         "email": FakeGoogleCerts.defaultEmail, "exp": now + 600]
            claims["email_verified"] = verified
            #expect(Self.refusal(authenticator, Self.bearer(fake.token(claims: claims))) == .email_not_verified,
                    "\(String(describing: verified))")
        }
    }

    @Test func aPassedOrMissingExpiryIsExpired() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        // Past the 60 s skew.
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(expiresIn: -61))) == .expired)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(issuedAt: Date().addingTimeInterval(-7_200)))) == .expired)
        // Valid now, expired by a later clock.
        let token = Self.bearer(fake.token(expiresIn: 600))
        #expect(Self.refusal(authenticator, token) == nil)
        #expect(Self.refusal(authenticator, token, now: Date().addingTimeInterval(700)) == .expired)

        let base: [String: Any] = ["iss": "https://accounts.google.com", "aud": FakeGoogleCerts.defaultAudience,
                                   "email": FakeGoogleCerts.defaultEmail, "email_verified": true]
        let expiries: [Any?] = [nil, "9999999999", true, NSNull()]
        for expiry in expiries {
            var claims = base
            claims["exp"] = expiry
            #expect(Self.refusal(authenticator, Self.bearer(fake.token(claims: claims))) == .expired,
                    "\(String(describing: expiry))")
        }
    }

    @Test func anIssueTimeInTheFutureIsNotYetValid() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(issuedAt: Date().addingTimeInterval(120))))
            == .not_yet_valid)
        let now = Int64(Date().timeIntervalSince1970)
        let claims: [String: Any] = ["iss": "https://accounts.google.com", "aud": FakeGoogleCerts.defaultAudience,
                                     "email": FakeGoogleCerts.defaultEmail, "email_verified": true, "exp": now + 600,
                                     "iat": "yesterday"]
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(claims: claims))) == .not_yet_valid)
    }

    @Test func refusalsNameNoPartOfTheToken() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let token = fake.token(audience: "https://audience-marker.example.com", email: "email-marker@example.com")
        do {
            _ = try authenticator.verify(authorization: Self.bearer(token))
            Issue.record("accepted")
        } catch {
            #expect(!error.description.contains("marker"))
            #expect(!error.description.contains(String(token.prefix(20))))
        }
    }

    // MARK: Keys

    @Test func aKeyAddedAfterTheFirstFetchVerifiesAfterOneRefetch() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let start = Date()
        _ = try authenticator.verify(authorization: Self.bearer(fake.token()), now: start)
        #expect(fake.fetchCount == 1)

        let newKid = fake.rotate()
        let rotated = Self.bearer(fake.token(kid: newKid))
        // Within a minute of the last fetch, an unknown kid does not fetch.
        #expect(Self.refusal(authenticator, rotated, now: start.addingTimeInterval(30)) == .unknown_key)
        #expect(fake.fetchCount == 1)
        // Once the minute is over, it does, once.
        #expect(Self.refusal(authenticator, rotated, now: start.addingTimeInterval(61)) == nil)
        #expect(fake.fetchCount == 2)
        #expect(Self.refusal(authenticator, rotated, now: start.addingTimeInterval(62)) == nil)
        #expect(fake.fetchCount == 2)
        // The withdrawn key is gone with the refetch.
        #expect(authenticator.keyCount == 1)
    }

    @Test func fiftyUnknownKidsWithinAMinuteCostAtMostOneFetch() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let start = Date()
        _ = try authenticator.verify(authorization: Self.bearer(fake.token()), now: start)
        #expect(fake.fetchCount == 1)

        for index in 0..<50 {
            let kid = UUID().uuidString
            let now = start.addingTimeInterval(61 + Double(index))
            #expect(Self.refusal(authenticator, Self.bearer(fake.token(kid: kid)), now: now) == .unknown_key)
        }
        #expect(fake.fetchCount == 2)
        // The published key still works throughout.
        #expect(Self.refusal(authenticator, Self.bearer(fake.token()), now: start.addingTimeInterval(100)) == nil)
        #expect(fake.fetchCount == 2)
    }

    @Test func keysOlderThanAnHourAreFetchedAgain() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        let start = Date()
        let token = Self.bearer(fake.token(expiresIn: 7_200))
        #expect(Self.refusal(authenticator, token, now: start) == nil)
        #expect(Self.refusal(authenticator, token, now: start.addingTimeInterval(3_599)) == nil)
        #expect(fake.fetchCount == 1)
        #expect(Self.refusal(authenticator, token, now: start.addingTimeInterval(3_600)) == nil)
        #expect(fake.fetchCount == 2)
    }

    @Test func anUnreachableKeyEndpointIsKeysUnavailableUntilItRecovers() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let statuses = Guarded<[PushAuthenticator.StatusClass]>([])
        let authenticator = Self.authenticator(fake, timeoutSeconds: 1) { status, _ in
            statuses.withLock { $0.append(status) }
        }
        let token = Self.bearer(fake.token())
        let start = Date()

        fake.fail(status: 503)
        do {
            _ = try authenticator.verify(authorization: token, now: start)
            Issue.record("accepted without keys")
        } catch {
            #expect(error.reason == .keys_unavailable)
            #expect(error.isRetryable)
            #expect(error.detail.contains("503"))
        }
        let failedFetches = fake.fetchCount
        // 503 is retried within the one-second deadline.
        #expect(failedFetches >= 1)
        #expect(statuses.withLock { $0.allSatisfy { $0 == .serverError } })

        // Back, but within five seconds of the failed attempt nothing is asked.
        fake.fail(status: nil)
        #expect(Self.refusal(authenticator, token, now: start.addingTimeInterval(1)) == .keys_unavailable)
        #expect(fake.fetchCount == failedFetches)
        #expect(Self.refusal(authenticator, token, now: start.addingTimeInterval(6)) == nil)
        #expect(fake.fetchCount == failedFetches + 1)
        #expect(statuses.withLock { $0.last } == .success)

        // A 404 is final: no retries, and the held keys stay in use.
        fake.fail(status: 404)
        let unknown = Self.bearer(fake.token(kid: "not-published"))
        #expect(Self.refusal(authenticator, unknown, now: start.addingTimeInterval(70)) == .unknown_key)
        #expect(fake.fetchCount == failedFetches + 2)
        #expect(statuses.withLock { $0.last } == .clientError)
        #expect(Self.refusal(authenticator, token, now: start.addingTimeInterval(71)) == nil)
    }

    @Test func aClosedPortIsKeysUnavailable() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let statuses = Guarded<[PushAuthenticator.StatusClass]>([])
        // Nothing listens on port 1.
        let authenticator = PushAuthenticator(
            configuration: .init(jwksURL: URL(string: "http://127.0.0.1:1/oauth2/v3/certs")!,
                                 audience: FakeGoogleCerts.defaultAudience,
                                 serviceAccountEmail: FakeGoogleCerts.defaultEmail, timeoutSeconds: 0.5),
            observe: { status, _ in statuses.withLock { $0.append(status) } })
        #expect(Self.refusal(authenticator, Self.bearer(fake.token())) == .keys_unavailable)
        #expect(statuses.withLock { !$0.isEmpty && $0.allSatisfy { $0 == .error } })
    }

    @Test func aKeySetWithoutUsableKeysIsKeysUnavailable() throws {
        let fake = try FakeGoogleCerts(keyCount: 0)
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake)
        #expect(Self.refusal(authenticator, Self.bearer(fake.token(kid: "any"))) == .keys_unavailable)
        #expect(fake.fetchCount == 1)
    }

    @Test func theKeyCacheIsBounded() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let shared = fake.currentKey.key
        for index in 0..<40 { fake.addKey(kid: "many-\(index)", key: shared) }
        let authenticator = Self.authenticator(fake)
        _ = try authenticator.verify(authorization: Self.bearer(fake.token(kid: "fake-key-1")))
        #expect(authenticator.keyCount == PushAuthenticator.keysMax)
    }

    @Test func sixteenThreadsAtOnceCauseOneFetch() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        // A slow answer, so the other threads find the fetch in flight.
        fake.delayAnswers(seconds: 0.3)
        let authenticator = Self.authenticator(fake, timeoutSeconds: 5)
        let token = Self.bearer(fake.token())
        let accepted = Guarded(0)
        let finished = runOnThreads(16, timeoutSeconds: 20) { _ in
            if (try? authenticator.verify(authorization: token)) != nil { accepted.withLock { $0 += 1 } }
        }
        #expect(finished)
        #expect(accepted.withLock { $0 } == 16)
        #expect(fake.fetchCount == 1)
    }

    @Test func unknownKidsFromSixteenThreadsAtOnceCauseOneFetchAMinute() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        let authenticator = Self.authenticator(fake, timeoutSeconds: 5)
        let start = Date()
        _ = try authenticator.verify(authorization: Self.bearer(fake.token()), now: start)
        #expect(fake.fetchCount == 1)
        // A slow endpoint, so the threads find the refetch in flight.
        fake.delayAnswers(seconds: 0.3)
        let reasons = Guarded<[PushAuthenticationError.Reason?]>([])
        // A minute on, 16 threads send 10 tokens each, every one with a kid
        // of its own, over the next 50 seconds of the clock `verify` reads.
        let finished = runOnThreads(16, timeoutSeconds: 30) { thread in
            for index in 0..<10 {
                let token = Self.bearer(fake.token(kid: "made-up-\(thread)-\(index)"))
                let reason = Self.refusal(authenticator, token, now: start.addingTimeInterval(61 + Double(index * 5)))
                reasons.withLock { $0.append(reason) }
            }
        }
        #expect(finished)
        #expect(reasons.withLock { $0 } == Array(repeating: .unknown_key, count: 160))
        #expect(fake.fetchCount == 2)
        // The published key still verifies, without a fetch.
        #expect(Self.refusal(authenticator, Self.bearer(fake.token()), now: start.addingTimeInterval(115)) == nil)
        #expect(fake.fetchCount == 2)
    }

    @Test func waitersGiveUpAtTheirOwnDeadline() throws {
        let fake = try FakeGoogleCerts()
        defer { fake.stop() }
        fake.delayAnswers(seconds: 1.5)
        let authenticator = Self.authenticator(fake, timeoutSeconds: 0.5)
        let token = Self.bearer(fake.token())
        let reasons = Guarded<[PushAuthenticationError.Reason?]>([])
        let started = ContinuousClock.now
        let finished = runOnThreads(4, timeoutSeconds: 20) { _ in
            let reason = Self.refusal(authenticator, token)
            reasons.withLock { $0.append(reason) }
        }
        #expect(finished)
        #expect(started.duration(to: .now) < .seconds(1.4))
        #expect(reasons.withLock { $0 } == Array(repeating: .keys_unavailable, count: 4))
    }
}

/// A value the test threads share, behind a lock.
private final class Guarded<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
