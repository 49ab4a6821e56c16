import Locking

/// Handles one request. It runs on a server thread: answer through the
/// `Responder` exactly once, either before returning or later from any
/// thread. A handler that waits on I/O should answer later rather than block,
/// because a blocked handler holds one of the server's few threads.
public typealias Handler = @Sendable (Request, Responder) -> Void

/// Checks a request on its headers alone, before any body byte is read, so a
/// caller without the right to call a route learns so before the body's size
/// or shape is considered. Throw to refuse (the error maps to a problem as a
/// handler's would); the returned value reaches the handler as
/// `Request.admission`.
public typealias Gate = @Sendable (RequestHead) throws -> (any Sendable)?

/// What a gate sees: everything but the body.
public struct RequestHead: Sendable {
    public let method: String
    public let path: String
    public let headers: Headers
    public let requestID: String
}

/// Method and path routing for a small, fixed set of routes.
///
/// Patterns are absolute paths whose segments are literals or `{name}`; a
/// `{name}` segment matches one non-empty, percent-decoded path segment.
/// When several patterns match, the one with more literal segments wins
/// (`/v1/wallets/me` over `/v1/wallets/{id}`), then the one added first.
/// Routes are added before the server starts; the server freezes the router.
public final class Router: Sendable {
    private struct State: Sendable {
        var routes: [Route] = []
        var frozen = false
    }

    private let state = Locked(State())

    public init() {}

    /// Adds a route. A malformed pattern or a repeated method and pattern is a
    /// programming error and stops the process.
    public func add(_ method: String, _ pattern: String, gate: Gate? = nil, _ handler: @escaping Handler) {
        let route = Route(method: method, pattern: pattern, gate: gate, handler: handler)
        state.withLock { state in
            precondition(!state.frozen, "routes must be added before the server starts")
            precondition(
                !state.routes.contains { $0.method == method && $0.pattern == pattern },
                "route \(method) \(pattern) added twice")
            state.routes.append(route)
        }
    }

    /// Adds a route whose handler answers before returning; a thrown error
    /// becomes its problem response.
    public func add(_ method: String, _ pattern: String, gate: Gate? = nil,
                    sync: @escaping @Sendable (Request) throws -> Response) {
        add(method, pattern, gate: gate) { request, responder in
            do {
                responder.send(try sync(request))
            } catch {
                responder.fail(error)
            }
        }
    }

    /// Every route's method and pattern, in the order added.
    public var routes: [(method: String, pattern: String)] {
        state.withLock { $0.routes.map { ($0.method, $0.pattern) } }
    }

    /// The routes as an immutable table; later `add` calls are refused.
    func freeze() -> RouteTable {
        state.withLock { state in
            state.frozen = true
            return RouteTable(routes: state.routes)
        }
    }
}

struct Route: Sendable {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    let method: String
    let pattern: String
    let segments: [Segment]
    let literalCount: Int
    let gate: Gate?
    let handler: Handler

    init(method: String, pattern: String, gate: Gate?, handler: @escaping Handler) {
        precondition(!method.isEmpty && method.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }, "invalid method \(method)")
        precondition(pattern.hasPrefix("/"), "route pattern \(pattern) must start with /")
        var names = Set<String>()
        var segments: [Segment] = []
        for piece in pattern.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            if piece.hasPrefix("{") && piece.hasSuffix("}") && piece.count > 2 {
                let name = String(piece.dropFirst().dropLast())
                precondition(!name.contains("{") && !name.contains("}"), "malformed parameter in \(pattern)")
                precondition(names.insert(name).inserted, "parameter {\(name)} repeated in \(pattern)")
                segments.append(.parameter(name))
            } else {
                precondition(!piece.contains("{") && !piece.contains("}"), "malformed segment in \(pattern)")
                segments.append(.literal(String(piece)))
            }
        }
        self.method = method
        self.pattern = pattern
        self.segments = segments
        self.literalCount = segments.count { if case .literal = $0 { true } else { false } }
        self.gate = gate
        self.handler = handler
    }

    /// The parameter values when `path` (decoded segments) matches.
    func match(_ path: [String]) -> [String: String]? {
        guard path.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, value) in zip(segments, path) {
            switch segment {
            case .literal(let literal):
                guard literal == value else { return nil }
            case .parameter(let name):
                guard !value.isEmpty else { return nil }
                parameters[name] = value
            }
        }
        return parameters
    }
}

/// The frozen routes the server dispatches with; read without locks.
struct RouteTable: Sendable {
    enum Match {
        case found(Route, parameters: [String: String])
        /// The path exists for these methods, sorted.
        case methodNotAllowed(allowed: [String])
        case notFound
    }

    let routes: [Route]

    func match(method: String, path: [String]) -> Match {
        var best: (route: Route, parameters: [String: String])?
        var allowed: Set<String> = []
        for route in routes {
            guard let parameters = route.match(path) else { continue }
            allowed.insert(route.method)
            guard route.method == method else { continue }
            if best == nil || route.literalCount > best!.route.literalCount {
                best = (route, parameters)
            }
        }
        if let best { return .found(best.route, parameters: best.parameters) }
        if allowed.isEmpty { return .notFound }
        return .methodNotAllowed(allowed: allowed.sorted())
    }
}
