/// What this client covers of the API document, as data: the operations it
/// implements (each a method named by its operationId), the ones it leaves
/// out and why, and the problem codes it has a type for. `gaps(in:)`
/// compares them with a document, such as the one the service serves.
public enum WalletClientManifest {
    public static let implementedOperations: Set<String> = [
        "createCredit", "createDebit", "createGrant",
        "getWallet", "listEntries", "listHolds", "listCredits", "getAccountTokens", "getCredit",
        "createHold", "captureHold", "releaseHold", "getHold",
        "listEvents",
        "getHealth", "getReadiness", "getOpenAPIDocument",
    ]

    /// Operations a game server or app backend does not call.
    public static let excludedOperations: [String: String] = [
        "getMetrics": "Prometheus scrapes it; it is not part of a game server's work",
        "receiveAppStoreNotification": "Apple calls it, with its own signed payload, not a game server",
        "receiveGooglePlayNotification": "Google Pub/Sub pushes it, with its own OIDC token, not a game server",
    ]

    /// Every problem code with an error type of its own.
    public static var knownProblemCodes: Set<String> { Set(ProblemCatalog.types.keys) }

    /// What a document has that this client neither covers nor excludes.
    public struct Gaps: Sendable, Hashable, CustomStringConvertible {
        /// operationIds, sorted.
        public var operations: [String]
        /// Problem codes, sorted.
        public var problemCodes: [String]

        public var isEmpty: Bool { operations.isEmpty && problemCodes.isEmpty }

        public var description: String {
            "operations not covered: \(operations), problem codes not known: \(problemCodes)"
        }
    }

    public static func gaps(in document: JSONValue) -> Gaps {
        let covered = implementedOperations.union(excludedOperations.keys)
        return Gaps(operations: operationIDs(in: document).subtracting(covered).sorted(),
                    problemCodes: problemCodes(in: document).subtracting(knownProblemCodes).sorted())
    }

    static let httpMethods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    /// Every operationId under `paths`.
    public static func operationIDs(in document: JSONValue) -> Set<String> {
        var found = Set<String>()
        for (_, item) in document["paths"]?.objectValue ?? [:] {
            for method in httpMethods {
                if let id = item[method]?["operationId"]?.stringValue { found.insert(id) }
            }
        }
        return found
    }

    /// The `const` and `enum` values of `code` in every schema of
    /// `components.schemas` whose name ends in `Problem`, wherever in the
    /// schema (`allOf`, `oneOf`, nested) the `code` property is declared.
    public static func problemCodes(in document: JSONValue) -> Set<String> {
        var found = Set<String>()
        let schemas = document["components"]?["schemas"]?.objectValue ?? [:]
        for (name, schema) in schemas where name.hasSuffix("Problem") {
            // A walk with an explicit stack, bounded in the values it visits.
            var pending = [schema]
            var visited = 0
            while let value = pending.popLast(), visited < 10_000 {
                visited += 1
                if let code = value["properties"]?["code"] {
                    if let constant = code["const"]?.stringValue { found.insert(constant) }
                    for case .string(let member) in code["enum"]?.arrayValue ?? [] { found.insert(member) }
                }
                switch value {
                case .object(let members): pending.append(contentsOf: members.values)
                case .array(let elements): pending.append(contentsOf: elements)
                default: break
                }
            }
        }
        return found
    }
}
