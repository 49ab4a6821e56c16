import Foundation
import Locking

/// A `wallet serve` process, with its standard output collected. Every
/// wait on it (for the port, a line, the end of the output, the exit) is
/// woken by what it waits for, with a deadline.
public final class ServerProcess: Sendable {
    private struct Collected: Sendable {
        var text = ""
        /// Set once the pipe reports end of file: every byte written is in `text`.
        var ended = false
        /// Set once the process has exited.
        var exitStatus: Int32?
    }

    /// The `wallet` executable, built beside the test bundle.
    public static let walletBinary: String = {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        if directory.lastPathComponent.hasSuffix(".xctest") { directory.deleteLastPathComponent() }
        return directory.appendingPathComponent("wallet").path
    }()

    private let process: Process
    private let collected = Monitor(Collected())

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
        process.terminationHandler = { process in
            let status = process.terminationStatus
            collected.withLock { $0.exitStatus = status }
            collected.broadcast()
        }
        try process.run()
        // Blocking reads on a thread of their own, until end of file, which
        // holds the descriptor open for as long as it reads. (A
        // readabilityHandler's dispatch source could still be registered
        // when the descriptor closed, and crash the test process when its
        // number was reused.)
        Thread {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(handle.fileDescriptor, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                collected.withLock { $0.text += String(decoding: buffer[..<count], as: UTF8.self) }
                collected.broadcast()
            }
            collected.withLock { $0.ended = true }
            collected.broadcast()
        }.start()
    }

    public var output: String { collected.withLock { $0.text } }
    public var processID: Int32 { process.processIdentifier }

    /// The port from the banner line `… listening on http://host:port`.
    public func waitForPort(seconds: Double = 30) throws -> UInt16 {
        let port = collected.wait(until: .now + .seconds(seconds), for: { Self.port(in: $0.text) != nil || $0.exitStatus != nil }) {
            state, _ in Self.port(in: state.text)
        }
        guard let port else { throw ServerProcessError.noPort(output: output) }
        return port
    }

    private static func port(in text: String) -> UInt16? {
        guard let line = text.split(separator: "\n").first(where: { $0.contains("listening on http://") }) else { return nil }
        return line.split(separator: ":").last.flatMap { UInt16($0.trimmingCharacters(in: .whitespaces)) }
    }

    public func waitForOutput(containing text: String, seconds: Double) -> Bool {
        collected.wait(until: .now + .seconds(seconds)) { $0.text.contains(text) }
    }

    /// Waits until the process's standard output has ended (it exited, or
    /// closed it), at most `seconds`; then `output` holds all it wrote.
    public func waitForEndOfOutput(seconds: Double) -> Bool {
        collected.wait(until: .now + .seconds(seconds)) { $0.ended }
    }

    public func signal(_ signal: Int32) {
        if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
    }

    /// The exit status, or nil if it is still running at the deadline.
    public func waitForExit(seconds: Double) -> Int32? {
        collected.wait(until: .now + .seconds(seconds), for: { $0.exitStatus != nil }) { state, _ in state.exitStatus }
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
