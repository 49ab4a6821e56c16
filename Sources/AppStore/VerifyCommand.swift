import Crypto
public import Foundation
import JSON

/// `wallet appstore verify`: checks one App Store JWS from standard input.
///
/// It applies `SignedDataVerifier` and nothing else: no credit policy, no
/// database. Exit status 0 means the token is valid and its payload is on
/// standard output as JSON; 1 means it is invalid and the reason is on
/// standard error; 2 means the command line is wrong.
public enum VerifyCommand {
    public static let usage = """
        usage: wallet appstore verify --bundle-id ID [--bundle-id ID]...
                                      [--environment E]... [--root FILE]... [--app-apple-id N]

        Reads one App Store JWS from standard input: a signed transaction, signed
        renewal info, or a notification's signedPayload. Verifies it offline at its
        signedDate (chain to a trusted root in X.509 strict mode, Apple marker
        extensions, ES256 signature, bundle, environment, app Apple ID) and prints
        the decoded payload as JSON, with a notification's nested tokens verified
        and decoded in place.

        options:
          --bundle-id ID     accepted bundle identifier; required, repeatable. There is
                             deliberately no option to accept any bundle.
          --environment E    accepted environment: Production (default) or Sandbox;
                             repeatable. Xcode and LocalTesting tokens are not signed by
                             the App Store and are always refused.
          --root FILE        trusted root certificate file, PEM (one or more) or DER;
                             repeatable. Replaces the built-in Apple Root CA - G3.
          --app-apple-id N   the app's Apple ID. Production notifications are refused
                             without it.
          --help             print this text.

        exit status: 0 valid, 1 invalid (reason on standard error), 2 usage error.

        """

    public static func run(
        arguments: [String],
        stdin: Data,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) -> (exitCode: Int32, stdout: String, stderr: String) {
        let options: Options
        switch Options.parse(arguments) {
        case .help:
            return (0, usage, "")
        case .failure(let message):
            return (2, "", "error: \(message)\n\n\(usage)")
        case .success(let parsed):
            options = parsed
        }

        var roots = VerifierConfiguration.defaultRoots
        if !options.rootPaths.isEmpty {
            do {
                roots = try VerifierConfiguration.loadRootCertificates(paths: options.rootPaths)
            } catch {
                return (2, "", "error: --root \(error.description)\n")
            }
        }
        let verifier = SignedDataVerifier(configuration: VerifierConfiguration(
            rootCertificates: roots,
            bundleIDs: options.bundleIDs,
            environments: options.environments.isEmpty ? [.production] : options.environments,
            appAppleID: options.appAppleID,
            clock: clock
        ))

        let token = String(decoding: stdin, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        do {
            let verified = try verifier.verifyAny(token)
            return (0, try render(verified), "")
        } catch let error as VerificationError {
            return (1, "", "invalid: \(error.reason.rawValue): \(error.detail)\n")
        } catch {
            return (1, "", "invalid: the verified payload cannot be printed as JSON\n")
        }
    }

    /// Indented JSON of the verified payload, keys sorted, with a
    /// notification's `data.signedTransactionInfo` and `data.signedRenewalInfo`
    /// replaced by their decoded payloads.
    static func render(_ verified: VerifiedSignedData) throws -> String {
        let value: JSONValue
        switch verified {
        case .transaction(let transaction):
            value = try JSONParser.parse(transaction.payloadJSON)
        case .renewalInfo(let renewalInfo):
            value = try JSONParser.parse(renewalInfo.payloadJSON)
        case .notification(let notification):
            guard case .object(var root) = try JSONParser.parse(notification.payloadJSON) else {
                throw JSONSyntaxError(offset: 0, reason: "the notification payload is not a JSON object")
            }
            if let index = root.firstIndex(where: { $0.key == "data" }), case .object(var data) = root[index].value {
                if let transaction = notification.transaction {
                    setMember(&data, "signedTransactionInfo", try JSONParser.parse(transaction.payloadJSON))
                }
                if let renewalInfo = notification.renewalInfo {
                    setMember(&data, "signedRenewalInfo", try JSONParser.parse(renewalInfo.payloadJSON))
                }
                root[index].value = .object(data)
            }
            value = .object(root)
        }
        return String(decoding: value.canonicalized().serializedIndented(), as: UTF8.self) + "\n"
    }

    /// Replaces the member named `key`, or adds it.
    private static func setMember(_ members: inout [(key: String, value: JSONValue)], _ key: String, _ value: JSONValue) {
        if let index = members.firstIndex(where: { $0.key == key }) {
            members[index].value = value
        } else {
            members.append((key, value))
        }
    }

    struct Options {
        var bundleIDs: Set<String> = []
        var environments: Set<Environment> = []
        var rootPaths: [String] = []
        var appAppleID: Int64?

        enum Outcome {
            case success(Options)
            case help
            case failure(String)
        }

        static func parse(_ arguments: [String]) -> Outcome {
            var options = Options()
            var remaining = arguments[...]
            // Bounded: every pass consumes at least one argument.
            while let flag = remaining.popFirst() {
                if flag == "--help" || flag == "-h" { return .help }
                guard ["--bundle-id", "--environment", "--root", "--app-apple-id"].contains(flag) else {
                    return .failure("unknown argument \(flag)")
                }
                guard let value = remaining.popFirst(), !value.isEmpty else {
                    return .failure("\(flag) needs a value")
                }
                switch flag {
                case "--bundle-id":
                    options.bundleIDs.insert(value)
                case "--environment":
                    let environment = Environment(rawValue: value)
                    if environment == .xcode || environment == .localTesting {
                        return .failure("--environment \(value) is never accepted: the App Store does not sign such tokens")
                    }
                    guard environment.isAppStoreSigned else {
                        return .failure("--environment must be Production or Sandbox, not \(value)")
                    }
                    options.environments.insert(environment)
                case "--root":
                    options.rootPaths.append(value)
                default:
                    guard let number = Int64(value), number > 0 else {
                        return .failure("--app-apple-id must be a positive integer, not \(value)")
                    }
                    guard options.appAppleID == nil || options.appAppleID == number else {
                        return .failure("--app-apple-id given twice with different values")
                    }
                    options.appAppleID = number
                }
            }
            guard !options.bundleIDs.isEmpty else {
                return .failure("at least one --bundle-id is required")
            }
            return .success(options)
        }
    }
}
