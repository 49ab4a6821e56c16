import Dispatch
import HTTPServer
import JSON
import Locking
import Logging
import Testing
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Every test here talks to a real server over a loopback socket. They run
/// one at a time because several measure time on a two-core machine.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct ServerTests {
    private static func echoRoutes(_ router: Router) {
        router.add("GET", "/v1/wallets/{user_id}/entries", sync: { request in
            .json([
                "limit": request.query["limit"].map(JSONValue.string) ?? .null,
                "note": request.query["note"].map(JSONValue.string) ?? .null,
                "userID": .string(request.pathParameters["user_id"]!),
            ])
        })
        router.add("POST", "/v1/wallets/{user_id}/entries", sync: { _ in .json(["created": true], status: 201) })
        router.add("GET", "/v1/wallets/me/entries", sync: { _ in .text("mine") })
        router.add("GET", "/health", sync: { _ in .text("ok") })
    }

    /// Checks the RFC 9457 members every problem must have.
    private func expectProblem(_ response: HTTPTestResponse, status: Int, code: String) throws {
        #expect(response.status == status)
        #expect(response.header("Content-Type") == "application/problem+json")
        #expect(response.header("Content-Length") == String(response.body.count))
        let problem = try response.json()
        #expect(problem["type"] == .string("urn:problem:\(code)"))
        #expect(problem["code"] == .string(code))
        #expect(problem["status"] == JSONValue(status))
        #expect(problem["title"] != nil)
        #expect(problem["detail"] != nil)
        let requestID = try #require(response.header("X-Request-Id"))
        #expect(problem["instance"] == .string(requestID))
    }

    // MARK: Routing

    @Test func routesWithDecodedPathParametersAndQuery() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()

        let response = try client.request(method: "GET", path: "/v1/wallets/al%20ice%2Fx/entries?limit=5&limit=6&note=a+b%21")
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "application/json")
        #expect(try response.json() == ["limit": "5", "note": "a b!", "userID": "al ice/x"])

        // A literal segment beats a parameter.
        #expect(try client.request(method: "GET", path: "/v1/wallets/me/entries").text == "mine")
        #expect(try client.request(method: "POST", path: "/v1/wallets/bob/entries", body: Array("{}".utf8)).status == 201)
        // Absolute-form targets, which RFC 9112 requires servers to accept.
        #expect(try client.request(method: "GET", path: "http://127.0.0.1/health").text == "ok")
        #expect(try client.request(method: "GET", path: "HTTPS://example.com/v1/wallets/me/entries?x=1").text == "mine")
    }

    @Test func unknownPathIsNotFoundProblem() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()

        try expectProblem(try client.request(method: "GET", path: "/nope"), status: 404, code: "not_found")
        // An empty parameter segment does not match.
        try expectProblem(try client.request(method: "GET", path: "/v1/wallets//entries"), status: 404, code: "not_found")
        try expectProblem(try client.request(method: "GET", path: "/health/"), status: 404, code: "not_found")
        // The connection survived the 404s.
        #expect(try client.request(method: "GET", path: "/health").text == "ok")
    }

    @Test func otherMethodIsMethodNotAllowedWithAllow() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()

        let response = try client.request(method: "DELETE", path: "/v1/wallets/bob/entries")
        try expectProblem(response, status: 405, code: "method_not_allowed")
        #expect(response.header("Allow") == "GET, POST")
        let head = try client.request(method: "PUT", path: "/health")
        #expect(head.header("Allow") == "GET")
    }

    @Test func unknownPathWinsOverHugeBody() throws {
        let test = try TestServer(configure: { $0.maxBodyBytes = 1024 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()

        // Only the headers are sent: the answer must not wait for the body.
        try client.send("POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
        try expectProblem(try client.readResponse(), status: 404, code: "not_found")
        #expect(client.waitForClose(seconds: 3), "an early answer skips the body, so the connection must close")
    }

    @Test func malformedTargetIsBadRequest() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()
        try expectProblem(try client.request(method: "GET", path: "/v1/wallets/%zz/entries"), status: 400, code: "bad_request")
        try expectProblem(try client.request(method: "GET", path: "/v1/wallets/%C0%AF/entries"), status: 400, code: "bad_request")
    }

    // MARK: Limits

    @Test func declaredBodyOverLimitIsRefusedAtOnce() throws {
        let handled = Locked(0)
        let test = try TestServer(configure: { $0.maxBodyBytes = 1024 }) { router in
            router.add("POST", "/upload", sync: { _ in
                handled.withLock { $0 += 1 }
                return .text("stored")
            })
        }
        defer { test.server.shutdown() }

        let client = try test.client()
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n")
        let response = try client.readResponse()
        try expectProblem(response, status: 413, code: "payload_too_large")
        #expect(try response.json()["limit_bytes"] == 1024)
        #expect(client.waitForClose(seconds: 3))

        // Exactly the limit is fine.
        let fits = try test.client().request(method: "POST", path: "/upload", body: [UInt8](repeating: 65, count: 1024))
        #expect(fits.status == 200)
        #expect(handled.current == 1)
    }

    @Test func chunkedBodyOverLimitIsRefusedWhenExceeded() throws {
        let handled = Locked(0)
        let test = try TestServer(configure: { $0.maxBodyBytes = 1024 }) { router in
            router.add("POST", "/upload", sync: { request in
                handled.withLock { $0 += 1 }
                return .text("\(request.body.count)")
            })
        }
        defer { test.server.shutdown() }

        // Within the limit, chunked works.
        let small = try test.client()
        try small.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n" + String(repeating: "a", count: 512) + "\r\n0\r\n\r\n")
        #expect(try small.readResponse().text == "512")

        // Over it: two 600-byte chunks, and no final chunk ever sent.
        let client = try test.client()
        let chunk = "258\r\n" + String(repeating: "b", count: 600) + "\r\n"
        try client.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk)
        let response = try client.readResponse()
        try expectProblem(response, status: 413, code: "payload_too_large")
        #expect(response.header("Connection") == "close")
        #expect(client.waitForClose(seconds: 3))
        #expect(handled.current == 1)
    }

    @Test func ambiguousOrUnsupportedFramingIsRefused() throws {
        let test = try TestServer(configure: { $0.maxBodyBytes = 1024 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let path = "/v1/wallets/x/entries"

        let both = try test.client()
        try both.send("POST \(path) HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n")
        try expectProblem(try both.readResponse(), status: 400, code: "bad_request")

        let twoLengths = try test.client()
        try twoLengths.send("POST \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}")
        try expectProblem(try twoLengths.readResponse(), status: 400, code: "bad_request")

        let gzip = try test.client()
        try gzip.send("POST \(path) HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")
        try expectProblem(try gzip.readResponse(), status: 501, code: "unsupported_transfer_encoding")

        // A client that asks before sending a too-large body is told 413, not 100.
        let asking = try test.client()
        try asking.send("POST \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
        try expectProblem(try asking.readResponse(), status: 413, code: "payload_too_large")
    }

    @Test func headersOverLimitAreRefused() throws {
        let test = try TestServer(configure: { $0.maxHeaderBytes = 1024 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()

        let response = try client.request(
            method: "GET", path: "/health", headers: [("X-Padding", String(repeating: "p", count: 2000))])
        try expectProblem(response, status: 431, code: "headers_too_large")
        // Just under the limit passes.
        let fits = try client.request(method: "GET", path: "/health", headers: [("X-Padding", String(repeating: "p", count: 800))])
        #expect(fits.status == 200)
    }

    /// At 16 KiB (the test server's limit and the service's default) the
    /// connection's memory pool, sized from the limit, still holds headers
    /// just under it, and the server, not the library, refuses those over it.
    @Test func headersAtTheDefaultLimitFitTheConnectionPool() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()
        let fits = try client.request(method: "GET", path: "/health",
                                      headers: (0..<3).map { ("X-Padding-\($0)", String(repeating: "p", count: 5_000)) })
        #expect(fits.status == 200)
        let over = try test.client().request(method: "GET", path: "/health",
                                             headers: (0..<4).map { ("X-Padding-\($0)", String(repeating: "p", count: 5_000)) })
        try expectProblem(over, status: 431, code: "headers_too_large")
    }

    @Test func connectionsBeyondTheLimitWaitForASlot() throws {
        let test = try TestServer(configure: { $0.maxConnections = 2; $0.threads = 2 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let held = try (0..<2).map { _ in try test.client() }
        for client in held {
            #expect(try client.request(method: "GET", path: "/health").status == 200)
        }
        // The kernel completes the handshake, but the server does not accept.
        let third = try test.client(timeoutSeconds: 0.5)
        #expect(throws: HTTPTestClientError.timedOut) { _ = try third.request(method: "GET", path: "/health") }
        held[0].close()
        third.timeoutSeconds = 5
        #expect(try third.readResponse().status == 200)
    }

    @Test func connectionsFromOneAddressPastItsLimitAreClosedOnArrival() throws {
        let test = try TestServer(configure: { $0.maxConnectionsPerAddress = 2 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let held = try (0..<2).map { _ in try test.client() }
        for client in held {
            #expect(try client.request(method: "GET", path: "/health").status == 200)
        }
        // More from the same address: each is closed at once, unanswered.
        let refused = try (0..<20).map { _ in try test.client() }
        for client in refused {
            #expect(client.waitForClose(seconds: 5))
        }
        #expect(test.server.refusedConnectionCount == 20)
        #expect(throws: (any Error).self) { _ = try refused[0].readResponse() }
        // Another address is served, and so is a held connection.
        let other = try HTTPTestClient(port: test.port, sourceHost: "127.0.0.2")
        #expect(try other.request(method: "GET", path: "/health").status == 200)
        #expect(try held[0].request(method: "GET", path: "/health").status == 200)
        // A slot given back is the address's again.
        held[1].close()
        #expect(waitFor(seconds: 5) { (try? test.client().request(method: "GET", path: "/health").status) == 200 })
        // The refusals are summed up in one log line, not one each.
        let lines = test.log.text.split(separator: "\n").filter { $0.contains("connections refused") }
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.contains(#""http.refused":"1""#) == true, "the first refusal is logged at once")
    }

    @Test func keepAliveServesSeveralRequestsOnOneConnection() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()

        for index in 0..<3 {
            let response = try client.request(method: "GET", path: "/v1/wallets/u\(index)/entries")
            #expect(response.status == 200)
            #expect(response.header("Connection")?.lowercased() != "close")
        }
        // Pipelined: both requests written before either answer is read.
        try client.send(
            HTTPTestClient.requestBytes(method: "GET", path: "/health", port: test.port)
                + HTTPTestClient.requestBytes(method: "POST", path: "/v1/wallets/x/entries", body: Array("{}".utf8), port: test.port))
        #expect(try client.readResponse().text == "ok")
        #expect(try client.readResponse().status == 201)
    }

    // MARK: Request ids

    @Test func requestIDIsKeptGeneratedOrReplaced() throws {
        let seen = Locked<[String]>([])
        let test = try TestServer { router in
            router.add("GET", "/id", sync: { request in
                seen.withLock { $0.append(request.requestID) }
                return .text(request.requestID)
            })
        }
        defer { test.server.shutdown() }
        let client = try test.client()

        let kept = try client.request(method: "GET", path: "/id", headers: [("X-Request-Id", "client-abc_123")])
        #expect(kept.header("X-Request-Id") == "client-abc_123")
        #expect(kept.text == "client-abc_123")

        let maximal = String(repeating: "~", count: 128)
        #expect(try client.request(method: "GET", path: "/id", headers: [("X-Request-Id", maximal)]).header("X-Request-Id") == maximal)

        let generatedA = try #require(try client.request(method: "GET", path: "/id").header("X-Request-Id"))
        let generatedB = try #require(try client.request(method: "GET", path: "/id").header("X-Request-Id"))
        #expect(generatedA.count == 16 && generatedA.allSatisfy(\.isHexDigit))
        #expect(generatedA != generatedB)

        for refused in [String(repeating: "a", count: 129), "has space", "tab\there", "é"] {
            let response = try client.request(method: "GET", path: "/id", headers: [("X-Request-Id", refused)])
            let id = try #require(response.header("X-Request-Id"))
            #expect(id != refused && id.count == 16, "\(refused) must be replaced")
            #expect(response.text == id)
        }

        // Errors carry it too.
        let missing = try client.request(method: "GET", path: "/missing", headers: [("X-Request-Id", "trace-404")])
        #expect(missing.header("X-Request-Id") == "trace-404")
        #expect(try missing.json()["instance"] == "trace-404")
    }

    // MARK: Deferred answers

    @Test func deferredAnswerFromAnotherThread() throws {
        let test = try TestServer { router in
            router.add("GET", "/later") { request, responder in
                answerQueue.asyncAfter(deadline: .now() + .milliseconds(300)) {
                    responder.send(.json(["id": .string(request.requestID)]))
                }
            }
        }
        defer { test.server.shutdown() }
        let client = try test.client()

        let started = HTTPTestClient.now()
        let response = try client.request(method: "GET", path: "/later", headers: [("X-Request-Id", "deferred-1")])
        let elapsed = HTTPTestClient.now() - started
        #expect(response.status == 200)
        #expect(try response.json() == ["id": "deferred-1"])
        #expect(elapsed >= 0.25)
        // Keep-alive holds after a suspended request.
        #expect(try client.request(method: "GET", path: "/later").status == 200)
    }

    @Test func manyDeferredRequestsHoldNoThread() throws {
        let count = 200
        let delaySeconds = 0.5
        let test = try TestServer(configure: { $0.threads = 2 }) { router in
            router.add("POST", "/slow") { request, responder in
                answerQueue.asyncAfter(deadline: .now() + delaySeconds) {
                    responder.send(Response(status: 200, body: request.body))
                }
            }
        }
        defer { test.server.shutdown() }

        let started = HTTPTestClient.now()
        var clients: [HTTPTestClient] = []
        for index in 0..<count {
            let client = try test.client(timeoutSeconds: 20)
            try client.send(HTTPTestClient.requestBytes(method: "POST", path: "/slow", body: Array("n\(index)".utf8), port: test.port))
            clients.append(client)
        }
        for (index, client) in clients.enumerated() {
            let response = try client.readResponse()
            #expect(response.status == 200)
            #expect(response.text == "n\(index)")
        }
        let elapsed = HTTPTestClient.now() - started
        print("\(count) deferred requests of \(delaySeconds) s on 2 threads took \(elapsed) s")
        // Holding a thread per request would need count * delay / 2 = 50 s.
        #expect(elapsed < 5)
    }

    @Test func secondAnswerIsIgnored() throws {
        let test = try TestServer { router in
            router.add("GET", "/twice") { _, responder in
                responder.send(.text("first"))
                responder.send(.text("second"))
                answerQueue.async { responder.send(.text("third")) }
            }
        }
        defer { test.server.shutdown() }
        let client = try test.client()
        #expect(try client.request(method: "GET", path: "/twice").text == "first")
        #expect(try client.request(method: "GET", path: "/twice").text == "first")
    }

    @Test func answerRacingTheHandlerReturnIsDeliveredOnce() throws {
        let test = try TestServer { router in
            router.add("GET", "/race") { request, responder in
                // Answered from another thread at about the moment the handler returns.
                answerQueue.async { responder.send(.text(request.requestID)) }
            }
        }
        defer { test.server.shutdown() }
        let client = try test.client()
        for index in 0..<300 {
            let response = try client.request(method: "GET", path: "/race", headers: [("X-Request-Id", "r\(index)")])
            #expect(response.text == "r\(index)")
        }
    }

    @Test func droppedResponderBecomesInternalError() throws {
        let test = try TestServer { router in
            router.add("GET", "/forgot") { _, _ in }
        }
        defer { test.server.shutdown() }
        let response = try test.client().request(method: "GET", path: "/forgot")
        try expectProblem(response, status: 500, code: "internal")
        #expect(test.log.text.contains("handler released its responder without answering"))
    }

    // MARK: Errors

    struct Declined: ProblemConvertible {
        var problem: Problem {
            Problem(
                status: 409, code: "insufficient_funds", detail: "Balance too low.",
                extra: ["balance": 6], headers: [("Retry-After", "30")])
        }
    }

    struct Secret: Error, CustomStringConvertible {
        var description: String { "database password is hunter2" }
    }

    private static func errorRoutes(_ router: Router) {
        router.add("POST", "/declined", sync: { _ in throw Declined() })
        router.add("POST", "/secret", sync: { _ in throw Secret() })
        router.add("POST", "/secret-later") { _, responder in
            answerQueue.async { responder.fail(Secret()) }
        }
    }

    @Test func problemConvertibleErrorKeepsItsProblem() throws {
        let test = try TestServer(routes: Self.errorRoutes)
        defer { test.server.shutdown() }
        let response = try test.client().request(method: "POST", path: "/declined", body: Array("{}".utf8))
        try expectProblem(response, status: 409, code: "insufficient_funds")
        #expect(response.header("Retry-After") == "30")
        #expect(try response.json()["balance"] == 6)
    }

    @Test func unexpectedErrorIsBareInternalErrorAndOnlyLogged() throws {
        let test = try TestServer(routes: Self.errorRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()
        for path in ["/secret", "/secret-later"] {
            let response = try client.request(method: "POST", path: path, body: Array("{}".utf8))
            try expectProblem(response, status: 500, code: "internal")
            #expect(!response.text.contains("hunter2"))
            #expect(try response.json()["detail"] == "An unexpected error occurred.")
        }
        #expect(test.log.text.contains("hunter2"))
    }

    /// An error whose text is whatever the client sent.
    struct Echoed: Error, CustomStringConvertible {
        var description: String
    }

    /// The server's log line and a response body carry the same string in
    /// the same bytes: both are written by the one JSON writer.
    @Test func aLogLineAndAResponseBodyEscapeAStringAlike() throws {
        // Quotes, a backslash, a slash, control characters (named and not),
        // NUL, DEL, a line separator, and characters outside the BMP.
        let value = "q\"b\\s/n\nr\rt\tbell\u{07}nul\u{00}esc\u{1B}us\u{1F}del\u{7F}ls\u{2028}é😀𝄞"
        let written = #""q\"b\\s/n\nr\rt\tbell\u0007nul\u0000esc\u001bus\u001fdel"# + "\u{7F}ls\u{2028}é😀𝄞\""
        let test = try TestServer { router in
            router.add("POST", "/answer", sync: { request in .json(["value": .string(String(decoding: request.body, as: UTF8.self))]) })
            router.add("POST", "/fail", sync: { request in throw Echoed(description: String(decoding: request.body, as: UTF8.self)) })
        }
        defer { test.server.shutdown() }
        let client = try test.client()
        let answered = try client.request(method: "POST", path: "/answer", body: Array(value.utf8))
        #expect(try client.request(method: "POST", path: "/fail", body: Array(value.utf8)).status == 500)

        #expect(JSONValue.string(value).serialized() == Array(written.utf8))
        #expect(answered.body == Array(#"{"value":"#.utf8) + Array(written.utf8) + Array("}".utf8))
        let lines = test.log.text.split(separator: "\n").filter { $0.contains("handler failed with an unexpected error") }
        #expect(lines.count == 1, "the value's line feed is escaped, so the line is whole")
        let line = try #require(lines.first)
        #expect(Array(line.utf8).firstRange(of: Array(#""error.description":"#.utf8) + Array(written.utf8)) != nil)
        // Both parse back, strictly, to what was sent.
        #expect(try JSONParser.parse(Array(line.utf8))["error.description"] == .string(value))
        #expect(try answered.json()["value"] == .string(value))
    }

    @Test func handlerMistakesBecomeInternalErrors() throws {
        let test = try TestServer { router in
            router.add("GET", "/injected", sync: { _ in Response(status: 200, headers: [("X-Note", "a\r\nSet-Cookie: stolen=1")]) })
            router.add("GET", "/status", sync: { _ in Response(status: 42) })
            router.add("GET", "/framing", sync: { _ in Response(status: 200, headers: [("Content-Length", "999")], body: Array("ok".utf8)) })
        }
        defer { test.server.shutdown() }
        let client = try test.client()

        let injected = try client.request(method: "GET", path: "/injected")
        try expectProblem(injected, status: 500, code: "internal")
        #expect(injected.header("Set-Cookie") == nil)
        try expectProblem(try client.request(method: "GET", path: "/status"), status: 500, code: "internal")
        // The server alone frames the body.
        let framed = try client.request(method: "GET", path: "/framing")
        #expect(framed.text == "ok")
        #expect(framed.header("Content-Length") == "2")
        #expect(test.log.text.contains("response headers refused by libmicrohttpd"))
        #expect(test.log.text.contains("handler answered with an invalid status"))
    }

    // MARK: Slow clients and timeouts

    @Test func stalledClientsDoNotDelayOthers() throws {
        let test = try TestServer(routes: Self.echoRoutes)
        defer { test.server.shutdown() }

        var stalled: [HTTPTestClient] = []
        for index in 0..<50 {
            let client = try test.client()
            // Half of the clients stop inside the headers, half inside the body.
            if index.isMultiple(of: 2) {
                try client.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            } else {
                try client.send("POST /v1/wallets/x/entries HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"half\":")
            }
            stalled.append(client)
        }
        let started = HTTPTestClient.now()
        let response = try test.client().request(method: "GET", path: "/health")
        let delay = HTTPTestClient.now() - started
        print("request beside 50 stalled clients took \(delay * 1000) ms")
        #expect(response.status == 200)
        #expect(delay < 2)
        withExtendedLifetime(stalled) {}
    }

    @Test func bodyArrivingPastTheRequestTimeoutIsRequestTimeout() throws {
        let test = try TestServer(configure: { $0.requestTimeoutSeconds = 1; $0.idleTimeoutSeconds = 5 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }

        // A client that stalls mid-body.
        let stalled = try test.client()
        let started = HTTPTestClient.now()
        try stalled.send("POST /v1/wallets/x/entries HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"a\"")
        let response = try stalled.readResponse()
        let waited = HTTPTestClient.now() - started
        try expectProblem(response, status: 408, code: "request_timeout")
        #expect(waited >= 0.9 && waited < 3.5, "answered after \(waited) s")
        #expect(stalled.waitForClose(seconds: 3))

        // A client that stalls inside its headers.
        let headless = try test.client()
        try headless.send("GET /health HTTP/1.1\r\nHost: x\r\n")
        try expectProblem(try headless.readResponse(), status: 408, code: "request_timeout")
        #expect(headless.waitForClose(seconds: 3))

        // A client that keeps dribbling bytes, each well within the idle timeout.
        let dribbling = try test.client()
        try dribbling.send("POST /v1/wallets/x/entries HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        let dribbleStarted = HTTPTestClient.now()
        for _ in 0..<40 where !dribbling.isReadable(within: 0.2) {
            try? dribbling.send(" ")
        }
        let dribbled = try dribbling.readResponse()
        let dribbledSeconds = HTTPTestClient.now() - dribbleStarted
        #expect(dribbledSeconds < 3, "answered after \(dribbledSeconds) s")
        try expectProblem(dribbled, status: 408, code: "request_timeout")
    }

    @Test func aConnectionWithoutARequestLineIsClosedAtTheRequestTimeout() throws {
        let timeoutSeconds = 2.0
        let test = try TestServer(configure: { $0.requestTimeoutSeconds = Int(timeoutSeconds); $0.idleTimeoutSeconds = 30 },
                                  routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let started = HTTPTestClient.now()
        // One sends nothing, one half a request line, one drips a request
        // line that never ends, each byte well within the idle timeout.
        let silent = try test.client()
        let partial = try test.client()
        try partial.send("GET /hea")
        let dripping = try test.client()
        try dripping.send("GET /")
        for _ in 0..<40 where !dripping.isReadable(within: 0.2) {
            try? dripping.send("a")
        }
        #expect(dripping.waitForClose(seconds: 5))
        let drippingSeconds = HTTPTestClient.now() - started
        #expect(silent.waitForClose(seconds: 5))
        #expect(partial.waitForClose(seconds: 5))
        let closedSeconds = HTTPTestClient.now() - started
        print("connections without a request line closed after \(drippingSeconds)–\(closedSeconds) s "
              + "(request timeout \(timeoutSeconds) s)")
        // Closed at the timeout: no 408 is owed to a client that sent no
        // request, so the second of grace a started request gets is not waited.
        #expect(drippingSeconds >= timeoutSeconds - 0.05, "closed after \(drippingSeconds) s")
        #expect(closedSeconds < timeoutSeconds + 1, "closed after \(closedSeconds) s")
        // Nothing was answered: a refused connection just ends.
        #expect(throws: HTTPTestClientError.closedByPeer) { _ = try silent.readResponse() }

        // A request line that arrives in time gets its answer.
        let prompt = try test.client()
        #expect(try prompt.request(method: "GET", path: "/health").status == 200)
    }

    @Test func idleConnectionIsClosed() throws {
        let test = try TestServer(configure: { $0.idleTimeoutSeconds = 1 }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()
        #expect(try client.request(method: "GET", path: "/health").status == 200)
        let started = HTTPTestClient.now()
        #expect(client.waitForClose(seconds: 4))
        let idle = HTTPTestClient.now() - started
        #expect(idle >= 0.9, "closed after \(idle) s")
    }

    @Test func clientResetMidResponseHarmsNothing() throws {
        let large = [UInt8](repeating: 120, count: 8 << 20)
        let later = Locked<Responder?>(nil)
        let deferred = Signal()
        let test = try TestServer { router in
            router.add("GET", "/large", sync: { _ in Response(status: 200, body: large) })
            router.add("GET", "/later") { _, responder in
                later.withLock { $0 = responder }
                deferred.fire()
            }
            router.add("GET", "/health", sync: { _ in .text("ok") })
        }
        defer { test.server.shutdown() }

        for _ in 0..<5 {
            let client = try test.client()
            try client.send(HTTPTestClient.requestBytes(method: "GET", path: "/large", port: test.port))
            // Reset once the answer has begun to arrive: mid-response.
            #expect(client.isReadable(within: 10))
            client.reset()
        }
        // A client that gives up while its request is deferred.
        let waiting = try test.client()
        try waiting.send(HTTPTestClient.requestBytes(method: "GET", path: "/later", port: test.port))
        try #require(deferred.wait(seconds: 5))
        waiting.reset()
        try #require(later.current).send(.text("too late"))

        #expect(try test.client().request(method: "GET", path: "/health").text == "ok")
    }

    // MARK: Observer

    @Test func observerSeesEveryAnsweredRequest() throws {
        let completed = Locked<[CompletedRequest]>([])
        let test = try TestServer(observer: { request in completed.withLock { $0.append(request) } }, routes: Self.echoRoutes)
        defer { test.server.shutdown() }
        let client = try test.client()
        _ = try client.request(method: "GET", path: "/v1/wallets/a/entries")
        _ = try client.request(method: "GET", path: "/unknown")
        _ = try client.request(method: "PUT", path: "/health")

        let seen = completed.current
        #expect(seen.map(\.status) == [200, 404, 405])
        #expect(seen.map(\.routePattern) == ["/v1/wallets/{user_id}/entries", nil, nil])
        #expect(seen.map(\.method) == ["GET", "GET", "PUT"])
        #expect(seen.allSatisfy { $0.durationSeconds >= 0 && $0.durationSeconds < 5 })
    }

    // MARK: Lifecycle

    @Test func startFailureCarriesTheLibrarysReason() throws {
        let first = try TestServer(routes: Self.echoRoutes)
        defer { first.server.shutdown() }
        let taken = first.port
        let second = Server(
            configuration: TestServer.configuration(port: taken), router: Router(),
            logger: Logger(label: "http-test", sink: .discard))
        #expect(second.port == 0)
        do {
            try second.start()
            Issue.record("a second server bound port \(taken)")
        } catch ServerError.startFailed(let reason) {
            #expect(reason.contains("Address already in use"), "\(reason)")
        }
        #expect(throws: ServerError.alreadyStarted) { try first.server.start() }
    }

    /// The limits are the caller's to validate (the server only asserts
    /// them); a host that is no numeric address is refused at start, by name.
    @Test func aHostThatIsNoNumericAddressIsRefusedByName() {
        func refused(host: String) -> String? {
            var configuration = TestServer.configuration(port: 0)
            configuration.host = host
            let server = Server(configuration: configuration, router: Router(), logger: Logger(label: "t", sink: .discard))
            defer { server.shutdown() }
            do {
                try server.start()
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(refused(host: "localhost")?.contains("host \"localhost\"") == true)
        #expect(refused(host: "::") == nil)
        #expect(refused(host: "127.0.0.1") == nil)
    }

    // MARK: Shutdown

    @Test func shutdownFinishesRequestsInFlightThenRefuses() throws {
        let handlerStarted = Signal()
        let test = try TestServer(configure: { $0.shutdownGraceSeconds = 5 }) { router in
            router.add("GET", "/slow") { _, responder in
                handlerStarted.fire()
                answerQueue.asyncAfter(deadline: .now() + .milliseconds(600)) {
                    responder.send(.text("finished"))
                }
            }
        }
        let port = test.port
        let client = try test.client()
        try client.send(HTTPTestClient.requestBytes(method: "GET", path: "/slow", port: port))
        try #require(handlerStarted.wait(seconds: 5))

        let shutdownDone = Signal()
        let shutdownSeconds = Locked(0.0)
        let server = test.server
        onAnotherThread {
            let started = HTTPTestClient.now()
            server.shutdown()
            shutdownSeconds.withLock { $0 = HTTPTestClient.now() - started }
            shutdownDone.fire()
        }

        // While draining, new connections are refused: from the moment the
        // server says it drains, its listening socket is shut.
        try #require(test.log.waitForLine(containing: "HTTP server draining", seconds: 5))
        #expect(throws: HTTPTestClientError.connectFailed(errno: ECONNREFUSED)) { _ = try HTTPTestClient(port: port) }

        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.text == "finished")
        #expect(response.header("Connection") == "close")

        try #require(shutdownDone.wait(seconds: 10))
        let seconds = shutdownSeconds.current
        print("shutdown with one request in flight took \(seconds) s")
        // Done when the request is, not at the end of the 5 s grace.
        #expect(seconds >= 0.3 && seconds < 2.5)
        #expect(throws: HTTPTestClientError.connectFailed(errno: ECONNREFUSED)) { _ = try HTTPTestClient(port: port) }
        test.server.shutdown()  // idempotent
    }

    @Test func shutdownAnswersUnfinishedDeferredRequestsAfterTheGrace() throws {
        let stash = Locked<[Responder]>([])
        let stashed = Signal()
        let test = try TestServer(configure: { $0.shutdownGraceSeconds = 1 }) { router in
            router.add("GET", "/never") { _, responder in
                stash.withLock { $0.append(responder) }
                stashed.fire()
            }
        }
        let client = try test.client()
        try client.send(HTTPTestClient.requestBytes(method: "GET", path: "/never", port: test.port))
        try #require(stashed.wait(seconds: 2))
        try #require(stash.current.count == 1)

        let started = HTTPTestClient.now()
        test.server.shutdown()
        let seconds = HTTPTestClient.now() - started
        print("shutdown with an unanswered deferred request took \(seconds) s")
        #expect(seconds >= 0.9 && seconds < 2.5)

        let response = try client.readResponse()
        try expectProblem(response, status: 503, code: "shutting_down")
        // A late answer after the stop is ignored, not a crash.
        stash.current[0].send(.text("too late"))
    }
}
