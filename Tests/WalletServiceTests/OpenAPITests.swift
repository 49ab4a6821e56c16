import HTTPServer
import JSON
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport

/// The OpenAPI document is written by hand, so these tests hold it to the
/// service: it is served as compiled in, it names exactly the routes the
/// router has, every operation has a success and answers its errors as
/// problems, and the security it declares is the security the service
/// enforces.
@Suite(.timeLimit(.minutes(2)))
struct OpenAPITests {
    struct Operation: Hashable, Comparable, CustomStringConvertible {
        var method: String
        var path: String

        static func < (lhs: Operation, rhs: Operation) -> Bool {
            (lhs.path, lhs.method) < (rhs.path, rhs.method)
        }

        var description: String { "\(method) \(path)" }
    }

    /// Documented before its route exists on this branch: the App Store
    /// notification endpoint arrives with its own change. It is excused only
    /// while the router lacks it; every other documented operation must be a
    /// route, and once this one is routed it is checked like the rest.
    static let documentedAheadOfRoute = Operation(method: "POST", path: "/v1/appstore/notifications")

    static let problemMediaType = "application/problem+json"
    static let httpMethods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    @Test func servedWithoutAnAPIKeyAsCompiledIn() throws {
        let service = try TestService()
        defer { service.stop() }
        let response = try service.request("GET", "/openapi.json")
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "application/json")
        #expect(response.header("X-Request-Id") != nil)
        #expect(response.body == OpenAPI.document)

        let document = try response.json()
        let version = try #require(document["openapi"]?.stringValue)
        #expect(version.hasPrefix("3.1."))
        #expect(document["info"]?["title"] == "wallet")
        #expect(document["info"]?["version"] == "0.1.0")
    }

    /// The support console's routes serve HTML pages for a browser, not the
    /// API; docs/console.md documents them.
    static func isConsole(_ path: String) -> Bool { path == "/admin" || path.hasPrefix("/admin/") }

    @Test func documentsEveryRouteAndNothingElse() throws {
        let service = try TestService()
        defer { service.stop() }
        let routed = Set(service.application.router.routes.filter { !Self.isConsole($0.pattern) }
            .map { Operation(method: $0.method, path: $0.pattern) })
        #expect(routed.count < service.application.router.routes.count, "the console's routes are served")
        let documented = Set(try Self.operations(in: Self.document()).map(\.operation))
        let excused: Set<Operation> = routed.contains(Self.documentedAheadOfRoute) ? [] : [Self.documentedAheadOfRoute]

        let undocumented = routed.subtracting(documented).sorted()
        #expect(undocumented.isEmpty, "routes missing from openapi.json: \(undocumented)")
        let unrouted = documented.subtracting(routed).subtracting(excused).sorted()
        #expect(unrouted.isEmpty, "documented operations the router lacks: \(unrouted)")
    }

    @Test func everyOperationHasASuccessAndAnswersErrorsAsProblems() throws {
        let document = try Self.document()
        let operations = try Self.operations(in: document)
        #expect(operations.count >= 10)
        for (operation, body) in operations {
            let responses = try #require(body["responses"]?.objectMembers, "\(operation) has no responses")
            let statuses = responses.map(\.key)
            #expect(statuses.contains { $0.hasPrefix("2") }, "\(operation) has no 2xx response")
            for (status, reference) in responses {
                let response = try Self.resolve(reference, in: document)
                let headers = response["headers"]?.objectMembers.map(\.key) ?? []
                #expect(headers.contains("X-Request-Id"), "\(operation) \(status) does not document X-Request-Id")
                guard status.hasPrefix("4") || status.hasPrefix("5") else { continue }
                let mediaTypes = response["content"]?.objectMembers.map(\.key) ?? []
                #expect(mediaTypes == [Self.problemMediaType], "\(operation) \(status) is not only \(Self.problemMediaType)")
            }
        }
    }

    @Test func declaresABearerSchemeAndSecurityOnEveryOperation() throws {
        let document = try Self.document()
        let schemes = try #require(document["components"]?["securitySchemes"]?.objectMembers)
        let bearer = schemes.filter { $0.value["type"] == "http" && $0.value["scheme"]?.stringValue?.lowercased() == "bearer" }
        #expect(bearer.count == 1)
        let schemeNames = Set(schemes.map(\.key))
        for (operation, body) in try Self.operations(in: document) {
            // No document-wide default: each operation says for itself.
            let requirements = try #require(body["security"]?.arrayElements, "\(operation) does not declare security")
            for requirement in requirements {
                for (name, _) in requirement.objectMembers {
                    #expect(schemeNames.contains(name), "\(operation) names unknown security scheme \(name)")
                }
            }
        }
    }

    /// Asks the running service: an operation that declares the bearer scheme
    /// refuses a request without a key (401) and one with a key lacking its
    /// scope (403); an operation that declares none asks for no key.
    @Test func declaredSecurityIsWhatTheServiceEnforces() throws {
        let service = try TestService()
        defer { service.stop() }
        let routed = Set(service.application.router.routes.map { Operation(method: $0.method, path: $0.pattern) })
        let keys: [(key: String, scopes: Set<String>)] = [
            (service.appBackendKey, ["credit", "read"]),
            (service.gameServerKey, ["debit", "read"]),
        ]
        for (operation, body) in try Self.operations(in: Self.document()) where routed.contains(operation) {
            let path = Self.samplePath(operation.path)
            let scopes = (body["security"]?.arrayElements ?? []).flatMap { requirement in
                requirement["bearer"]?.arrayElements.compactMap(\.stringValue) ?? []
            }
            let anonymous = try service.request(operation.method, path)
            guard let scope = scopes.first else {
                #expect(anonymous.status != 401 && anonymous.status != 403, "\(operation) asked for a key")
                continue
            }
            #expect(scopes == [scope], "\(operation) should name one scope")
            #expect(anonymous.status == 401, "\(operation) answered \(anonymous.status) without a key")
            #expect(anonymous.header("WWW-Authenticate") == "Bearer")
            for (key, held) in keys where !held.contains(scope) {
                let refused = try service.request(operation.method, path, key: key)
                #expect(refused.status == 403, "\(operation) answered \(refused.status) to a key without \(scope)")
            }
        }
    }

    // MARK: Reading the document

    static func document() throws -> JSONValue {
        try JSONParser.parse(OpenAPI.document, maxDepth: 64)
    }

    /// Every operation under `paths`, with its method in upper case as the router spells it.
    static func operations(in document: JSONValue) throws -> [(operation: Operation, body: JSONValue)] {
        let paths = try #require(document["paths"]?.objectMembers)
        return paths.flatMap { path, item in
            item.objectMembers.filter { httpMethods.contains($0.key) }.map { method, body in
                (Operation(method: method.uppercased(), path: path), body)
            }
        }
    }

    /// Follows local `$ref`s (`#/components/...`) to the object they name.
    static func resolve(_ value: JSONValue, in document: JSONValue) throws -> JSONValue {
        var current = value
        for _ in 0..<8 {
            guard let reference = current["$ref"]?.stringValue else { return current }
            try #require(reference.hasPrefix("#/"), "only local references are expected: \(reference)")
            var target: JSONValue? = document
            for name in reference.dropFirst(2).split(separator: "/") {
                target = target?[String(name)]
            }
            current = try #require(target, "unresolved reference \(reference)")
        }
        Issue.record("reference chain too long")
        return current
    }

    /// A concrete path for a pattern: each `{name}` becomes an id valid for
    /// every parameter the API has.
    static func samplePath(_ pattern: String) -> String {
        pattern.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("{") ? "sample-1" : String($0) }
            .joined(separator: "/")
    }
}

private extension JSONValue {
    var objectMembers: [(key: String, value: JSONValue)] {
        if case .object(let members) = self { return members }
        return []
    }

    var arrayElements: [JSONValue] {
        if case .array(let elements) = self { return elements }
        return []
    }

    var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }
}
