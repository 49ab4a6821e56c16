import Foundation
import Timestamps
import WalletCore
import WalletService
import WalletStore

/// `wallet webhooks add|list|disable|enable`.
enum WebhooksCommand {
    static let help = """
        usage: wallet webhooks add --url URL --events TYPES --secret-file FILE [--operator NAME]
               wallet webhooks list
               wallet webhooks disable ID [--operator NAME]
               wallet webhooks enable ID [--operator NAME]

        add registers an endpoint that receives, from the next event on, one
        POST per event of TYPES: a comma-separated list of event types, or *
        for all. The URL must be https:// (http:// too with
        WALLET_WEBHOOKS_ALLOW_HTTP=true, for development and loopback). The
        secret signs every delivery (Wallet-Signature); FILE holds it, 16 to
        4096 bytes, a final newline dropped. add prints id=N on its last line.
        disable stops an endpoint's deliveries; enable resumes them from where
        they stopped. Every change is audited under --operator (default: $USER).

        Event types: \(EventType.allCases.map(\.rawValue).joined(separator: ", "))
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let action = try WalletCommand.action(arguments, help: help) else { return 0 }
        guard let invocation = try WalletCommand.invocation(
            Array(arguments.dropFirst()), environment: environment,
            values: ["url", "events", "secret-file", "operator", "database-url", "data-dir"],
            positionals: ["disable", "enable"].contains(action) ? 1 : 0, help: help) else { return 0 }
        let (options, configuration, logger) = (invocation.options, invocation.configuration, invocation.logger)
        let operatorName = options.values["operator"] ?? environment["USER"] ?? "wallet-cli"
        switch action {
        case "add":
            guard let url = options.values["url"], let events = options.values["events"],
                  let secretFile = options.values["secret-file"] else {
                throw UsageError(message: "wallet webhooks add needs --url, --events and --secret-file\n\n\(help)")
            }
            try checkURL(url, allowHTTP: configuration.webhooksAllowHTTP)
            let types = try parseTypes(events)
            let secret = try readSecret(secretFile)
            let id = try Administration.withDatabase(configuration, logger: logger, migrateFirst: true) {
                try $0.addWebhook(url: url, types: types, secret: secret, operator: operatorName)
            }
            print("added webhook endpoint \(id) for \(types.map { $0.map(\.rawValue).joined(separator: ",") } ?? "*")")
            print("id=\(id)")
        case "list":
            let endpoints = try Administration.withDatabase(configuration, logger: logger, migrateFirst: true) {
                try $0.webhookEndpoints()
            }
            print(["ID", "STATE", "PENDING", "BEHIND", "EVENTS", "URL"].joined(separator: "\t"))
            for endpoint in endpoints {
                let state = endpoint.enabled
                    ? (endpoint.failingSince.map { "failing since \($0.rfc3339)" } ?? "enabled")
                    : "disabled: \(endpoint.disabledReason ?? "-")"
                print([String(endpoint.id), state, String(endpoint.pending),
                       "\(Int(endpoint.oldestUndeliveredSeconds.rounded()))s",
                       endpoint.eventTypes.map { $0.map(\.rawValue).joined(separator: ",") } ?? "*", endpoint.url]
                    .joined(separator: "\t"))
            }
        case "disable", "enable":
            guard let text = options.positionals.first, let id = Int64(text), id > 0 else {
                throw UsageError(message: "wallet webhooks \(action) needs an endpoint id\n\n\(help)")
            }
            let enabled = action == "enable"
            let changed = try Administration.withDatabase(configuration, logger: logger, migrateFirst: true) {
                try $0.setWebhookEnabled(id: id, enabled: enabled, operator: operatorName)
            }
            print("webhook endpoint \(id) \(changed ? "is now" : "was already") \(enabled ? "enabled" : "disabled")")
        default:
            throw UsageError(message: "unknown webhooks action \(action)\n\n\(help)")
        }
        return 0
    }

    /// `*`, or known types, each once.
    static func parseTypes(_ text: String) throws -> [EventType]? {
        if text == "*" { return nil }
        var types: [EventType] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let name = part.trimmingCharacters(in: .whitespaces)
            guard let type = EventType(rawValue: name) else {
                throw UsageError(message: "unknown event type \"\(name)\"; types are *, or "
                                 + EventType.allCases.map(\.rawValue).joined(separator: ", "))
            }
            if !types.contains(type) { types.append(type) }
        }
        return types
    }

    static func checkURL(_ text: String, allowHTTP: Bool) throws {
        guard let url = URL(string: text), let scheme = url.scheme, let host = url.host, !host.isEmpty,
              url.user == nil, url.password == nil, url.fragment == nil, text.count <= 2048 else {
            throw UsageError(message: "--url must be an absolute https:// URL with a host, no credentials and no fragment")
        }
        guard scheme == "https" || (scheme == "http" && allowHTTP) else {
            throw UsageError(message: "--url must be https:// (http:// only with WALLET_WEBHOOKS_ALLOW_HTTP=true)")
        }
    }

    static func readSecret(_ path: String) throws -> [UInt8] {
        guard var bytes = FileManager.default.contents(atPath: path).map(Array.init) else {
            throw UsageError(message: "cannot read the secret file \(path)")
        }
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        guard (16...4096).contains(bytes.count) else {
            throw UsageError(message: "the secret must be 16 to 4096 bytes; \(path) holds \(bytes.count)")
        }
        return bytes
    }
}
