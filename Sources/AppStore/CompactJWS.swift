import Crypto
import Foundation
import JSON

/// A compact JWS as the App Store signs it, parsed but not yet verified.
///
/// Parsing covers the first stage of verification: the token shape, the
/// header (`alg`, `x5c`) and the payload's `signedDate`. Everything here is
/// attacker-controlled until the signature has been checked.
struct CompactJWS {
    /// Largest token accepted. Real notifications with nested transaction
    /// and renewal tokens are about 19 kB.
    static let tokenBytesMax = 64 * 1024
    static let certificateCount = 3

    /// The ASCII bytes `header.payload` that the signature covers.
    let signingInput: ArraySlice<UInt8>
    /// x5c[0], x5c[1], x5c[2]: leaf, intermediate and the root the token claims.
    let certificates: [Certificate]
    let payloadJSON: [UInt8]
    let signature: [UInt8]
    /// Milliseconds since 1970.
    let signedDateMilliseconds: Int64

    var leaf: Certificate { certificates[0] }
    var intermediate: Certificate { certificates[1] }

    init(_ token: String) throws(VerificationError) {
        let bytes = Array(token.utf8)
        guard !bytes.isEmpty else { throw VerificationError(.malformed, "token is empty") }
        guard bytes.count <= Self.tokenBytesMax else {
            throw VerificationError(.malformed, "token is longer than \(Self.tokenBytesMax) bytes")
        }
        let segments: JWSSegments
        do {
            segments = try JWSSegments(bytes)
        } catch {
            throw VerificationError(.malformed, error.description)
        }
        let header = segments.header, payload = segments.payload, signature = segments.signature

        guard let headerObject = try? JSONParser.parse(header), headerObject.objectMembers != nil else {
            throw VerificationError(.malformed, "header is not a JSON object")
        }
        // RFC 7515 §4.1.11: extensions marked critical must be understood; we understand none.
        guard headerObject["crit"] == nil else {
            throw VerificationError(.malformed, "header lists critical extensions (crit)")
        }
        guard let algorithm = headerObject["alg"]?.stringValue else {
            throw VerificationError(.malformed, "header has no string alg")
        }
        guard algorithm == "ES256" else {
            throw VerificationError(.bad_algorithm, "header alg is \(Self.quoted(algorithm)), not ES256")
        }
        guard let chain = headerObject["x5c"]?.stringArrayValue else {
            throw VerificationError(.malformed, "header has no x5c array of strings")
        }
        guard chain.count == Self.certificateCount else {
            throw VerificationError(.malformed, "x5c holds \(chain.count) certificates, not \(Self.certificateCount)")
        }
        var certificates: [Certificate] = []
        for (index, encoded) in chain.enumerated() {
            guard let der = Base64.decode(encoded) else {
                throw VerificationError(.malformed, "x5c[\(index)] is not canonical padded base64")
            }
            do {
                certificates.append(try Certificate(der: der))
            } catch {
                throw VerificationError(.malformed, "x5c[\(index)] is not a certificate: \(error.message)")
            }
        }

        let probe: SignedDateProbe
        do {
            // Foundation's decoder, as `SignedDataVerifier` decodes the whole
            // payload once the signature holds (Apple's documented payload
            // types are `Decodable`): the probe and the payload read
            // `signedDate` by one rule.
            probe = try JSONDecoder().decode(SignedDateProbe.self, from: Data(payload))
        } catch {
            throw VerificationError(.malformed, "payload is not a JSON object with an integer signedDate")
        }
        guard let signedDate = probe.signedDate else {
            throw VerificationError(.malformed, "payload has no signedDate")
        }
        guard signedDate > 0 else {
            throw VerificationError(.malformed, "payload signedDate \(signedDate) is not after 1970")
        }

        self.signingInput = segments.signingInput
        self.certificates = certificates
        self.payloadJSON = payload
        self.signature = signature
        self.signedDateMilliseconds = signedDate
    }

    /// A header value for an error message: cut short, so a token cannot
    /// flood log lines, and written as a JSON string, so the JSON writer's
    /// escaping keeps it to its one line.
    private static func quoted(_ value: String) -> String {
        let limit = 16
        var shown = ""
        shown.unicodeScalars.append(contentsOf: value.unicodeScalars.prefix(limit))
        if value.unicodeScalars.count > limit { shown += "…" }
        return JSONValue.string(shown).serializedText()
    }
}

/// Only `signedDate`, read before verification to set the chain's
/// verification time. It must be an integer number of milliseconds.
private struct SignedDateProbe: Decodable {
    let signedDate: Int64?
}
