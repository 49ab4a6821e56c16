import Foundation
import WalletService

exit(WalletCommand.main(arguments: CommandLine.arguments, environment: ProcessInfo.processInfo.environment))
