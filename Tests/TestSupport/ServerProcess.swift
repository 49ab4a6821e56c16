import Foundation
import Locking
import Synchronization

/// A `wallet serve` process, with its standard output collected.
public final class ServerProcess: Sendable {
    private final class Buffer: Sendable {
        let text = Locked<String>("")
        /// Set once the pipe reports end of file: every byte written is in `text`.
        let ended = Atomic<Bool>(false)
    }

    /// The `wallet` executable, built beside the test bundle.
    public static let walletBinary: String = {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        if directory.lastPathComponent.hasSuffix(".xctest") { directory.deleteLastPathComponent() }
        return directory.appendingPathComponent("wallet").path
    }()

    private let process: Process
    private let collected = Buffer()

    /// With `capturingLog`, standard error (the JSON log) joins `output`.
    public init(binary: String, environment: [String: String], arguments: [String] = ["serve"],
                capturingLog: Bool = false) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = capturingLog ? output : FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        self.process = process
        let handle = output.fileHandleForReading
        let collected = collected
        handle.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                collected.ended.store(true, ordering: .releasing)
            } else {
                collected.text.withLock { $0 += String(decoding: data, as: UTF8.self) }
            }
        }
        try process.run()
    }

    public var output: String { collected.text.withLock { $0 } }
    public var processID: Int32 { process.processIdentifier }

    /// The port from the banner line `… listening on http://host:port`.
    public func waitForPort(seconds: Double = 30) throws -> UInt16 {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if let line = output.split(separator: "\n").first(where: { $0.contains("listening on http://") }),
               let port = line.split(separator: ":").last.flatMap({ UInt16($0.trimmingCharacters(in: .whitespaces)) }) {
                return port
            }
            guard process.isRunning else { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw ServerProcessError.noPort(output: output)
    }

    public func waitForOutput(containing text: String, seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if output.contains(text) { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    /// Waits until the process's standard output has ended (it exited, or
    /// closed it), at most `seconds`; then `output` holds all it wrote.
    public func waitForEndOfOutput(seconds: Double) -> Bool {
        waitFor(seconds: seconds) { collected.ended.load(ordering: .acquiring) }
    }

    public func signal(_ signal: Int32) {
        if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
    }

    /// The exit status, or nil if it is still running at the deadline.
    public func waitForExit(seconds: Double) -> Int32? {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// SIGKILL, if it still runs.
    public func kill() {
        signal(SIGKILL)
        _ = waitForExit(seconds: 10)
    }

    enum ServerProcessError: Error {
        case noPort(output: String)
    }
}
