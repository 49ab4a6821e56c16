public import Crypto

extension PrivateKey {
    /// `signES256` for tests, where a failure can only be a broken OpenSSL.
    public func sign(_ message: some Collection<UInt8>) -> [UInt8] {
        do {
            return try signES256(message)
        } catch {
            fatalError("ES256 signing failed: \(error)")
        }
    }

    /// `signES256DER` for tests.
    public func signDER(_ message: some Collection<UInt8>) -> [UInt8] {
        do {
            return try signES256DER(message)
        } catch {
            fatalError("ES256 signing failed: \(error)")
        }
    }
}
