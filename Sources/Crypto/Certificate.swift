public import Foundation
import COpenSSL

/// Why a certificate could not be read or made.
public struct CertificateError: Error, Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What went wrong, in words that are safe to show.
    public let message: String
    /// OpenSSL's own account, for logs only.
    let openSSLDetail: String

    package init(_ message: String, openSSLDetail: String = "") {
        self.message = message
        self.openSSLDetail = openSSLDetail
    }

    public var description: String { message }

    public var debugDescription: String {
        openSSLDetail.isEmpty ? message : "\(message) (OpenSSL: \(openSSLDetail))"
    }
}

/// An X.509 certificate (an `X509`), immutable once made.
///
/// Everything callers read is computed once at creation, so instances are
/// shared freely across threads.
public final class Certificate: @unchecked Sendable {
    /// Largest DER certificate accepted. Real chains use about 1–2 kB each.
    public static let derBytesMax = 16 * 1024

    /// Owned reference; freed in `deinit`.
    package let x509: OpaquePointer

    /// The DER encoding, exactly as received (for `init(der:)`).
    public let derBytes: [UInt8]
    public let publicKey: PublicKey
    /// The subject name in RFC 2253 form, such as `CN=Example,O=Example Inc.,C=US`.
    public let subjectSummary: String
    public let notBefore: Date
    public let notAfter: Date
    /// Whether basicConstraints is present with cA = TRUE.
    public let isCA: Bool

    /// Parses one DER certificate.
    ///
    /// Strict: the input must be exactly one certificate with no trailing
    /// bytes that re-encodes to the same bytes, with readable extensions,
    /// validity dates and public key.
    public convenience init(der: some Collection<UInt8>) throws(CertificateError) {
        let bytes = Array(der)
        guard !bytes.isEmpty, bytes.count <= Self.derBytesMax else {
            throw CertificateError("certificate is empty or larger than \(Self.derBytesMax) bytes")
        }
        ERR_clear_error()
        var consumed = 0
        let parsed = bytes.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            let x509 = d2i_X509(nil, &cursor, buffer.count)
            if let cursor, let base = buffer.baseAddress { consumed = cursor - base }
            return x509
        }
        guard let parsed else {
            throw CertificateError("not a DER X.509 certificate", openSSLDetail: drainOpenSSLErrors())
        }
        guard consumed == bytes.count else {
            X509_free(parsed)
            throw CertificateError("trailing bytes after the DER certificate")
        }
        try self.init(owning: parsed, der: bytes)
    }

    /// Parses a PEM text holding exactly one certificate.
    public convenience init(pem: String) throws(CertificateError) {
        let certificates = Self.pemBundle(pem)
        guard certificates.count == 1, let only = certificates.first else {
            throw CertificateError("expected exactly one PEM certificate, found \(certificates.count)")
        }
        try self.init(der: only.derBytes)
    }

    /// Parses every certificate in a PEM text (RFC 7468).
    ///
    /// All or nothing: if any block is not a certificate (a private key, say)
    /// or does not decode to exactly one canonical DER certificate, the
    /// result is empty, so a caller that checks `isEmpty` never runs with
    /// half a bundle. Text outside the blocks is ignored, as `openssl`
    /// writes such comments.
    public static func pemBundle(_ pem: String) -> [Certificate] {
        let begin = "-----BEGIN CERTIFICATE-----"
        let end = "-----END CERTIFICATE-----"
        var certificates: [Certificate] = []
        var body: String?
        // Bounded by the number of lines.
        for rawLine in pem.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if var current = body {
                if line == end {
                    guard let der = Base64.decode(current), let certificate = try? Certificate(der: der) else {
                        return []
                    }
                    certificates.append(certificate)
                    body = nil
                } else if line.hasPrefix("-----") {
                    return []
                } else {
                    current += line
                    body = current
                }
            } else if line == begin {
                body = ""
            } else if line.hasPrefix("-----") {
                // Another kind of block, or a stray END: not a certificate bundle.
                return []
            }
        }
        // An unterminated block spoils the bundle too.
        return body == nil ? certificates : []
    }

    /// Takes ownership of `x509`, which was parsed from `der`, and frees it
    /// if this initializer throws.
    private init(owning x509: OpaquePointer, der: [UInt8]) throws(CertificateError) {
        let parts: (key: OpaquePointer, notBefore: Date, notAfter: Date, flags: UInt32)
        do {
            parts = try Self.inspect(x509, der: der)
        } catch {
            X509_free(x509)
            throw error
        }
        self.x509 = x509
        self.derBytes = der
        self.publicKey = PublicKey(owning: parts.key)
        self.isCA = parts.flags & UInt32(EXFLAG_BCONS) != 0 && parts.flags & UInt32(EXFLAG_CA) != 0
        self.subjectSummary = Self.rfc2253(X509_get_subject_name(x509))
        self.notBefore = parts.notBefore
        self.notAfter = parts.notAfter
    }

    private static func inspect(
        _ x509: OpaquePointer,
        der: [UInt8]
    ) throws(CertificateError) -> (key: OpaquePointer, notBefore: Date, notAfter: Date, flags: UInt32) {
        // OpenSSL keeps the signed part as received, so this catches a
        // non-canonical outer encoding; the signature covers the rest.
        guard encode(x509) == der else {
            throw CertificateError("certificate does not re-encode to the bytes received (not DER)")
        }
        // Filling OpenSSL's extension cache now keeps later reads free of
        // lazy writes, and tells us whether the extensions parse at all.
        X509_check_purpose(x509, -1, 0)
        let flags = X509_get_extension_flags(x509)
        guard flags & UInt32(EXFLAG_INVALID) == 0 else {
            throw CertificateError("certificate extensions are malformed")
        }
        guard let notBefore = date(X509_get0_notBefore(x509)), let notAfter = date(X509_get0_notAfter(x509)) else {
            throw CertificateError("certificate validity dates are unreadable")
        }
        guard let key = X509_get_pubkey(x509) else {
            throw CertificateError("certificate public key is unreadable", openSSLDetail: drainOpenSSLErrors())
        }
        return (key, notBefore, notAfter, flags)
    }

    deinit {
        X509_free(x509)
    }

    /// Whether an extension with this dotted OID (such as `2.5.29.19`) is present.
    public func hasExtension(oid: String) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else {
            ERR_clear_error()
            return false
        }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(x509, object, -1) >= 0
    }

    /// Whether both are the same certificate, byte for byte.
    public func isSameCertificate(as other: Certificate) -> Bool {
        derBytes == other.derBytes
    }

    package static func encode(_ x509: OpaquePointer) -> [UInt8] {
        let length = i2d_X509(x509, nil)
        guard length > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        let written = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_X509(x509, &cursor)
        }
        return written == length ? bytes : []
    }

    private static func rfc2253(_ name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        guard X509_NAME_print_ex(bio, name, 0, COpenSSL_XN_FLAG_RFC2253()) >= 0 else { return "" }
        return readAll(bio)
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        let seconds = timegm(&parts)
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }
}
