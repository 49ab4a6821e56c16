import Logging
import WalletService
import WalletStore

/// `--name value`, `--name=value`, switches and positionals, for one
/// subcommand. Parsing only: asked for help, it says so in
/// `helpRequested` and leaves printing it to the command.
struct Options {
    var values: [String: String] = [:]
    var positionals: [String] = []
    var helpRequested = false

    /// `help` is the command's usage, quoted in the error of a malformed line.
    init(_ arguments: [String], values allowedValues: Set<String>, switches: Set<String>, positionals positionalCount: Int = 0,
         help: String) throws(UsageError) {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--help" || argument == "-h" {
                helpRequested = true
                return
            }
            guard argument.hasPrefix("--") else {
                guard positionals.count < positionalCount else {
                    throw UsageError(message: "unexpected argument \(argument)\n\n\(help)")
                }
                positionals.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if switches.contains(name) {
                guard value == nil else { throw UsageError(message: "--\(name) takes no value") }
                values[name] = "true"
            } else if allowedValues.contains(name) {
                if value == nil {
                    guard index < arguments.count else {
                        throw UsageError(message: "--\(name) needs a value\n\n\(help)")
                    }
                    value = arguments[index]
                    index += 1
                }
                values[name] = value
            } else {
                throw UsageError(message: "unknown option --\(name)\n\n\(help)")
            }
        }
        if positionals.count < positionalCount {
            throw UsageError(message: help)
        }
    }
}

extension Administration {
    /// The database the operator's commands use (`WALLET_DATABASE_SESSION_URL`,
    /// `WALLET_DATABASE_URL`, or the embedded one), for the length of `body`;
    /// with `timeoutSeconds`, connecting and every statement end that long
    /// after the database is open (an embedded one may take a while to start).
    static func withDatabase<T>(_ configuration: Configuration, logger: Logger, migrateFirst: Bool = false,
                                timeoutSeconds: Int? = nil, _ body: (Administration) throws -> T) throws -> T {
        let database = try configuration.openDatabase(session: true, logger: Logger(label: "wallet", level: .warning))
        defer { database.close() }
        let deadline = timeoutSeconds.map { ContinuousClock.now + .seconds($0) }
        return try withConnection(to: database, logger: logger, migrateFirst: migrateFirst, deadline: deadline, body)
    }
}
