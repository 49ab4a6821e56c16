import AppStore
import Foundation
import Logging
import WalletService
import WalletStore

/// `wallet appstore verify|reconcile|consumption`.
enum AppStoreCommand {
    static let help = """
        usage: wallet appstore verify [--bundle-id ID]... [--root FILE]... [--environment E]... [--app-apple-id N]
               wallet appstore reconcile [--since RFC3339] [--until RFC3339] [--environment E]...
               wallet appstore consumption list [--limit N]

        verify       checks one JWS from stdin offline
        reconcile    reads App Store Notification History and applies every
                     notification it holds, as if pushed; prints
                     seen=N applied=N already=N refused=N credited=N
                     (credited: purchases whose charge it credited).
                     Without --since it covers the time since the last
                     sweep (minus an hour), or the last 7 days, and
                     records how far it got. Exit 0 when
                     Apple could be read, whatever was refused; 1 when not.
        consumption  lists the consumption answers sent or due, newest first
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        switch arguments.first {
        case "verify":
            let input = FileHandle.standardInput.readDataToEndOfFile()
            let result = VerifyCommand.run(arguments: Array(arguments.dropFirst()), stdin: input)
            if !result.stdout.isEmpty { print(result.stdout, terminator: result.stdout.hasSuffix("\n") ? "" : "\n") }
            if !result.stderr.isEmpty { WalletCommand.printError(result.stderr.trimmingCharacters(in: .newlines)) }
            return result.exitCode
        case "reconcile":
            return try reconcile(Array(arguments.dropFirst()), environment: environment)
        case "consumption":
            guard arguments.dropFirst().first == "list" else { throw UsageError(message: help) }
            return try OutboxCommand.list(.appStoreConsumption, Array(arguments.dropFirst(2)), environment: environment,
                                          help: help)
        default:
            print(help)
            return arguments.contains("--help") || arguments.contains("-h") ? 0 : 2
        }
    }

    private static func reconcile(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        // --environment may repeat; the option parser keeps one value per name.
        var environments: [String] = []
        var rest: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--environment" {
                guard index < arguments.count else { throw UsageError(message: "--environment needs a value\n\n\(help)") }
                environments.append(arguments[index])
                index += 1
            } else if argument.hasPrefix("--environment=") {
                environments.append(String(argument.dropFirst("--environment=".count)))
            } else {
                rest.append(argument)
            }
        }
        for name in environments where !["Production", "Sandbox"].contains(name) {
            throw UsageError(message: "--environment \(name): use Production or Sandbox")
        }
        guard let invocation = try WalletCommand.invocation(
            rest, environment: environment, values: ["since", "until", "database-url", "data-dir"], help: help) else { return 0 }
        let since = try invocation.options.values["since"].map { try date($0, option: "since") }
        let until = try invocation.options.values["until"].map { try date($0, option: "until") }
        if until != nil, since == nil { throw UsageError(message: "--until needs --since") }
        if let since, let until, until <= since { throw UsageError(message: "--until must be after --since") }
        let run: ReconcileCommand.Run
        do {
            run = try ReconcileCommand.run(configuration: invocation.configuration, since: since, until: until,
                                           environments: environments.isEmpty ? nil : environments,
                                           logger: invocation.logger)
        } catch let error as Configuration.ConfigurationError {
            throw UsageError(message: "configuration: \(error.description)")
        }
        for refusal in run.refusals { WalletCommand.printError(refusal) }
        print(run.summaryLine)
        if let failure = run.failure {
            WalletCommand.printError("reconcile failed: \(failure)")
            return 1
        }
        return 0
    }

    static func date(_ text: String, option: String) throws -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        throw UsageError(message: "--\(option) must be an RFC 3339 time, such as 2026-11-01T00:00:00Z")
    }
}
