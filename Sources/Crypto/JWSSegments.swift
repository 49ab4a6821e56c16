/// The three segments of a compact JWS (RFC 7515 §7.1), base64url-decoded
/// but not verified: each verifier reads the header and payload its own way.
public struct JWSSegments: Sendable {
    public let header: [UInt8]
    public let payload: [UInt8]
    public let signature: [UInt8]
    /// The ASCII bytes `header.payload` that the signature covers.
    public let signingInput: ArraySlice<UInt8>

    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// Not three dot-separated segments; the count found.
        case segmentCount(Int)
        /// A segment is not canonical unpadded base64url.
        case notBase64URL

        public var description: String {
            switch self {
            case .segmentCount(let count): "token has \(count) dot-separated segments, not 3"
            case .notBase64URL: "a segment is not canonical unpadded base64url"
            }
        }
    }

    public init(_ token: [UInt8]) throws(Failure) {
        let segments = token.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else { throw .segmentCount(segments.count) }
        guard let header = Base64URL.decode(ascii: segments[0]),
              let payload = Base64URL.decode(ascii: segments[1]),
              let signature = Base64URL.decode(ascii: segments[2])
        else { throw .notBase64URL }
        self.header = header
        self.payload = payload
        self.signature = signature
        signingInput = token[..<segments[1].endIndex]
    }
}
