import Foundation
import Locking
import Testing
import WalletClient

/// Five hundred debits through one client with its default retries, from
/// eight concurrent tasks, while the `wallet serve` process is killed with
/// SIGKILL and started again on the same port and data directory three
/// times. Afterwards, read through the API: every debit is in the ledger
/// exactly once under the key the client sent, nothing else was debited,
/// and the balances fell by exactly the sum of the amounts.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct ClientChaosTests {
    static let debitCount = 500
    static let workerCount = 8
    static let playerCount = 5
    /// Acknowledged debits after which the service is killed, one kill each.
    static let killAfter = [100, 220, 340]

    @Test func fiveHundredDebitsThroughKillsAreAppliedExactlyOnce() async throws {
        let fixture = try await Fixture.make()
        let players = (0..<Self.playerCount).map { fixture.unique("chaos\($0)") }
        for player in players {
            _ = try await fixture.game.createGrant(userID: player, amount: 100_000, reason: "chaos float")
        }
        let before = try await balances(of: players, fixture: fixture)

        let client = fixture.wallet.client(fixture.wallet.gameServerKey)
        let jobs = (0..<Self.debitCount).map { (player: players[$0 % players.count], amount: Int64($0 % 9 + 1)) }
        let nextJob = Locked(0)
        let acknowledged = Locked(0)
        let (progress, reporter) = AsyncStream<Int>.makeStream()

        let wallet = fixture.wallet
        let controller = Task { () -> Int in
            var kills = 0
            for await count in progress where kills < Self.killAfter.count && count >= Self.killAfter[kills] {
                try await onOwnThread { try wallet.killAndRestart() }
                kills += 1
            }
            return kills
        }

        defer {
            reporter.finish()
            controller.cancel()
        }

        let results = try await withThrowingTaskGroup(of: [(job: Int, result: WriteResult<DebitResponse>)].self) { group in
            for _ in 0..<Self.workerCount {
                group.addTask {
                    var mine: [(job: Int, result: WriteResult<DebitResponse>)] = []
                    // Bounded by the job list.
                    while let job = nextJob.withLock({ next -> Int? in
                        guard next < jobs.count else { return nil }
                        defer { next += 1 }
                        return next
                    }) {
                        let result = try await client.createDebit(userID: jobs[job].player, amount: jobs[job].amount,
                                                                  reason: "chaos")
                        mine.append((job, result))
                        reporter.yield(acknowledged.withLock { count in
                            count += 1
                            return count
                        })
                    }
                    return mine
                }
            }
            var all: [(job: Int, result: WriteResult<DebitResponse>)] = []
            for try await batch in group { all += batch }
            return all
        }
        reporter.finish()
        let kills = try await controller.value

        // The audit, through the API.
        let keys = Dictionary(results.map { ($0.result.idempotencyKey ?? "", jobs[$0.job].amount) }, uniquingKeysWith: { first, _ in first })
        var debitsByKey: [String: [Int64]] = [:]
        var strays = 0
        for player in players {
            for try await entry in fixture.game.entries(userID: player, pageSize: 500) where entry.kind == .debit {
                if keys[entry.reference] == nil { strays += 1 }
                debitsByKey[entry.reference, default: []].append(-entry.amount)
            }
        }
        let applied = keys.keys.filter { debitsByKey[$0] != nil }.count
        let doubled = debitsByKey.values.filter { $0.count > 1 }.count
        let after = try await balances(of: players, fixture: fixture)
        let spent = jobs.map(\.amount).reduce(0, +)
        let statistics = client.statistics
        print("chaos: debits=\(results.count) applied=\(applied) doubled=\(doubled) retries=\(client.retryCount) kills=\(kills)")
        print("chaos: retries after a connection failure=\(statistics.retriesAfterConnectionFailure)"
            + " outcome_unknown=\(statistics.retriesAfterOutcomeUnknown) 503 with Retry-After=\(statistics.retriesAfterRetryAfter)"
            + " replayed=\(results.filter(\.result.replayed).count)")

        #expect(results.count == Self.debitCount)
        #expect(keys.count == Self.debitCount, "every call had a key of its own")
        #expect(applied == Self.debitCount)
        #expect(doubled == 0)
        #expect(strays == 0)
        #expect(debitsByKey.allSatisfy { key, amounts in amounts == [keys[key]] })
        #expect(before.values.reduce(0, +) - after.values.reduce(0, +) == spent)
        for player in players {
            let expected = jobs.filter { $0.player == player }.map(\.amount).reduce(0, +)
            #expect(before[player]! - after[player]! == expected, "\(player)")
        }
        #expect(kills == Self.killAfter.count)
        // The kills were felt: calls in flight or just after lost their connection.
        #expect(statistics.retriesAfterConnectionFailure > 0)
    }

    private func balances(of players: [String], fixture: Fixture) async throws -> [String: Int64] {
        var balances: [String: Int64] = [:]
        for player in players {
            balances[player] = try #require(try await fixture.game.getWallet(userID: player).balance(in: "coin")).balance
        }
        return balances
    }
}
