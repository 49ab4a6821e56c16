import Crypto
public import Foundation
import Postgres
public import WalletCore

/// API keys: making, listing and revoking them, and finding the client
/// behind a presented secret.
///
/// A secret is `wk_` and 32 CSPRNG bytes in base64url. Only its SHA-256 is
/// stored. A lookup goes by that hash, so its timing depends on the hash of
/// what was presented and says nothing about other keys; the stored hash is
/// then compared in constant time.
/// A key as `wallet keys list` shows it; the secret is never kept.
public struct APIKeyInfo: Sendable, Equatable {
    public var name: String
    public var scopes: [Scope]
    public var createdAt: Date
    public var lastUsedAt: Date?
    public var revokedAt: Date?
}

public struct APIKeys: Sendable {
    public static let secretPrefix = "wk_"

    public enum KeyError: Error, CustomStringConvertible, Equatable {
        case badName(String)
        case noScopes
        case unknownScope(String)
        case nameTaken(String)
        case noSuchKey(String)

        public var description: String {
            switch self {
            case .badName(let name): "key name \(name) must be 1-64 characters of [A-Za-z0-9._-]"
            case .noScopes: "give at least one scope: \(Self.scopeNames)"
            case .unknownScope(let scope): "unknown scope \(scope); scopes are \(Self.scopeNames)"
            case .nameTaken(let name): "a live key named \(name) exists; revoke it first"
            case .noSuchKey(let name): "no live key named \(name)"
            }
        }

        private static var scopeNames: String { Scope.allCases.map(\.rawValue).joined(separator: ", ") }
    }

    static func parseScopes(_ text: String) throws(KeyError) -> [Scope] {
        var scopes: [Scope] = []
        for part in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !part.isEmpty {
            guard let scope = Scope(rawValue: part) else { throw .unknownScope(part) }
            if !scopes.contains(scope) { scopes.append(scope) }
        }
        guard !scopes.isEmpty else { throw .noScopes }
        return scopes.sorted()
    }

    /// 1-64 characters of `[A-Za-z0-9._-]`, as the table's constraint says.
    static func isKeyName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count) && name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                true
            default:
                false
            }
        }
    }

    public static func makeSecret() -> String {
        secretPrefix + Base64URL.encode(SecureRandom.bytes(count: 32))
    }

    static func hash(_ secret: String) -> [UInt8] {
        SHA256.hash(Array(secret.utf8))
    }

    /// Stores a new key and returns its secret, which is never stored.
    static func create(name: String, scopes: [Scope], on connection: Connection) throws -> String {
        guard isKeyName(name) else { throw KeyError.badName(name) }
        guard !scopes.isEmpty else { throw KeyError.noScopes }
        let secret = makeSecret()
        do {
            try connection.query("""
                INSERT INTO wallet.api_keys (name, key_hash, scopes)
                VALUES (\(name), \(ByteA(hash(secret))), \(scopes.map(\.rawValue))::text[])
                """)
        } catch {
            // (A `catch where` on this typed error crashes the 6.3.1 compiler.)
            if error.sqlState == .uniqueViolation { throw KeyError.nameTaken(name) }
            throw error
        }
        return secret
    }

    static func list(on connection: Connection) throws -> [APIKeyInfo] {
        try connection.query("""
            SELECT name, array_to_string(scopes, ','), created_at, last_used_at, revoked_at
            FROM wallet.api_keys ORDER BY revoked_at IS NOT NULL, name, created_at
            """).map { row in
            APIKeyInfo(name: try row.decode(String.self, at: 0),
                    scopes: try scopes(row, at: 1),
                    createdAt: try row.decode(Date.self, at: 2), lastUsedAt: try row.decodeIfPresent(Date.self, at: 3),
                    revokedAt: try row.decodeIfPresent(Date.self, at: 4))
        }
    }

    static func revoke(name: String, on connection: Connection) throws {
        let rows = try connection.query("""
            UPDATE wallet.api_keys SET revoked_at = now() WHERE name = \(name) AND revoked_at IS NULL
            """)
        guard rows.affectedRows == 1 else { throw KeyError.noSuchKey(name) }
    }

    static func count(on connection: Connection) throws -> Int {
        try connection.query("SELECT count(*) FROM wallet.api_keys")[0].decode(Int.self, at: 0)
    }

    /// On a database with no key at all, makes the two keys a developer
    /// tries the API with, and a key for the support console, and returns
    /// them; otherwise nil. Call it inside a transaction: the table lock
    /// keeps two first starts from both making them.
    static func createDevelopmentKeysIfNone(on connection: Connection) throws -> DevelopmentKeys? {
        try connection.execute("LOCK TABLE wallet.api_keys IN EXCLUSIVE MODE")
        guard try count(on: connection) == 0 else { return nil }
        return DevelopmentKeys(appBackend: try create(name: "app-backend", scopes: [.credit, .read], on: connection),
                               gameServer: try create(name: "game-server", scopes: [.debit, .grant, .read], on: connection),
                               console: try create(name: "support-console", scopes: [.console], on: connection))
    }

    /// The live client with this secret's hash, or nil.
    static func authenticate(hash: [UInt8], on connection: Connection) throws -> APIClient? {
        guard let row = try connection.prepared("""
            SELECT name, array_to_string(scopes, ','), key_hash FROM wallet.authenticate(\(ByteA(hash)))
            """).single else { return nil }
        let stored = try row.decode(ByteA.self, at: 2).bytes
        guard constantTimeEquals(stored, hash) else { return nil }
        return APIClient(name: try row.decode(String.self, at: 0), scopes: Set(try scopes(row, at: 1)))
    }

    /// The key's scopes (`array_to_string(scopes, ',')`); one this build
    /// does not know is a decoding error, never dropped.
    private static func scopes(_ row: Row, at index: Int) throws -> [Scope] {
        try row.decode(String.self, at: index).split(separator: ",").map { try Scope(postgresText: String($0)) }
    }
}
