import Foundation

/// Runs a program to completion (it must exit by itself) and returns its
/// status and combined output.
public func runProcess(_ arguments: [String], environment: [String: String]? = nil, stdin: String? = nil,
                timeoutSeconds: Double = 60) throws -> (status: Int32, output: String, error: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    if let environment { process.environment = environment }
    let output = Pipe()
    let error = Pipe()
    let input = Pipe()
    process.standardOutput = output
    process.standardError = error
    process.standardInput = input
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    // Read both pipes while the process runs, so neither can fill up.
    nonisolated(unsafe) var errorData = Data()
    // The reader's semaphore orders its write before the read below.
    let errorRead = DispatchSemaphore(value: 0)
    let errorReader = Thread {
        errorData = error.fileHandleForReading.readDataToEndOfFile()
        errorRead.signal()
    }
    errorReader.start()
    let outputData = output.fileHandleForReading.readDataToEndOfFile()
    if exited.wait(timeout: .now() + timeoutSeconds) == .timedOut { process.terminate() }
    process.waitUntilExit()
    // The pipe's last writer has exited, so the reader reaches its end.
    guard errorRead.wait(timeout: .now() + timeoutSeconds) == .success else {
        throw CocoaError(.fileReadUnknown)
    }
    return (process.terminationStatus, String(decoding: outputData, as: UTF8.self), String(decoding: errorData, as: UTF8.self))
}
