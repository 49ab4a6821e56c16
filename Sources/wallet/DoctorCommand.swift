import Foundation
import Logging
import WalletService

/// `wallet doctor`: the go-live checklists' items the service can verify by
/// itself, without a purchase and without writing anything.
enum DoctorCommand {
    static let help = """
        usage: wallet doctor [--database-url URL] [--data-dir DIR]

        Checks a deployment with the settings `serve` reads, writing nothing to the
        database or the stores:
          configuration   every setting is valid, and each credit mode turned on
                          has the settings it needs (each missing one named)
          database        reachable, every migration applied (pending ones named)
          appstore verifier
                          the Apple root certificates load; bundle ids, app Apple ID
          appstore api E  for each of WALLET_APPLE_ENVIRONMENTS, a signed lookup
                          of a transaction id that cannot exist: Apple's
                          TransactionIdNotFound proves the key is accepted
          googleplay token
                          the service account's OAuth token grant
          googleplay purchases
                          a lookup of a made-up purchase token of a catalog
                          product: Google's not-found proves API access
          googleplay push subscription
                          WALLET_GOOGLE_PUSH_SUBSCRIPTION read from Pub/Sub and
                          compared with the push audience and service account
        Each store call has that store's configured timeout. One line a check,
          ok   CHECK: what was verified
          FAIL CHECK: what is wrong, naming the setting to fix
          skip CHECK: why it did not run (not configured)
        then doctor: ok=N failed=N skipped=N. Exit 0 when nothing failed, 1 otherwise.
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let options = try WalletCommand.options(arguments, values: ["database-url", "data-dir"], help: help) else {
            return 0
        }
        var report = DoctorReport()
        do {
            // Read and checked as `serve` reads and checks it.
            let configuration = try Configuration.load(environment: environment, flags: options.values)
            Doctor(configuration: configuration, logger: Logger(label: "wallet", level: configuration.logLevel))
                .run { report.add($0) }
        } catch {
            report.add(DoctorCheck(.failed, "configuration", error.description))
        }
        WalletCommand.printNow(report.summaryLine)
        return report.failed == 0 ? 0 : 1
    }
}

/// One check's verdict and what it found.
struct DoctorCheck: Sendable, Equatable {
    enum Outcome: String, Sendable {
        case ok = "ok  "
        case failed = "FAIL"
        case skipped = "skip"
    }

    var outcome: Outcome
    var name: String
    var detail: String

    /// `detail` is kept to one line: a server's message may span several.
    init(_ outcome: Outcome, _ name: String, _ detail: String) {
        self.outcome = outcome
        self.name = name
        self.detail = detail.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: " ")
    }

    var line: String { "\(outcome.rawValue) \(name): \(detail)" }
}

/// The lines printed as the checks finish, and their counts.
struct DoctorReport {
    private(set) var ok = 0
    private(set) var failed = 0
    private(set) var skipped = 0

    mutating func add(_ check: DoctorCheck) {
        switch check.outcome {
        case .ok: ok += 1
        case .failed: failed += 1
        case .skipped: skipped += 1
        }
        // At once: a store that does not answer holds the next line for its timeout.
        WalletCommand.printNow(check.line)
    }

    var summaryLine: String { "doctor: ok=\(ok) failed=\(failed) skipped=\(skipped)" }
}
