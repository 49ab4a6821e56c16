import AppStore
import Testing

/// Runs `body` and returns the verification error it throws, or nil if it
/// succeeds. Any other error is recorded as a test failure.
func verificationError<T>(_ body: () throws -> T) -> VerificationError? {
    do {
        _ = try body()
        return nil
    } catch let error as VerificationError {
        return error
    } catch {
        Issue.record("unexpected error type: \(error)")
        return nil
    }
}
