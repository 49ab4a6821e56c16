import Foundation
import JSON
import Timestamps

/// A structured logger that writes one JSON object per line.
///
/// Messages are constant text; values go into metadata with dotted keys
/// (`request.id`, `wallet.user_id`). Secrets, API keys, receipts and SQL
/// parameters never go into a log line.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error

        public init?(name: String) {
            switch name.lowercased() {
            case "debug": self = .debug
            case "info": self = .info
            case "warning", "warn": self = .warning
            case "error": self = .error
            default: return nil
            }
        }

        public var name: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .warning: "warning"
            case .error: "error"
            }
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public typealias Metadata = [String: String]

    /// Where finished lines go. The default writes to standard error.
    public struct Sink: Sendable {
        let write: @Sendable (String) -> Void

        public init(_ write: @escaping @Sendable (String) -> Void) {
            self.write = write
        }

        public static let standardError = Sink { line in
            standardErrorLock.withLock {
                FileHandle.standardError.write(Data(line.utf8))
            }
        }

        /// Drops every line; for tests that do not look at logs.
        public static let discard = Sink { _ in }
    }

    public var label: String
    public var level: Level
    public var metadata: Metadata
    private let sink: Sink

    public init(label: String, level: Level = .info, metadata: Metadata = [:], sink: Sink = .standardError) {
        self.label = label
        self.level = level
        self.metadata = metadata
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> String? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func debug(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) {
        log(.debug, message(), metadata())
    }

    public func info(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) {
        log(.info, message(), metadata())
    }

    public func warning(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) {
        log(.warning, message(), metadata())
    }

    public func error(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) {
        log(.error, message(), metadata())
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String, _ extra: @autoclosure () -> Metadata = [:]) {
        guard level >= self.level else { return }
        var fields = metadata
        for (key, value) in extra() { fields[key] = value }
        var members: [(key: String, value: JSONValue)] = [
            ("ts", .string(Date().rfc3339)), ("level", .string(level.name)), ("logger", .string(label)),
            ("msg", .string(message())),
        ]
        for key in fields.keys.sorted() {
            members.append((key, .string(fields[key]!)))
        }
        // The writer of every API body writes the line too: one escaping rule.
        sink.write(JSONValue.object(members).serializedText() + "\n")
    }
}

/// Keeps lines whole when threads log at once. An `NSLock` (a pthread mutex,
/// which the thread sanitizer sees) rather than the `Locking` target, which
/// sits on the same level as this one.
private let standardErrorLock = NSLock()
