import AppStore
import Foundation

/// `wallet appstore verify`: one JWS from stdin, checked offline.
enum AppStoreCommand {
    static func run(_ arguments: [String]) -> Int32 {
        guard arguments.first == "verify" else {
            print("usage: wallet appstore verify [--bundle-id ID]... [--root FILE]... [--environment E]... [--app-apple-id N]")
            return arguments.contains("--help") || arguments.contains("-h") ? 0 : 2
        }
        let input = FileHandle.standardInput.readDataToEndOfFile()
        let result = VerifyCommand.run(arguments: Array(arguments.dropFirst()), stdin: input)
        if !result.stdout.isEmpty { print(result.stdout, terminator: result.stdout.hasSuffix("\n") ? "" : "\n") }
        if !result.stderr.isEmpty { WalletCommand.printError(result.stderr.trimmingCharacters(in: .newlines)) }
        return result.exitCode
    }
}
