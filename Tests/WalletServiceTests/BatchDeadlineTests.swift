import Foundation
import Logging
import Postgres
import Synchronization
import Testing
import TestSupport
@testable import WalletCore
@testable import WalletService

/// A batch runs against its items' earliest deadline, so an operation with
/// almost no time left is answered without being sent: otherwise it would
/// cut its whole batch's time short and turn every operation of it into an
/// unknown outcome.
@Suite(.timeLimit(.minutes(1)))
struct BatchDeadlineTests {
    @Test func anOperationWithTooLittleTimeLeftIsNotSent() throws {
        let database = try TestDatabase.make()
        var configuration = ConnectionPool.Configuration(connection: database)
        configuration.maximumConnections = 1
        let pool = ConnectionPool(configuration: configuration, logger: Logger(label: "test", sink: .discard))
        let writer = GroupCommit(writerCount: 1, batchOperationsMax: 256, pool: pool, metrics: Metrics(),
                                 logger: Logger(label: "test", sink: .discard))
        defer { writer.shutdown(timeoutSeconds: 10); pool.shutdown() }

        func credit(_ flowNo: String, within time: Duration) -> Result<GroupCommit.Outcome, any Error>? {
            let operation = LedgerStore.CreditOperation(
                client: "app", flowNo: FlowNumber(flowNo)!, userID: UserID("ann")!, productID: ProductID("guodong600")!,
                quantity: Quantity(1)!, claimedAmount: nil, source: .caller, environment: nil)
            let answer = Mutex<Result<GroupCommit.Outcome, any Error>?>(nil)
            let done = DispatchSemaphore(value: 0)
            writer.submit(.credit(operation), deadline: .now + time) { result in
                answer.withLock { $0 = result }
                done.signal()
            }
            _ = done.wait(timeout: .now() + 30)
            return answer.withLock { $0 }
        }

        let hurried = credit("hurried-1", within: GroupCommit.sendTimeMin / 2)
        guard case .failure(let error as WalletError)? = hurried else {
            Issue.record("an operation with too little time left was run: \(String(describing: hurried))")
            return
        }
        #expect(error == .databaseUnavailable)
        guard case .success(.credit(let result))? = credit("patient-1", within: .seconds(30)) else {
            Issue.record("an operation with time to spare was not applied")
            return
        }
        #expect(result.outcome == .credited)
        let connection = try Connection(options: database)
        #expect(try connection.query("SELECT count(*) FROM wallet.credits")[0].decode(Int.self, at: 0) == 1)
        #expect(try connection.query("SELECT count(*) FROM wallet.credits WHERE flow_no = 'hurried-1'")[0]
            .decode(Int.self, at: 0) == 0)
    }
}
