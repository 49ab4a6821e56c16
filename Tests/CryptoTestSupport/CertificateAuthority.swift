public import Crypto
public import Foundation
import COpenSSL

/// An X.509 extension given by dotted OID and its DER value.
public struct CertificateExtension: Sendable, Equatable {
    public var oid: String
    public var isCritical: Bool
    /// The DER encoding placed inside the extension's OCTET STRING.
    public var derValue: [UInt8]

    public init(oid: String, isCritical: Bool = false, derValue: [UInt8]) {
        self.oid = oid
        self.isCritical = isCritical
        self.derValue = derValue
    }

    /// A non-critical marker extension whose value is DER NULL (`05 00`),
    /// the shape vendors use for "this certificate is for X" flags.
    public static func marker(oid: String) -> CertificateExtension {
        CertificateExtension(oid: oid, isCritical: false, derValue: [0x05, 0x00])
    }
}

/// What goes into one certificate besides its keys.
public struct CertificateProfile: Sendable {
    public var commonName: String
    public var organization: String?
    /// Positive serial number.
    public var serialNumber: UInt64
    public var notBefore: Date
    public var notAfter: Date
    public var extraExtensions: [CertificateExtension]
    /// Subject and authority key identifiers; on by default because X509
    /// strict mode requires them. Turn off to build a deliberately bad chain.
    public var includesKeyIdentifiers: Bool

    public init(
        commonName: String,
        organization: String? = nil,
        serialNumber: UInt64,
        notBefore: Date,
        notAfter: Date,
        extraExtensions: [CertificateExtension] = [],
        includesKeyIdentifiers: Bool = true
    ) {
        self.commonName = commonName
        self.organization = organization
        self.serialNumber = serialNumber
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.extraExtensions = extraExtensions
        self.includesKeyIdentifiers = includesKeyIdentifiers
    }
}

/// A certificate authority for tests: it issues
/// X.509 v3 certificates signed with ECDSA P-256 / SHA-256 that pass
/// OpenSSL's strict mode, so a test can build a realistic chain in-process.
///
/// - Roots are self-signed: critical basicConstraints CA:TRUE, critical
///   keyUsage keyCertSign + cRLSign, and a subject key identifier.
/// - Intermediates add an authority key identifier and are also CAs.
/// - Leaves are critical basicConstraints CA:FALSE, critical keyUsage
///   digitalSignature, with both key identifiers.
public final class CertificateAuthority: Sendable {
    public let certificate: Certificate
    public let privateKey: PrivateKey

    private init(certificate: Certificate, privateKey: PrivateKey) {
        self.certificate = certificate
        self.privateKey = privateKey
    }

    /// Creates a self-signed root.
    public static func root(
        _ profile: CertificateProfile,
        key: PrivateKey = PrivateKey()
    ) throws(CertificateError) -> CertificateAuthority {
        let certificate = try issueCertificate(
            profile, subjectKey: key.publicKey, isCA: true, issuer: nil, signingKey: key
        )
        return CertificateAuthority(certificate: certificate, privateKey: key)
    }

    /// Issues an intermediate CA below this one.
    public func intermediate(
        _ profile: CertificateProfile,
        key: PrivateKey = PrivateKey()
    ) throws(CertificateError) -> CertificateAuthority {
        let certificate = try Self.issueCertificate(
            profile, subjectKey: key.publicKey, isCA: true, issuer: self.certificate, signingKey: privateKey
        )
        return CertificateAuthority(certificate: certificate, privateKey: key)
    }

    /// Issues an end-entity certificate for `subjectKey`.
    public func leaf(_ profile: CertificateProfile, subjectKey: PublicKey) throws(CertificateError) -> Certificate {
        try Self.issueCertificate(
            profile, subjectKey: subjectKey, isCA: false, issuer: certificate, signingKey: privateKey
        )
    }

    private static func issueCertificate(
        _ profile: CertificateProfile,
        subjectKey: PublicKey,
        isCA: Bool,
        issuer: Certificate?,
        signingKey: PrivateKey
    ) throws(CertificateError) -> Certificate {
        precondition(profile.serialNumber > 0, "certificate serial numbers are positive")
        ERR_clear_error()
        guard let x509 = X509_new() else { throw CertificateError("X509_new failed") }
        defer { X509_free(x509) }

        func check(_ ok: Bool, _ step: String) throws(CertificateError) {
            if !ok { throw CertificateError("cannot build certificate: \(step)", openSSLDetail: drainOpenSSLErrors()) }
        }

        try check(X509_set_version(x509, Int(X509_VERSION_3)) == 1, "version")
        try check(ASN1_INTEGER_set_uint64(X509_get_serialNumber(x509), profile.serialNumber) == 1, "serial")
        try check(
            ASN1_TIME_set(X509_getm_notBefore(x509), time_t(profile.notBefore.timeIntervalSince1970)) != nil,
            "notBefore"
        )
        try check(
            ASN1_TIME_set(X509_getm_notAfter(x509), time_t(profile.notAfter.timeIntervalSince1970)) != nil,
            "notAfter"
        )

        guard let name = X509_NAME_new() else { throw CertificateError("X509_NAME_new failed") }
        defer { X509_NAME_free(name) }
        // Most general first, as X.500 names are conventionally ordered.
        if let organization = profile.organization {
            try check(addNameEntry(name, field: "O", value: organization), "organization")
        }
        try check(addNameEntry(name, field: "CN", value: profile.commonName), "common name")
        try check(X509_set_subject_name(x509, name) == 1, "subject")
        let issuerName = issuer.map { X509_get_subject_name($0.x509) } ?? X509_get_subject_name(x509)
        try check(X509_set_issuer_name(x509, issuerName) == 1, "issuer")
        try check(X509_set_pubkey(x509, subjectKey.pkey) == 1, "public key")

        var context = X509V3_CTX()
        // A self-signed certificate is its own issuer.
        X509V3_set_ctx(&context, issuer?.x509 ?? x509, x509, nil, nil, 0)
        if isCA {
            try addExtension(x509, &context, NID_basic_constraints, "critical,CA:TRUE")
            try addExtension(x509, &context, NID_key_usage, "critical,keyCertSign,cRLSign")
        } else {
            try addExtension(x509, &context, NID_basic_constraints, "critical,CA:FALSE")
            try addExtension(x509, &context, NID_key_usage, "critical,digitalSignature")
        }
        if profile.includesKeyIdentifiers {
            try addExtension(x509, &context, NID_subject_key_identifier, "hash")
            // Strict mode wants an authority key identifier on every
            // certificate that is not self-signed; roots do without.
            if issuer != nil {
                try addExtension(x509, &context, NID_authority_key_identifier, "keyid:always")
            }
        }
        for extra in profile.extraExtensions {
            try addRawExtension(x509, extra)
        }

        try check(X509_sign(x509, signingKey.pkey, EVP_sha256()) > 0, "signature")
        // Re-read the signed bytes, so the result is exactly what a relying
        // party parses, with no state left over from building.
        let der = Certificate.encode(x509)
        try check(!der.isEmpty, "encoding")
        return try Certificate(der: der)
    }

    private static func addNameEntry(_ name: OpaquePointer, field: String, value: String) -> Bool {
        let bytes = Array(value.utf8)
        return bytes.withUnsafeBufferPointer { buffer in
            X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, buffer.baseAddress, Int32(buffer.count), -1, 0) == 1
        }
    }

    private static func addExtension(
        _ x509: OpaquePointer,
        _ context: inout X509V3_CTX,
        _ nid: Int32,
        _ value: String
    ) throws(CertificateError) {
        guard let ext = X509V3_EXT_nconf_nid(nil, &context, nid, value) else {
            throw CertificateError("cannot build extension \(nid)=\(value)", openSSLDetail: drainOpenSSLErrors())
        }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(x509, ext, -1) == 1 else {
            throw CertificateError("cannot add extension \(nid)", openSSLDetail: drainOpenSSLErrors())
        }
    }

    private static func addRawExtension(_ x509: OpaquePointer, _ extra: CertificateExtension) throws(CertificateError) {
        guard let object = OBJ_txt2obj(extra.oid, 1) else {
            throw CertificateError("not a dotted OID: \(extra.oid)", openSSLDetail: drainOpenSSLErrors())
        }
        defer { ASN1_OBJECT_free(object) }
        guard let value = ASN1_OCTET_STRING_new() else { throw CertificateError("ASN1_OCTET_STRING_new failed") }
        defer { ASN1_OCTET_STRING_free(value) }
        let stored = extra.derValue.withUnsafeBufferPointer { buffer in
            ASN1_OCTET_STRING_set(value, buffer.baseAddress, Int32(buffer.count))
        }
        guard stored == 1,
              let ext = X509_EXTENSION_create_by_OBJ(nil, object, extra.isCritical ? 1 : 0, value)
        else {
            throw CertificateError("cannot build extension \(extra.oid)", openSSLDetail: drainOpenSSLErrors())
        }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(x509, ext, -1) == 1 else {
            throw CertificateError("cannot add extension \(extra.oid)", openSSLDetail: drainOpenSSLErrors())
        }
    }
}
