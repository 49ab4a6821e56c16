import Foundation
import Testing
@testable import WalletClient

/// Decoding holds to the document: a required member must be there (null
/// where the document allows it), and members it does not name are
/// tolerated. Problems become their code's type, or the unknown one.
@Suite
struct DecodingTests {
    static let debit = #"""
        {"id":2,"user_id":"p","currency":"coin","amount":100,"reason":null,"entry_id":2,
         "created_at":"2026-12-02T12:45:46.213920Z","added_later":{"x":1}}
        """#

    @Test func aRequiredMemberMayBeNullButNotMissing() throws {
        let debit = try JSONDecoder().decode(Debit.self, from: Data(Self.debit.utf8))
        #expect(debit.reason == nil)
        #expect(debit.createdAt.text == "2026-12-02T12:45:46.213920Z")

        let withoutReason = Self.debit.replacingOccurrences(of: #""reason":null,"#, with: "")
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Debit.self, from: Data(withoutReason.utf8))
        }
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(EntriesPage.self, from: Data(#"{"entries":[]}"#.utf8))
        }
        let lastPage = try JSONDecoder().decode(EntriesPage.self, from: Data(#"{"entries":[],"next_cursor":null}"#.utf8))
        #expect(lastPage.nextCursor == nil)
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Balance.self, from: Data(#"{"user_id":"p","currency":"coin","balance":1,"held":0}"#.utf8))
        }
    }

    @Test func aValueTheClientDoesNotKnowStillDecodes() throws {
        let entry = try JSONDecoder().decode(Entry.self, from: Data(#"""
            {"id":9,"currency":"coin","amount":-5,"balance_after":1,"kind":"clawback","reference":"r",
             "created_at":"2026-12-02T12:45:46.213920Z"}
            """#.utf8))
        #expect(entry.kind.rawValue == "clawback")
        #expect(entry.kind != .debit)
    }

    @Test func aDecodedResultEncodesBackWithTheDocumentsNames() throws {
        let debit = try JSONDecoder().decode(Debit.self, from: Data(Self.debit.utf8))
        let encoded = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(debit))
        #expect(encoded["user_id"] == "p")
        #expect(encoded["entry_id"] == 2)
        #expect(encoded["reason"] == .null)
        #expect(encoded["added_later"] == nil)
    }

    static func problem(_ members: String, status: Int = 409) throws -> ProblemDetails {
        let body = #"{"type":"urn:problem:x","title":"T","status":\#(status),"detail":"D","instance":"i1",\#(members)}"#
        return try #require(ProblemDetails(body: Data(body.utf8), retryAfterSeconds: nil, replayed: false,
                                           idempotencyKey: nil, attempts: 1))
    }

    @Test func aProblemBecomesItsCodesTypeWithItsMembers() throws {
        let refused = try ProblemCatalog.error(for: Self.problem(#""code":"insufficient_funds","balance":5,"available":3"#))
        let funds = try #require(refused as? InsufficientFundsError)
        #expect(funds.balance == 5)
        #expect(funds.available == 3)
        #expect(funds.detail == "D")
        #expect(funds.description == "insufficient_funds (HTTP 409): T")

        let validation = try ProblemCatalog.error(for: Self.problem(
            #""code":"validation_failed","errors":[{"field":"amount","message":"too small"}]"#, status: 422))
        #expect((validation as? ValidationFailedError)?.errors == [FieldError(field: "amount", message: "too small")])

        let unknown = try ProblemCatalog.error(for: Self.problem(#""code":"dragon_asleep","lair":7"#))
        let kept = try #require(unknown as? UnknownProblemError)
        #expect(kept.code == "dragon_asleep")
        #expect(kept.problem.members["lair"] == 7)

        // A known code without the member its type requires is not that type.
        #expect(throws: (any Error).self) {
            try ProblemCatalog.error(for: Self.problem(#""code":"insufficient_funds","balance":5"#))
        }
        // Not a problem document at all.
        #expect(ProblemDetails(body: Data("<html>bad gateway</html>".utf8), retryAfterSeconds: nil, replayed: false,
                               idempotencyKey: nil, attempts: 1) == nil)
    }

    @Test func theBackoffDoublesToItsCapWithJitter() {
        let policy = RetryPolicy()
        for attempt in 1...12 {
            let full = min(2.0, 0.1 * Double(1 << (attempt - 1)))
            let pause = policy.backoff(after: attempt).seconds
            #expect(pause >= full / 2 && pause <= full, "attempt \(attempt): \(pause)")
        }
        #expect(WalletClient.delaySeconds("3") == 3)
        #expect(WalletClient.delaySeconds("Wed, 21 Oct 2026 07:28:00 GMT") == nil)
    }
}
