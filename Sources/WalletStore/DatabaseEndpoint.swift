import Foundation
public import Logging

/// The PostgreSQL the ledger lives in: the one a URL names, or, without a
/// URL, the embedded development cluster under the data directory. This is
/// the one place that chooses between the two; `serve` and every command
/// open their database through it.
public struct DatabaseEndpoint: Sendable {
    /// What libpq connects with: the URL as given, or the embedded
    /// cluster's socket.
    public let conninfo: String
    /// Set when the database is the embedded cluster.
    public let embedded: EmbeddedDatabase?

    /// The database `url` names; nil means the embedded cluster under
    /// `dataDirectory`, made if it does not exist and started if nothing
    /// runs it (then `close` stops it again).
    public static func open(url: String?, dataDirectory: String, logger: Logger) throws -> DatabaseEndpoint {
        if let url {
            return DatabaseEndpoint(conninfo: url, embedded: nil)
        }
        let embedded = try EmbeddedDatabase.start(dataDirectory: dataDirectory, logger: logger)
        return DatabaseEndpoint(conninfo: embedded.conninfo, embedded: embedded)
    }

    /// Stops the embedded cluster if this process started it; a URL's
    /// database is the operator's and is left alone.
    public func close() {
        embedded?.stopIfStartedHere()
    }
}
