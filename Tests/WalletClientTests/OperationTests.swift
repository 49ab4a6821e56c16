import Foundation
import Testing
import WalletClient

/// Every operation of the client through the real `wallet serve` and its
/// PostgreSQL: results typed as the document says, replays recognised,
/// and each refusal caught by its own error type.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct OperationTests {
    @Test func aCreditIsMadeOnceAndItsReplayIsRecognised() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("credit")
        let flowNo = fixture.unique("flow")

        let first = try await fixture.app.createCredit(userID: player, flowNo: flowNo, productID: "guodong600")
        #expect(first.status == 201)
        #expect(!first.replayed)
        #expect(first.idempotencyKey == nil)
        #expect(first.credit.flowNo == flowNo)
        #expect(first.credit.userID == player)
        #expect(first.credit.amount == 600)
        #expect(first.credit.quantity == 1)
        #expect(first.credit.status == .credited)
        #expect(first.credit.createdAt.date != nil)
        #expect(first.balance.balance == 600)
        #expect(first.balance.available == 600)

        let again = try await fixture.app.createCredit(userID: player, flowNo: flowNo, productID: "guodong600")
        #expect(again.status == 200)
        #expect(again.replayed)
        #expect(again.credit == first.credit)
        #expect(again.balance.balance == 600)

        let record = try await fixture.app.getCredit(flowNo: flowNo).credit
        #expect(record.credit == first.credit)
        #expect(record.amount == 600)
        #expect(record.source == .caller)
        #expect(record.environment == nil)
        #expect(record.refundedAmount == nil)
        #expect(record.lines == [])

        let conflict = try await #require(throws: FlowNoConflictError.self) {
            try await fixture.app.createCredit(userID: fixture.unique("thief"), flowNo: flowNo, productID: "guodong600")
        }
        #expect(conflict.status == 409)
        #expect(conflict.code == "flow_no_conflict")
        #expect(!conflict.instance.isEmpty)
        #expect(conflict.problem.attempts == 1)
        #expect(try await fixture.game.getWallet(userID: player).balance(in: "coin")?.balance == 600)
    }

    @Test func aCreditWithTheWrongAmountOrBadEvidenceIsRefusedAndChangesNothing() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("refused")

        let mismatch = try await #require(throws: AmountMismatchError.self) {
            try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600",
                                               quantity: 2, amount: 60_000)
        }
        #expect(mismatch.expectedAmount == 1_200)
        #expect(mismatch.status == 422)

        let unverified = try await #require(throws: VerificationFailedError.self) {
            try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600",
                                               evidence: .signedTransaction("not.a.jws"))
        }
        #expect(!unverified.reason.isEmpty)

        await #expect(throws: UnknownProductError.self) {
            try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "no-such-bundle")
        }
        await #expect(throws: NotFoundError.self) {
            try await fixture.app.getCredit(flowNo: fixture.unique("never"))
        }
        let wallet = try await fixture.game.getWallet(userID: player)
        #expect(wallet.balance(in: "coin")?.balance == 0)
    }

    @Test func debitsReplayTheirFirstAnswerAndRefuseByName() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("debit")
        _ = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600")

        let key = fixture.unique("order")
        let first = try await fixture.game.createDebit(userID: player, amount: 100, reason: "sword",
                                                       metadata: ["level": 3, "shop": "forge"], idempotencyKey: key)
        #expect(first.status == 201)
        #expect(!first.replayed)
        #expect(first.idempotencyKey == key)
        #expect(first.debit.amount == 100)
        #expect(first.debit.reason == "sword")
        #expect(first.debit.id == first.debit.entryID)
        #expect(first.balance.balance == 500)

        // The same key and request: the first answer, the balance as it was then.
        let replay = try await fixture.game.createDebit(userID: player, amount: 100, reason: "sword",
                                                        metadata: ["shop": "forge", "level": 3], idempotencyKey: key)
        #expect(replay.replayed)
        #expect(replay.debit == first.debit)
        #expect(replay.balance == first.balance)

        let reused = try await #require(throws: IdempotencyKeyReusedError.self) {
            try await fixture.game.createDebit(userID: player, amount: 101, idempotencyKey: key)
        }
        #expect(reused.status == 422)

        // Without a key the client makes one: a UUID v4.
        let unkeyed = try await fixture.game.createDebit(userID: player, amount: 50)
        let generated = try #require(unkeyed.idempotencyKey)
        #expect(generated.wholeMatch(of: /[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}/) != nil)
        #expect(unkeyed.debit.reason == nil)
        #expect(unkeyed.balance.balance == 450)

        // Too much: refused by name, and the refusal is stored under its key.
        let poorKey = fixture.unique("too-much")
        let poor = try await #require(throws: InsufficientFundsError.self) {
            try await fixture.game.createDebit(userID: player, amount: 10_000, idempotencyKey: poorKey)
        }
        #expect(poor.balance == 450)
        #expect(poor.available == 450)
        #expect(!poor.problem.replayed)
        #expect(poor.problem.idempotencyKey == poorKey)
        let poorAgain = try await #require(throws: InsufficientFundsError.self) {
            try await fixture.game.createDebit(userID: player, amount: 10_000, idempotencyKey: poorKey)
        }
        #expect(poorAgain.problem.replayed)
        #expect(poorAgain.instance == poor.instance)

        let balance = try await fixture.game.getWallet(userID: player, currency: "coin")
        #expect(balance.balances.map(\.balance) == [450])
    }

    @Test func aGrantGivesFreeCoinsThatExpireAndIsLimited() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("grant")
        let key = fixture.unique("login")

        let grant = try await fixture.game.createGrant(userID: player, amount: 250, reason: "daily login",
                                                       expiresInDays: 7, idempotencyKey: key)
        #expect(grant.status == 201)
        #expect(!grant.replayed)
        #expect(grant.grant.amount == 250)
        #expect(grant.grant.reason == "daily login")
        let expiry = try #require(grant.grant.expiresAt?.date)
        let days = expiry.timeIntervalSinceNow / 86_400
        #expect(days > 6.9 && days <= 7)
        #expect(grant.balance.balance == 250)

        let replay = try await fixture.game.createGrant(userID: player, amount: 250, reason: "daily login",
                                                        expiresInDays: 7, idempotencyKey: key)
        #expect(replay.replayed)
        #expect(replay.grant == grant.grant)

        let forever = try await fixture.game.createGrant(userID: player, amount: 5, reason: "welcome")
        #expect(forever.grant.expiresAt == nil)

        let coin = try #require(try await fixture.game.getWallet(userID: player).balance(in: "coin"))
        #expect(coin.balance == 255)
        #expect(coin.free == 255)
        #expect(coin.paid == 0)
        #expect(coin.debt == 0)
        #expect(coin.nextExpiry?.amount == 250)

        let limited = try await #require(throws: GrantLimitExceededError.self) {
            try await fixture.game.createGrant(userID: player, amount: 50_000_000, reason: "jackpot")
        }
        #expect(limited.maxAmount > 0)
    }

    @Test func holdsArePlacedCapturedReleasedReadAndListed() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("holds")
        _ = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600")

        let entry = try await fixture.game.createHold(userID: player, amount: 100, reason: "match 77 entry",
                                                      metadata: ["match": 77], expiresInSeconds: 600)
        #expect(entry.status == 201)
        #expect(entry.hold.status == .held)
        #expect(entry.hold.reason == "match 77 entry")
        #expect(entry.hold.metadata?["match"] == 77)
        #expect(entry.balance.held == 100)
        #expect(entry.balance.available == 500)
        let side = try await fixture.game.createHold(userID: player, amount: 50)

        let capture = try await fixture.game.captureHold(id: entry.hold.id, amount: 60)
        #expect(capture.hold.status == .captured)
        #expect(capture.hold.capturedAmount == 60)
        #expect(capture.debit.amount == 60)
        #expect(capture.balance.balance == 540)
        #expect(capture.balance.held == 50)
        let captureReplay = try await fixture.game.captureHold(id: entry.hold.id, amount: 60,
                                                               idempotencyKey: capture.idempotencyKey)
        #expect(captureReplay.replayed)
        #expect(captureReplay.debit == capture.debit)

        let release = try await fixture.game.releaseHold(id: side.hold.id)
        #expect(release.status == 200)
        #expect(release.hold.status == .released)
        #expect(release.balance.held == 0)

        let notActive = try await #require(throws: HoldNotActiveError.self) {
            try await fixture.game.captureHold(id: side.hold.id)
        }
        #expect(notActive.holdStatus == .released)

        let small = try await fixture.game.createHold(userID: player, amount: 30)
        let exceeds = try await #require(throws: AmountExceedsHoldError.self) {
            try await fixture.game.captureHold(id: small.hold.id, amount: 31)
        }
        #expect(exceeds.heldAmount == 30)

        let read = try await fixture.game.getHold(id: entry.hold.id).hold
        #expect(read.status == .captured)
        #expect(read.capturedAt != nil)

        let active = try await fixture.game.listHolds(userID: player, status: .active)
        #expect(active.holds.map(\.id) == [small.hold.id])
        #expect(active.nextCursor == nil)

        var all: [Hold] = []
        for try await hold in fixture.game.holds(userID: player, pageSize: 2) { all.append(hold) }
        #expect(all.map(\.id) == [small.hold.id, side.hold.id, entry.hold.id])

        await #expect(throws: NotFoundError.self) {
            try await fixture.game.getHold(id: 999_999_999)
        }
    }

    @Test func historyPagesThroughEveryEntryAndBalancesAddUp() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("history")
        _ = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600")
        for _ in 0..<6 { _ = try await fixture.game.createDebit(userID: player, amount: 10) }

        let firstPage = try await fixture.game.listEntries(userID: player, limit: 3)
        #expect(firstPage.entries.count == 3)
        #expect(firstPage.nextCursor != nil)

        var entries: [Entry] = []
        for try await entry in fixture.game.entries(userID: player, pageSize: 3) { entries.append(entry) }
        #expect(entries.count == 7)
        #expect(entries.map(\.id) == entries.map(\.id).sorted(by: >))
        #expect(entries.map(\.kind) == Array(repeating: EntryKind.debit, count: 6) + [.credit])
        #expect(entries.first?.balanceAfter == 540)
        #expect(entries.map(\.amount).reduce(0, +) == 540)

        let wallet = try await fixture.game.getWallet(userID: player)
        #expect(wallet.userID == player)
        #expect(wallet.balance(in: "coin")?.balance == 540)
        #expect(wallet.balance(in: "coin")?.paid == 540)

        await #expect(throws: UnknownCurrencyError.self) {
            try await fixture.game.getWallet(userID: player, currency: "nosuchcoin")
        }
        let invalid = try await #require(throws: ValidationFailedError.self) {
            try await fixture.game.listEntries(userID: player, limit: 0)
        }
        #expect(invalid.errors.map(\.field) == ["limit"])
    }

    @Test func creditsAreListedAcrossPagesAndAccountTokensRead() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("buyer")
        let older = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600")
        let newer = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong1200")

        let page = try await fixture.app.listCredits(userID: player, limit: 1)
        #expect(page.credits.map(\.flowNo) == [newer.credit.flowNo])
        #expect(page.nextCursor != nil)

        var records: [CreditRecord] = []
        for try await record in fixture.app.credits(userID: player, pageSize: 1) { records.append(record) }
        #expect(records.map(\.flowNo) == [newer.credit.flowNo, older.credit.flowNo])
        #expect(records.map(\.amount) == [1_200, 600])
        #expect(records.allSatisfy { $0.source == .caller && $0.status == .credited })

        let tokens = try await fixture.app.getAccountTokens(userID: player)
        #expect(tokens.userID == player)
        #expect(tokens.googleObfuscatedAccountID.wholeMatch(of: /[0-9a-f]{64}/) != nil)
        // No App Store namespace is configured on the development service.
        #expect(tokens.appleAppAccountToken == nil)
    }

    @Test func theEventFeedIsWalkedUntilCaughtUp() async throws {
        let fixture = try await Fixture.make()
        let player = fixture.unique("events")
        let credit = try await fixture.app.createCredit(userID: player, flowNo: fixture.unique("flow"), productID: "guodong600")
        let debit = try await fixture.game.createDebit(userID: player, amount: 25, reason: "potion")
        let hold = try await fixture.game.createHold(userID: player, amount: 40)
        _ = try await fixture.game.releaseHold(id: hold.hold.id)
        _ = try await fixture.game.createGrant(userID: player, amount: 5, reason: "sorry")

        var events: [Event] = []
        for try await event in fixture.events.events(after: 0, pageSize: 2, userID: player) { events.append(event) }
        #expect(events.map(\.type) == [.creditCreated, .debitCreated, .holdPlaced, .holdReleased, .grantCreated])
        #expect(events.map(\.id) == events.map(\.id).sorted())
        #expect(Set(events.map(\.id)).count == events.count)
        #expect(events.allSatisfy { $0.userID == player })
        #expect(events[0].flowNo == credit.credit.flowNo)
        #expect(events[0].amount == 600)
        #expect(events[1].entryID == debit.debit.entryID)
        #expect(events[1].amount == -25)
        #expect(events[1].data["reason"] == "potion")
        #expect(events[2].holdID == hold.hold.id)
        #expect(events[2].entryID == nil)
        #expect(events[2].held == 40)
        #expect(events.last?.balanceAfter == 580)
        #expect(events.map(\.amount).reduce(0, +) == 580)

        // Caught up: the page after the last event is empty.
        let after = try await fixture.events.listEvents(after: try #require(events.last?.id), userID: player)
        #expect(after.events.isEmpty)
        let grants = try await fixture.events.listEvents(after: 0, userID: player, type: .grantCreated)
        #expect(grants.events.map(\.type) == [.grantCreated])
    }

    @Test func healthReadinessAndTheDocumentNeedNoKey() async throws {
        let fixture = try await Fixture.make()
        let anonymous = fixture.wallet.client("wk_none")
        #expect(try await anonymous.getHealth().status == "ok")
        #expect(try await anonymous.getReadiness().status == "ready")
        let document = try await anonymous.getOpenAPIDocument()
        #expect(document["openapi"]?.stringValue?.hasPrefix("3.1") == true)
    }

    @Test func keysAndScopesAreRefusedByName() async throws {
        let fixture = try await Fixture.make()
        let stranger = fixture.wallet.client("wk_" + String(repeating: "A", count: 43))
        let unauthorized = try await #require(throws: UnauthorizedError.self) {
            try await stranger.getWallet(userID: "anyone")
        }
        #expect(unauthorized.status == 401)

        // The app backend's key may credit and read, not spend.
        let forbidden = try await #require(throws: ForbiddenError.self) {
            try await fixture.app.createDebit(userID: fixture.unique("nobody"), amount: 1)
        }
        #expect(forbidden.status == 403)
        #expect((forbidden as any WalletProblemError).code == "forbidden")

        let invalid = try await #require(throws: ValidationFailedError.self) {
            try await fixture.game.createDebit(userID: "not a user id", amount: 0)
        }
        #expect(Set(invalid.errors.map(\.field)) == ["user_id", "amount"])
    }
}
