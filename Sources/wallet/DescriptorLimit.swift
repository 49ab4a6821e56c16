import Foundation
import Logging
import WalletService

#if canImport(Glibc)
import Glibc
#endif

/// The open-file limit `serve` runs under. Every connection is a
/// descriptor, and many systems start processes with a soft limit of 1024,
/// which `WALLET_MAX_CONNECTIONS` alone would use up: accepting would then
/// fail for everyone. The soft limit is raised to the hard one, which needs
/// no privilege, and a limit still too small is logged.
enum DescriptorLimit {
    /// Descriptors besides client connections: the database pools, the
    /// listening socket, event loops, pipes, files and outbound calls.
    static let spareDescriptors = 256

    static func raise(for configuration: Configuration, logger: Logger) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 {
                limit = raised
            }
        }
        let needed = configuration.connectionsMax + configuration.databasePoolSize + configuration.writers
            + spareDescriptors
        if Int(clamping: limit.rlim_cur) < needed {
            logger.warning("the open-file limit is below what WALLET_MAX_CONNECTIONS needs; connections past it are refused",
                           ["process.open_files_max": String(limit.rlim_cur), "process.open_files_needed": String(needed)])
        }
    }
}
