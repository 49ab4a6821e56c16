import Foundation
import Timestamps
import WalletCore
import WalletService
import WalletStore

/// `wallet keys create|list|revoke`.
enum KeysCommand {
    static let help = """
        usage: wallet keys create --name NAME --scopes SCOPE[,SCOPE...]
               wallet keys list
               wallet keys revoke NAME

        Scopes: credit (POST /v1/credits), debit (POST /v1/debits),
        grant (POST /v1/grants), read (GET wallets, entries, credits, holds),
        events (GET /v1/events), console (the support console at /admin, and
        no /v1 route: for support agents), admin (everything).
        `create` prints the new secret alone on the last line; it is shown once.
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let action = try WalletCommand.action(arguments, help: help) else { return 0 }
        guard let invocation = try WalletCommand.invocation(
            Array(arguments.dropFirst()), environment: environment, values: ["name", "scopes", "database-url", "data-dir"],
            positionals: action == "revoke" ? 1 : 0, help: help) else { return 0 }
        let (options, configuration, logger) = (invocation.options, invocation.configuration, invocation.logger)
        switch action {
        case "create":
            guard let name = options.values["name"], let scopeText = options.values["scopes"] else {
                throw UsageError(message: "wallet keys create needs --name and --scopes\n\n\(help)")
            }
            let scopes = try Administration.parseScopes(scopeText)
            let secret = try Administration.withDatabase(configuration, logger: logger, migrateFirst: true) {
                try $0.createKey(name: name, scopes: scopes)
            }
            print("created key \(name) with scopes \(scopes.map(\.rawValue).joined(separator: ","))")
            print("the secret is shown once, on the next line:")
            print(secret)
        case "list":
            let keys = try Administration.withDatabase(configuration, logger: logger, migrateFirst: true) {
                try $0.listKeys()
            }
            print(pad(["NAME", "SCOPES", "CREATED", "LAST USED", "REVOKED"]))
            for key in keys {
                print(pad([key.name, key.scopes.map(\.rawValue).joined(separator: ","), key.createdAt.rfc3339,
                           key.lastUsedAt?.rfc3339 ?? "-", key.revokedAt?.rfc3339 ?? "-"]))
            }
        case "revoke":
            guard let name = options.positionals.first else { throw UsageError(message: help) }
            try Administration.withDatabase(configuration, logger: logger, migrateFirst: true) {
                try $0.revokeKey(name: name)
            }
            print("revoked key \(name); running services refuse it within seconds")
        default:
            throw UsageError(message: "unknown keys action \(action)\n\n\(help)")
        }
        return 0
    }

    private static func pad(_ columns: [String]) -> String {
        let widths = [24, 22, 28, 28, 28]
        return zip(columns, widths).map { $0.padding(toLength: max($1, $0.count + 1), withPad: " ", startingAt: 0) }
            .joined().trimmingCharacters(in: .whitespaces)
    }
}
