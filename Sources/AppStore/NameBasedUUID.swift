import Crypto
public import Foundation

/// Name-based UUIDs, version 5 (RFC 9562 §5.5): the same namespace and name
/// always give the same UUID, so the service can derive a user's App Store
/// `appAccountToken` from the user ID without storing it.
public enum NameBasedUUID {
    /// RFC 9562 §6.6: names that are fully qualified domain names.
    public static let dnsNamespace = UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!
    /// RFC 9562 §6.6: names that are URLs.
    public static let urlNamespace = UUID(uuidString: "6ba7b811-9dad-11d1-80b4-00c04fd430c8")!

    /// The version 5 UUID of `name` (hashed as UTF-8) in `namespace`, in
    /// lowercase canonical form (`8-4-4-4-12` hexadecimal digits).
    public static func v5(namespace: UUID, name: String) -> String {
        let namespaceBytes = withUnsafeBytes(of: namespace.uuid) { Array($0) }
        return v5(namespaceBytes: namespaceBytes, name: name)
    }

    /// As `v5(namespace:name:)`, with the namespace in text form (any letter
    /// case). Returns nil if `namespace` is not a UUID.
    public static func v5(namespace: String, name: String) -> String? {
        guard let parsed = UUID(uuidString: namespace) else { return nil }
        return v5(namespace: parsed, name: name)
    }

    /// As `v5(namespace:name:)`, with the namespace as its 16 bytes in
    /// network order. Any other count is a programmer error.
    public static func v5(namespaceBytes: [UInt8], name: String) -> String {
        precondition(namespaceBytes.count == 16, "a UUID namespace is 16 bytes")
        var bytes = Array(SHA1.hash(namespaceBytes + Array(name.utf8)).prefix(16))
        // The top four bits of octet 6 carry the version, 0101.
        bytes[6] = bytes[6] & 0x0f | 0x50
        // The top two bits of octet 8 carry the variant, 10.
        bytes[8] = bytes[8] & 0x3f | 0x80
        return canonical(bytes)
    }

    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase.
    static func canonical(_ bytes: [UInt8]) -> String {
        let hex = hexString(bytes)
        var text = ""
        text.reserveCapacity(36)
        for (index, character) in hex.enumerated() {
            if index == 8 || index == 12 || index == 16 || index == 20 { text.append("-") }
            text.append(character)
        }
        return text
    }
}
