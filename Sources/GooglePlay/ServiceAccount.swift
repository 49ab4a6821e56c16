public import Crypto
public import Foundation
import JSON

/// A Google Cloud service account, read from the JSON key file the Cloud
/// console issues (`"type": "service_account"`). The wallet uses four of its
/// fields: `client_email`, `private_key`, `token_uri` and, when present,
/// `private_key_id`; the rest (`project_id`, `client_id`, `auth_uri`, …) are
/// ignored.
///
/// The private key never leaves this value in text: `description`,
/// `debugDescription` and the mirror name the account and its key id only,
/// and no error quotes the file.
public struct ServiceAccount: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Largest key file read. Google's are about 2.4 kB; a 4096-bit key
    /// makes them about 3.3 kB.
    public static let fileBytesMax = 64 * 1024

    /// Why a key file was refused. The cases name the field and what is
    /// wrong with it, never its value, so they are safe to log.
    public enum LoadError: Error, Sendable, Equatable, CustomStringConvertible {
        /// Empty, or larger than `fileBytesMax`.
        case size(bytes: Int)
        /// Not a JSON object.
        case notJSON
        /// A field the wallet needs is absent (or null).
        case missingField(String)
        /// A field is present but unusable; the second value says why.
        case badField(String, String)

        public var description: String {
            switch self {
            case .size(let bytes):
                "the service account key file has \(bytes) bytes (1 to \(ServiceAccount.fileBytesMax) expected)"
            case .notJSON: "the service account key file is not a JSON object"
            case .missingField(let name): "the service account key file has no \(name)"
            case .badField(let name, let why): "the service account key file's \(name) \(why)"
            }
        }
    }

    /// The account's address, the `iss` of its assertions.
    public let clientEmail: String
    /// The key that signs assertions. `RSAPrivateKey` prints nothing of itself.
    public let privateKey: RSAPrivateKey
    /// Where assertions are exchanged for access tokens, and their `aud`.
    public let tokenURI: URL
    /// The key's id, sent as the assertion's `kid` so Google picks the key
    /// without trying each of the account's keys.
    public let privateKeyID: String?

    public init(clientEmail: String, privateKey: RSAPrivateKey, tokenURI: URL, privateKeyID: String?) {
        self.clientEmail = clientEmail
        self.privateKey = privateKey
        self.tokenURI = tokenURI
        self.privateKeyID = privateKeyID
    }

    /// Reads a key file's bytes.
    public init(json bytes: [UInt8]) throws(LoadError) {
        guard !bytes.isEmpty, bytes.count <= Self.fileBytesMax else { throw .size(bytes: bytes.count) }
        // The parser's error names a byte offset and may quote a key: dropped.
        guard let object = try? JSONParser.parse(bytes), object.objectMembers != nil else {
            throw .notJSON
        }
        if let type = object["type"], type != .null {
            guard type.stringValue == "service_account" else {
                throw .badField("type", "is not \"service_account\" (is this an OAuth client or user credential file?)")
            }
        }
        let clientEmail = try Self.text(object, "client_email")
        guard clientEmail.contains("@"), clientEmail.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
        else { throw .badField("client_email", "is not an e-mail address") }

        let pem = try Self.text(object, "private_key")
        let privateKey: RSAPrivateKey
        do {
            privateKey = try RSAPrivateKey(pem: pem)
        } catch {
            // KeyError's cases describe the key's kind and size, never its bytes.
            throw .badField("private_key", "is unusable: \(error)")
        }

        let tokenURIText = try Self.text(object, "token_uri")
        guard let tokenURI = URL(string: tokenURIText), let scheme = tokenURI.scheme?.lowercased(),
              let host = tokenURI.host, !host.isEmpty
        else { throw .badField("token_uri", "is not an absolute URL") }
        // The assertion is a bearer credential for an hour: it travels in
        // the clear only to this machine, which is what tests do.
        guard scheme == "https" || (scheme == "http" && Self.isLoopback(host)) else {
            throw .badField("token_uri", "is not https")
        }

        var privateKeyID: String?
        if let value = object["private_key_id"], value != .null {
            guard let text = value.stringValue, !text.isEmpty,
                  text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            else { throw .badField("private_key_id", "is not a key id") }
            privateKeyID = text
        }
        self.init(clientEmail: clientEmail, privateKey: privateKey, tokenURI: tokenURI, privateKeyID: privateKeyID)
    }

    public var description: String {
        "ServiceAccount(client_email: \(clientEmail), private_key_id: \(privateKeyID ?? "none"), "
            + "token_uri: \(tokenURI.absoluteString))"
    }

    public var debugDescription: String { description }

    /// What `dump` and debuggers show: the key is left out.
    public var customMirror: Mirror {
        Mirror(self, children: ["clientEmail": clientEmail, "privateKeyID": privateKeyID as Any,
                                "tokenURI": tokenURI], displayStyle: .struct)
    }

    private static func text(_ object: JSONValue, _ name: String) throws(LoadError) -> String {
        guard let value = object[name], value != .null else { throw .missingField(name) }
        guard let text = value.stringValue else { throw .badField(name, "is not a string") }
        guard !text.isEmpty else { throw .badField(name, "is empty") }
        return text
    }

    private static func isLoopback(_ host: String) -> Bool {
        ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host.lowercased())
    }
}
