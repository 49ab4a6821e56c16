import Foundation
import Timestamps
import WalletCore
import WalletService
import WalletStore

/// `wallet googleplay reconcile|consumption`.
enum GooglePlayCommand {
    static let help = """
        usage: wallet googleplay reconcile [--since RFC3339]
               wallet googleplay consumption list [--limit N]

        reconcile    reads Google Play's voided purchases and applies every void
                     of a one-time product, as if pushed; prints
                     seen=N applied=N already=N refused=N failed=N. Without
                     --since it covers the time since the last sweep (minus an
                     hour), or the last 30 days (all Google keeps), and records
                     how far it got: up to the first void the database did not
                     apply, which the next run tries again (the others are
                     applied). Exit 0 when every void was applied; 1 when Google
                     could not be read, or a void failed (each named on stderr).

        consumption  lists the consumes of credited Google Play purchases, sent
                     or due, newest first: each purchase is consumed once it is
                     credited, so Google does not refund it after three days
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        switch arguments.first {
        case "reconcile":
            return try reconcile(Array(arguments.dropFirst()), environment: environment)
        case "consumption":
            guard arguments.dropFirst().first == "list" else { throw UsageError(message: help) }
            return try OutboxCommand.list(.googlePlayConsume, Array(arguments.dropFirst(2)), environment: environment,
                                          help: help)
        default:
            print(help)
            return arguments.contains("--help") || arguments.contains("-h") ? 0 : 2
        }
    }
}

extension GooglePlayCommand {
    private static func reconcile(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let invocation = try WalletCommand.invocation(
            arguments, environment: environment, values: ["since", "database-url", "data-dir"], help: help) else { return 0 }
        let since = try invocation.options.values["since"].map { try AppStoreCommand.date($0, option: "since") }
        let run: ReconcileCommand.Run
        do {
            run = try ReconcileCommand.runVoidedSweep(configuration: invocation.configuration, since: since,
                                                      logger: invocation.logger)
        } catch let error as Configuration.ConfigurationError {
            throw UsageError(message: "configuration: \(error.description)")
        }
        for refusal in run.refusals { WalletCommand.printError(refusal) }
        for failure in run.failures { WalletCommand.printError(failure) }
        print(run.summaryLine)
        if let failure = run.failure {
            WalletCommand.printError("reconcile failed: \(failure)")
            return 1
        }
        return run.failures.isEmpty ? 0 : 1
    }
}

/// Lists one kind of outbox row, newest first, tab-separated.
enum OutboxCommand {
    static func list(_ kind: OutboxKind, _ arguments: [String], environment: [String: String], help: String) throws -> Int32 {
        guard let invocation = try WalletCommand.invocation(
            arguments, environment: environment, values: ["limit", "database-url", "data-dir"], help: help) else { return 0 }
        let limitText = invocation.options.values["limit"] ?? "50"
        guard let limit = Int(limitText), (1...10_000).contains(limit) else {
            throw UsageError(message: "--limit must be an integer from 1 to 10000")
        }
        let records = try Administration.withDatabase(invocation.configuration, logger: invocation.logger) {
            try $0.outboxRecords(kind, limit: limit)
        }
        let keyTitle = kind == .appStoreConsumption ? "NOTIFICATION" : "PURCHASE_TOKEN"
        print([keyTitle, "FLOW_NO", "ENVIRONMENT", "STATUS", "ATTEMPTS", "CREATED", "SENT", "BODY", "LAST ERROR"]
            .joined(separator: "\t"))
        for record in records {
            print([record.key, record.flowNo, record.environment.rawValue, record.status.rawValue, String(record.attempts),
                   record.createdAt.rfc3339, record.sentAt?.rfc3339 ?? "-", record.requestBody ?? "-", record.lastError ?? "-"]
                .joined(separator: "\t"))
        }
        return 0
    }
}
