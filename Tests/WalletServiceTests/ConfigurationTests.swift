import Foundation
import HTTPServer
import JSON
import Locking
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService

/// Settings are read once into typed values and checked once: a malformed
/// one stops start-up with a message that names it, and nothing falls back
/// to a default in its place.
@Suite(.timeLimit(.minutes(3)))
struct ConfigurationTests {
    /// `wallet serve` with a database that need not exist: it starts even
    /// while the database is down, so only a refused setting stops it. The
    /// exit status (nil if it still runs after 20 seconds, when it is
    /// killed) and what it wrote, its log included.
    func serve(_ extra: [String: String]) throws -> (status: Int32?, output: String) {
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": "host=/nonexistent", "WALLET_CREDIT_VERIFICATION": "caller",
            "WALLET_LISTEN": "127.0.0.1:0",
        ].merging(extra) { $1 }), capturingLog: true)
        defer { server.kill() }
        guard let status = server.waitForExit(seconds: 20) else { return (nil, server.output) }
        _ = server.waitForEndOfOutput(seconds: 10)
        return (status, server.output)
    }

    // MARK: Through the real binary

    @Test func malformedValuesStopServeNamingTheirVariable() throws {
        let cases: [(variable: String, value: String)] = [
            ("WALLET_APPLE_API_PRODUCTION_URL", "api.storekit.itunes.apple.com"),
            ("WALLET_GOOGLE_API_URL", "https://androidpublisher.googleapis.com:99999"),
            ("WALLET_APPLE_CONSUMPTION_CONSENT", "yes"),
            ("WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN", "1"),
            ("WALLET_STORE_LOOKUP_THREADS", "0"),
            ("WALLET_STORE_LOOKUP_THREADS", "257"),
            // A store setting `serve` cannot use stops it the same way.
            ("WALLET_APPLE_ROOT_CERTS", "/nonexistent/AppleRootCA-G3.cer"),
        ]
        for (variable, value) in cases {
            var extra = [variable: value]
            if variable == "WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN" {
                extra["WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE"] = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
            }
            let result = try serve(extra)
            #expect(result.status == 2, "\(variable)=\(value): exit \(result.status.map(String.init) ?? "none, still running")")
            #expect(result.output.hasPrefix("configuration: \(variable):"), "\(variable)=\(value): \(result.output)")
        }
    }

    /// A verifyReceipt URL that is not a URL (here a stray space before the
    /// port) used to be replaced, silently, by Apple's production URL: the
    /// service started, and sent its receipts there. Now it does not start.
    @Test func aMalformedVerifyReceiptURLNoLongerFallsBackToApple() throws {
        let fake = try FakeVerifyReceiptServer(reply: .json(#"{"status":21002}"#))
        defer { fake.stop() }
        let malformed = "http://127.0.0.1 :\(fake.port)/verifyReceipt"

        let database = try TestDatabase.make()
        let url = TestService.conninfo(database)
        let created = try runProcess([CommandLineTests.walletBinary, "keys", "create", "--name", "shop", "--scopes", "credit"],
                                     environment: ChaosRun.walletEnvironment(["WALLET_DATABASE_URL": url]))
        let key = String(created.output.split(separator: "\n").last ?? "")
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": url, "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_CREDIT_VERIFICATION": "appstore-receipt", "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_APP_APPLE_ID": String(FakeAppStore.appAppleID),
            "WALLET_APPLE_VERIFY_RECEIPT_URL": malformed,
        ]), capturingLog: true)
        defer { server.kill() }
        if let status = server.waitForExit(seconds: 20) {
            #expect(status == 2)
            #expect(server.waitForEndOfOutput(seconds: 10))
            #expect(server.output.contains("configuration: WALLET_APPLE_VERIFY_RECEIPT_URL:"), "\(server.output)")
            return
        }
        // Still running: show where its receipts go.
        let port = try server.waitForPort()
        let answer = try TestService.request(port: port, "POST", "/v1/credits", key: key, json: """
            {"user_id":"dd","flow_no":"6000000000000001","product_id":"guodong600","receipt_data":"TUlJ"}
            """)
        let code: String = if case .string(let text)? = try? answer.json()["code"] { text } else { "-" }
        Issue.record("""
            serve started with WALLET_APPLE_VERIFY_RECEIPT_URL=\(malformed); a receipt credit answered \
            \(answer.status) \(code), and the verifyReceipt that URL names saw \(fake.requests.count) requests
            """)
    }

    // MARK: Through Configuration.load

    @Test func everyStoreURLIsAnAbsoluteHTTPURLOrAnError() throws {
        let variables = ["WALLET_APPLE_VERIFY_RECEIPT_URL", "WALLET_APPLE_VERIFY_RECEIPT_SANDBOX_URL",
                         "WALLET_APPLE_API_PRODUCTION_URL", "WALLET_APPLE_API_SANDBOX_URL", "WALLET_GOOGLE_API_URL",
                         "WALLET_GOOGLE_PUSH_JWKS_URL", "WALLET_GOOGLE_PUBSUB_URL"]
        #expect(Set(variables) == Set(Configuration.urlSettings.map(\.variable)))
        let malformed = ["api.example.com/path", "ftp://example.com/x", "http://", "https:///path", "https:example.com",
                         "https://exa mple.com/x", "http://127.0.0.1 :8080/x", "https://example.com:99999/x",
                         "https://example.com:0/x"]
        var accepted: [String] = []
        for variable in variables {
            for value in malformed {
                do {
                    _ = try Configuration.load(environment: [variable: value])
                    accepted.append("\(variable)=\(value)")
                } catch {
                    #expect(error.variable == variable, "\(variable)=\(value): \(error)")
                }
            }
        }
        #expect(accepted.isEmpty, "accepted: \(accepted)")

        let given = "http://127.0.0.1:8080/verifyReceipt"
        for setting in Configuration.urlSettings {
            let configuration = try Configuration.load(environment: [setting.variable: given])
            #expect(configuration[keyPath: setting.value].absoluteString == given, "\(setting.variable)")
        }
    }

    @Test func booleansAreExactlyTrueOrFalse() throws {
        let variables = ["WALLET_DATABASE_PREPARED_STATEMENTS", "WALLET_ADMIN_CONSOLE", "WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN",
                         "WALLET_APPLE_CONSUMPTION_CONSENT", "WALLET_GOOGLE_ALLOW_TEST_PURCHASES",
                         "WALLET_GOOGLE_REQUIRE_ACCOUNT_ID", "WALLET_WEBHOOKS_ALLOW_HTTP", "WALLET_CREDIT_FROM_NOTIFICATIONS",
                         "WALLET_SPEND_PAID_FIRST"]
        #expect(Set(variables) == Set(Configuration.booleanSettings.map(\.variable)))
        // The account-token rule wants a namespace beside the flag.
        let base = ["WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE": "6ba7b810-9dad-11d1-80b4-00c04fd430c8"]
        var accepted: [String] = []
        for variable in variables {
            for value in ["yes", "no", "1", "0", "TRUE", "False", "on", "true1"] {
                do {
                    _ = try Configuration.load(environment: base.merging([variable: value]) { $1 })
                    accepted.append("\(variable)=\(value)")
                } catch {
                    #expect(error.variable == variable, "\(variable)=\(value): \(error)")
                    #expect(error.message == "must be true or false")
                }
            }
        }
        #expect(accepted.isEmpty, "accepted: \(accepted)")
        for setting in Configuration.booleanSettings {
            for value in [true, false] {
                let configuration = try Configuration.load(environment: base.merging([setting.variable: String(value)]) { $1 })
                #expect(configuration[keyPath: setting.value] == value, "\(setting.variable)")
            }
        }
    }

    /// The push subscription is Pub/Sub's full name for it, and it is read
    /// only to be compared with the push settings, so it needs them.
    @Test func thePushSubscriptionIsAFullNameBesideThePushSettings() throws {
        let push = ["WALLET_GOOGLE_PUSH_AUDIENCE": "https://wallet.example.com/v1/googleplay/notifications",
                    "WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT": "pubsub-push@my-project.iam.gserviceaccount.com"]
        for name in ["projects/my-project/subscriptions/play-rtdn-push", "projects/example.com:game/subscriptions/R.t~d+n%1"] {
            let loaded = try Configuration.load(environment: push.merging(["WALLET_GOOGLE_PUSH_SUBSCRIPTION": name]) { $1 })
            #expect(loaded.google.pushSubscription == name)
        }
        #expect(try Configuration.load(environment: push).google.pushSubscription == nil)
        for value in ["play-rtdn-push", "projects/my-project/topics/play-rtdn", "projects//subscriptions/play",
                      "projects/my-project/subscriptions/goog-play", "projects/my-project/subscriptions/1play",
                      "projects/my-project/subscriptions/pl", "projects/My_Project/subscriptions/play",
                      "projects/my-project/subscriptions/play/extra", "projects/my-project/subscriptions/pl ay"] {
            #expect(throws: Configuration.ConfigurationError.self, "\(value)") {
                try Configuration.load(environment: push.merging(["WALLET_GOOGLE_PUSH_SUBSCRIPTION": value]) { $1 })
            }
            do {
                _ = try Configuration.load(environment: push.merging(["WALLET_GOOGLE_PUSH_SUBSCRIPTION": value]) { $1 })
            } catch {
                #expect(error.variable == "WALLET_GOOGLE_PUSH_SUBSCRIPTION", "\(value): \(error)")
            }
        }
        #expect(throws: Configuration.ConfigurationError(
            variable: "WALLET_GOOGLE_PUSH_SUBSCRIPTION",
            message: "needs WALLET_GOOGLE_PUSH_AUDIENCE and WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT, which it is compared with")) {
            try Configuration.load(environment: ["WALLET_GOOGLE_PUSH_SUBSCRIPTION": "projects/my-project/subscriptions/play"])
        }
    }

    /// `serve` stops at the first setting a turned-on mode lacks; the list
    /// it comes from names every one, once, for `wallet doctor`.
    @Test func servingProblemsNameEachMissingSettingOnce() throws {
        let configuration = try Configuration.load(environment: [
            "WALLET_DATABASE_URL": "host=/nonexistent", "WALLET_CREDIT_VERIFICATION": "appstore-api,googleplay",
        ])
        let problems = configuration.servingProblems()
        #expect(problems.map(\.variable) == [
            "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE", "WALLET_GOOGLE_PACKAGE_NAME", "WALLET_APPLE_API_KEY_ID",
            "WALLET_APPLE_API_ISSUER_ID", "WALLET_APPLE_API_PRIVATE_KEY_FILE", "WALLET_APPLE_BUNDLE_ID",
            "WALLET_APPLE_APP_APPLE_ID",
        ])
        #expect(throws: problems[0]) { try configuration.validateForServing() }
    }

    @Test func refundDebtIsAllowOrFloor() throws {
        #expect(try Configuration.load(environment: [:]).refundDebt == .allow)
        #expect(try Configuration.load(environment: ["WALLET_REFUND_DEBT": "floor"]).refundDebt == .floor)
        #expect(try Configuration.load(environment: ["WALLET_REFUND_DEBT": "allow"]).refundDebt == .allow)
        for value in ["Floor", "deny", "negative", "0"] {
            #expect(throws: Configuration.ConfigurationError.self, "\(value)") {
                try Configuration.load(environment: ["WALLET_REFUND_DEBT": value])
            }
        }
    }

    @Test func limitsOutOfRangeStopStartUpNamingTheirVariable() throws {
        let read = Configuration.integerSettings.filter { $0.variable != nil }
        #expect(read.count == 26)
        for setting in read {
            let name = try #require(setting.variable)
            let allowed = setting.allowed(in: try Configuration.load(environment: [:]))
            for value in [String(allowed.lowerBound - 1), String(allowed.upperBound + 1), "many", "1.5", "0x10"] {
                do {
                    _ = try Configuration.load(environment: [name: value])
                    Issue.record("\(name)=\(value) accepted")
                } catch {
                    #expect(error.variable == name, "\(name)=\(value): \(error)")
                    #expect(error.message.hasPrefix("must be an integer from \(allowed.lowerBound) to \(allowed.upperBound)"),
                            "\(name)=\(value): \(error)")
                }
            }
            for value in [allowed.lowerBound, allowed.upperBound] {
                let configuration = try Configuration.load(environment: [name: String(value)])
                #expect(configuration[keyPath: setting.value] == value, "\(name)=\(value)")
            }
        }
        // A bound another setting sets is checked against that setting.
        #expect(throws: Configuration.ConfigurationError(
            variable: "WALLET_MAX_CONNECTIONS", message: "must be an integer from 8 to 65536 (at least WALLET_HTTP_THREADS)")) {
            try Configuration.load(environment: ["WALLET_HTTP_THREADS": "8", "WALLET_MAX_CONNECTIONS": "7"])
        }
    }

    /// The limits only code sets are fields with their defaults, checked by
    /// the same rule, and named by their field.
    @Test func limitsWithoutAVariableAreCheckedByTheSameRule() throws {
        let defaults = Configuration()
        try defaults.validate()
        let codeOnly = Configuration.integerSettings.filter { $0.variable == nil }
        #expect(codeOnly.count >= 16)
        for setting in codeOnly {
            for value in [setting.range.lowerBound - 1, setting.range.upperBound + 1] {
                var configuration = defaults
                configuration[keyPath: setting.value] = value
                #expect(throws: Configuration.ConfigurationError.self, "\(setting.field)=\(value)") {
                    try configuration.validate()
                }
                do {
                    try configuration.validate()
                } catch {
                    #expect(error.variable == setting.field)
                }
            }
        }
        // Read from the environment or not, the defaults are what they were.
        let loaded = try Configuration.load(environment: [:])
        let limits: [Int] = [
            loaded.storeLookupThreads, loaded.storeLookupQueueDepthMax, loaded.notificationThreads,
            loaded.notificationQueueDepthMax, loaded.googlePushThreads, loaded.googlePushQueueDepthMax,
            loaded.consoleThreads, loaded.consoleQueueDepthMax, loaded.shutdownGraceSeconds,
            loaded.holdSweepIntervalSeconds, loaded.holdSweepWalletsMax, loaded.idempotencyPurgeIntervalSeconds,
            loaded.idempotencyPurgeRoundRowsMax, loaded.idempotencyPurgeRoundsMax,
        ]
        let before: [Int] = [4, 256, 2, 32, 2, 32, 2, 64, 10, 5, 1_000, 60, 1_000, 20]
        #expect(limits == before)
        // A service built in code is held to them too.
        #expect(throws: Configuration.ConfigurationError(variable: "notificationThreads",
                                                         message: "must be an integer from 1 to 64")) {
            _ = try TestService { $0.notificationThreads = 0 }
        }
    }

    /// `storeLookupThreads` and `storeLookupQueueDepthMax` are what the
    /// credits that wait on a store get: one thread, one queued, the rest
    /// refused at once.
    @Test func storeLookupsRunOnThePoolTheConfigurationSizes() throws {
        let apple = try FakeVerifyReceiptServer(reply: .silence)
        defer { apple.stop() }
        let service = try TestService {
            $0.creditVerification = [.appStoreReceipt]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.appAppleID = FakeAppStore.appAppleID
            $0.apple.verifyReceiptURL = apple.url
            $0.apple.verifyReceiptTimeoutSeconds = 20
            $0.storeLookupThreads = 1
            $0.storeLookupQueueDepthMax = 1
        }
        defer { service.stop() }
        let port = service.port
        let key = service.appBackendKey
        @Sendable func credit(_ number: Int) -> (status: Int, code: String?) {
            let body = #"{"user_id":"u\#(number)","flow_no":"700000000000000\#(number)","product_id":"guodong600","receipt_data":"TUlJ"}"#
            guard let answer = try? TestService.request(port: port, "POST", "/v1/credits", key: key, json: body,
                                                        timeoutSeconds: 40) else { return (0, nil) }
            let code: String? = if case .string(let text)? = try? answer.json()["code"] { text } else { nil }
            return (answer.status, code)
        }
        // The one thread waits on Apple, which does not answer.
        let first = Thread { _ = credit(0) }
        first.start()
        #expect(waitFor(seconds: 20) { apple.requests.count == 1 })
        // Of three more, one waits in the queue and two are refused at once.
        let answers = Locked<[(status: Int, code: String?)]>([])
        let others = (1...3).map { number in
            Thread {
                let answer = credit(number)
                answers.withLock { $0.append(answer) }
            }
        }
        others.forEach { $0.start() }
        #expect(waitFor(seconds: 20) { answers.withLock { $0.count } >= 2 })
        let refused = answers.withLock { $0 }
        #expect(refused.count == 2, "\(refused)")
        #expect(refused.allSatisfy { $0.status == 503 && $0.code == "overloaded" }, "\(refused)")
        // Apple going away ends the waits: the lookups answer 503 too.
        apple.stop()
        #expect(waitFor(seconds: 30) { answers.withLock { $0.count } == 3 })
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 0)
    }

    // MARK: The documentation

    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The rows of the configuration table in docs/configuration.md:
    /// variable (empty for a flag alone), flag, default and meaning, as
    /// written.
    static func documentedRows() throws -> [(variable: String, flag: String, defaultValue: String, meaning: String)] {
        let page = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        guard let start = page.range(of: "\n| Variable | Flag | Default | Meaning |\n") else { return [] }
        let section = page[start.upperBound...]
        let end = section.range(of: "\n\n")?.lowerBound ?? section.endIndex
        return section[..<end].split(separator: "\n").compactMap { line in
            guard line.hasPrefix("| "), !line.hasPrefix("| Variable"), !line.hasPrefix("| ---") else { return nil }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 4 else { return (variable: "malformed row: \(line)", flag: "", defaultValue: "", meaning: "") }
            return (variable: cells[0].trimmingCharacters(in: ["`"]), flag: cells[1], defaultValue: cells[2], meaning: cells[3])
        }
    }

    @Test func theDocumentedTableIsTheConfiguration() throws {
        let rows = try Self.documentedRows().filter { !$0.variable.isEmpty }
        let byName = Dictionary(rows.map { ($0.variable, $0) }, uniquingKeysWith: { first, _ in first })
        #expect(byName.count == rows.count, "a variable appears twice")
        let read = Configuration.variables
        #expect(Set(byName.keys) == Set(read.map(\.name)),
                "only in docs/configuration.md: \(Set(byName.keys).subtracting(read.map(\.name)).sorted()); only in the code: \(Set(read.map(\.name)).subtracting(byName.keys).sorted())")
        var mismatches: [String] = []
        for variable in read {
            guard let row = byName[variable.name] else { continue }
            let flag = variable.flag.map { "`\($0)`" } ?? ""
            if row.flag != flag { mismatches.append("\(variable.name): flag \(row.flag), not \(flag)") }
        }
        let defaults = Configuration()
        for setting in Configuration.integerSettings {
            guard let name = setting.variable, let row = byName[name] else { continue }
            let value = defaults[keyPath: setting.value]
            if !row.defaultValue.hasPrefix("`\(value)`") { mismatches.append("\(name): default \(row.defaultValue), not \(value)") }
            let highest = setting.atMost.map { "`\($0.name)`" } ?? String(setting.range.upperBound)
            let range = "\(setting.range.lowerBound)–\(highest)"
            if !row.meaning.hasPrefix(range) { mismatches.append("\(name): range not \(range): \(row.meaning)") }
            if let floor = setting.atLeast, !row.meaning.contains("at least `\(floor.name)`") {
                mismatches.append("\(name): does not say at least \(floor.name)")
            }
        }
        for setting in Configuration.booleanSettings {
            guard let row = byName[setting.variable] else { continue }
            if row.defaultValue != "`\(defaults[keyPath: setting.value])`" { mismatches.append("\(setting.variable): default \(row.defaultValue)") }
            if !row.meaning.hasPrefix("`true` or `false`") { mismatches.append("\(setting.variable): not true or false") }
        }
        for setting in Configuration.urlSettings {
            guard let row = byName[setting.variable] else { continue }
            let value = defaults[keyPath: setting.value].absoluteString
            if row.defaultValue != "`\(value)`" { mismatches.append("\(setting.variable): default \(row.defaultValue), not \(value)") }
            if !row.meaning.hasPrefix("an http or https URL") { mismatches.append("\(setting.variable): not said to be a URL") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) rows differ from the code:\n\(mismatches.joined(separator: "\n"))")
        // The one switch without a variable.
        #expect(try Self.documentedRows().contains { $0.variable.isEmpty && $0.flag == "`--no-migrate`" })
    }

    /// Every `WALLET_…` name the code mentions (in messages and comments)
    /// is one it reads.
    @Test func theCodeNamesOnlyVariablesItReads() throws {
        let read = Set(Configuration.variables.map(\.name))
        let sources = Self.repositoryRoot.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" } ?? []
        #expect(files.count > 50)
        let pattern = try Regex("WALLET_[A-Z][A-Z0-9_]*")
        var unknown: Set<String> = []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: pattern) where !read.contains(String(text[match.range])) {
                unknown.insert("\(file.lastPathComponent): \(text[match.range])")
            }
        }
        #expect(unknown.isEmpty, "\(unknown.sorted())")
    }
}
