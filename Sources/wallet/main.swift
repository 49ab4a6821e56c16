import Foundation

exit(WalletCommand.main(arguments: CommandLine.arguments, environment: ProcessInfo.processInfo.environment))
