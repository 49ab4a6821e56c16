import Foundation

/// The peers whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed
/// (WALLET_TRUSTED_PROXIES): IPv4 networks in CIDR notation. From any other
/// peer those headers are a client's claim and are ignored.
public struct TrustedProxies: Sendable, Equatable {
    private struct Network: Sendable, Equatable {
        let base: UInt32
        let mask: UInt32
    }

    private let networks: [Network]

    /// None: every peer is the client itself.
    public static let none = TrustedProxies(networks: [])

    private init(networks: [Network]) {
        self.networks = networks
    }

    /// A comma-separated list of `a.b.c.d/n` (or a bare address, /32); nil
    /// when any item is not one.
    public init?(_ text: String) {
        var networks: [Network] = []
        for item in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            let parts = item.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count <= 2, let address = Self.address(String(parts[0])) else { return nil }
            var bits = 32
            if parts.count == 2 {
                guard let given = Int(parts[1]), (0...32).contains(given), parts[1].allSatisfy(\.isASCII) else { return nil }
                bits = given
            }
            let mask: UInt32 = bits == 0 ? 0 : UInt32.max << (32 - bits)
            networks.append(Network(base: address & mask, mask: mask))
        }
        guard !networks.isEmpty else { return nil }
        self.networks = networks
    }

    /// Whether `address` (dotted IPv4) is in one of the networks.
    public func contains(_ address: String) -> Bool {
        guard let value = Self.address(address) else { return false }
        return networks.contains { value & $0.mask == $0.base }
    }

    /// The client of `request`: the peer, unless the peer is a trusted
    /// proxy, in which case the nearest address of `X-Forwarded-For` that
    /// is not one (read from the right, as each proxy appends); and whether
    /// the client's own request came over HTTPS, as the trusted proxy's
    /// `X-Forwarded-Proto` says (never, from an untrusted peer).
    public func client(of request: Request) -> (address: String?, https: Bool) {
        guard let peer = request.remoteAddress, contains(peer) else { return (request.remoteAddress, false) }
        var client = peer
        for hop in request.headers.values(for: "x-forwarded-for").joined(separator: ",").split(separator: ",").reversed() {
            let address = hop.trimmingCharacters(in: .whitespaces)
            guard Self.address(address) != nil else { break }
            client = address
            if !contains(address) { break }
        }
        let proto = request.headers.values(for: "x-forwarded-proto").joined(separator: ",").split(separator: ",").last
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        return (client, proto == "https")
    }

    private static func address(_ text: String) -> UInt32? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let byte = UInt8(part) else { return nil }
            value = value << 8 | UInt32(byte)
        }
        return value
    }
}
