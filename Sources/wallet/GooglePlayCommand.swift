import Foundation
import WalletStore

/// `wallet googleplay consumption list`.
enum GooglePlayCommand {
    static let help = """
        usage: wallet googleplay consumption list [--limit N]

        consumption  lists the consumes of credited Google Play purchases, sent
                     or due, newest first: each purchase is consumed once it is
                     credited, so Google does not refund it after three days
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        switch arguments.first {
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
            print([record.key, record.flowNo, record.environment, record.status, String(record.attempts),
                   record.createdAt, record.sentAt ?? "-", record.requestBody ?? "-", record.lastError ?? "-"]
                .joined(separator: "\t"))
        }
        return 0
    }
}
