import Crypto
import CryptoTestSupport
import Foundation
import ServiceWorkers
import StoreHTTP
import Testing
import TestSupport

/// The webhook sender's HTTP/1.1 client, on real loopback sockets: TLS
/// checked against a root the test makes, kept connections, and answers
/// framed every way HTTP/1.1 allows.
@Suite(.timeLimit(.minutes(1)))
struct WebhookTransportTests {
    /// A root, and a server certificate from it naming `names` (DER of the
    /// subjectAltName's GeneralNames).
    static func issue(altNames: [UInt8], root: CertificateAuthority) throws -> (Certificate, PrivateKey) {
        let key = PrivateKey()
        var profile = CertificateProfile(commonName: "webhook receiver", serialNumber: 2, notBefore: Date() - 3600,
                                         notAfter: Date() + 3600)
        profile.extraExtensions = [CertificateExtension(oid: "2.5.29.17", derValue: [0x30, UInt8(altNames.count)] + altNames)]
        return (try root.leaf(profile, subjectKey: key.publicKey), key)
    }

    /// GeneralNames entries: an IP address (`[7]`) and a DNS name (`[2]`).
    static let loopbackNames: [UInt8] = [0x87, 4, 127, 0, 0, 1, 0x82, 9] + Array("localhost".utf8)

    static func root(_ name: String) throws -> CertificateAuthority {
        try CertificateAuthority.root(CertificateProfile(commonName: name, serialNumber: 1, notBefore: Date() - 3600,
                                                                   notAfter: Date() + 3600))
    }

    /// A client trusting only `root`.
    static func client(trusting root: CertificateAuthority, answerBytesMax: Int = 1024) throws -> KeptHTTPClient {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-root-\(UUID().uuidString).pem")
        let base64 = Data(root.certificate.derBytes).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        try "-----BEGIN CERTIFICATE-----\n\(base64)\n-----END CERTIFICATE-----\n".write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let connector = WebhookConnector(tls: .success(try TLSClientContext(trustedRootsFile: file.path)))
        return KeptHTTPClient(answerBytesMax: answerBytesMax, connect: connector.connect)
    }

    static func post(_ client: KeptHTTPClient, _ url: String, seconds: Int = 5) -> HTTPExchange.Outcome {
        client.post(URL(string: url)!, headers: [("Content-Type", "application/json"), ("Wallet-Event-Id", "7")],
                    body: Array(#"{"id":7}"#.utf8), deadline: .now + .seconds(seconds))
    }

    static func status(_ outcome: HTTPExchange.Outcome) -> Int? {
        if case .response(let status, _, _) = outcome { return status }
        return nil
    }

    static func failure(_ outcome: HTTPExchange.Outcome) -> String? {
        if case .failure(let reason) = outcome { return reason }
        return nil
    }

    @Test func httpsRequestsShareOneVerifiedConnectionPerOrigin() throws {
        let root = try Self.root("webhook test root")
        let (certificate, key) = try Self.issue(altNames: Self.loopbackNames, root: root)
        let server = try LoopbackTLSServer(chain: [certificate], key: key)
        defer { server.stop() }
        let client = try Self.client(trusting: root)
        for _ in 0..<40 {
            #expect(Self.status(Self.post(client, "https://127.0.0.1:\(server.port)/hooks/wallet")) == 204)
        }
        #expect(server.counts == .init(connections: 1, handshakes: 1, requests: 40))
        // Another origin (the same server by name) is another connection.
        for _ in 0..<10 {
            #expect(Self.status(Self.post(client, "https://localhost:\(server.port)/hooks/wallet?tenant=a")) == 204)
        }
        #expect(server.counts == .init(connections: 2, handshakes: 2, requests: 50))
    }

    @Test func aConnectionTheServerClosedWhileIdleIsReplacedUnnoticed() throws {
        let root = try Self.root("webhook test root")
        let (certificate, key) = try Self.issue(altNames: Self.loopbackNames, root: root)
        let server = try LoopbackTLSServer(chain: [certificate], key: key, idleSeconds: 0.2)
        defer { server.stop() }
        let client = try Self.client(trusting: root)
        for _ in 0..<3 {
            #expect(Self.status(Self.post(client, "https://127.0.0.1:\(server.port)/")) == 204)
            Thread.sleep(forTimeInterval: 0.5)
        }
        #expect(server.counts == .init(connections: 3, handshakes: 3, requests: 3))
    }

    @Test func aCertificateForAnotherNameOrFromAnotherRootIsRefused() throws {
        let root = try Self.root("webhook test root")
        let otherName: [UInt8] = [0x82, 13] + Array("other.example".utf8)
        let (wrongName, key) = try Self.issue(altNames: otherName, root: root)
        let server = try LoopbackTLSServer(chain: [wrongName], key: key)
        defer { server.stop() }
        let refused = Self.failure(Self.post(try Self.client(trusting: root), "https://127.0.0.1:\(server.port)/"))
        #expect(refused?.contains("certificate of 127.0.0.1 was refused") == true, "\(refused ?? "delivered")")

        let (rightName, otherKey) = try Self.issue(altNames: Self.loopbackNames, root: try Self.root("another root"))
        let untrusted = try LoopbackTLSServer(chain: [rightName], key: otherKey)
        defer { untrusted.stop() }
        let unknown = Self.failure(Self.post(try Self.client(trusting: root), "https://localhost:\(untrusted.port)/"))
        #expect(unknown?.contains("certificate of localhost was refused") == true, "\(unknown ?? "delivered")")
        #expect(server.counts.requests == 0 && untrusted.counts.requests == 0)
    }

    @Test func answersAreFramedByLengthByChunksOrByClose() throws {
        let client = KeptHTTPClient(answerBytesMax: 1024, connect: WebhookConnector().connect)
        let cases: [(FakeVerifyReceiptServer.Reply, Int, String)] = [
            (.http(status: 204, body: ""), 204, ""),
            (.http(status: 503, headers: ["Retry-After: 7"], body: "later"), 503, "later"),
            (.raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nT: 1\r\n\r\n"), 200, "hello world"),
            (.raw("HTTP/1.0 202 Accepted\r\n\r\nuntil close"), 202, "until close"),
            (.raw("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"), 201, "ok"),
            (.http(status: 500, body: String(repeating: "x", count: 5000)), 500, String(repeating: "x", count: 1024)),
        ]
        for (reply, status, body) in cases {
            let server = try FakeVerifyReceiptServer(reply: reply)
            defer { server.stop() }
            let outcome = Self.post(client, "http://127.0.0.1:\(server.port)/hooks")
            guard case .response(let answered, _, let answer) = outcome else {
                Issue.record("no answer: \(outcome)")
                continue
            }
            #expect(answered == status)
            #expect(String(decoding: answer, as: UTF8.self) == body)
            let request = try #require(server.requests.first)
            #expect(request.method == "POST" && request.path.hasPrefix("/hooks"))
            #expect(request.headers["wallet-event-id"] == "7" && request.headers["host"] == "127.0.0.1:\(server.port)")
            #expect(String(decoding: request.body, as: UTF8.self) == #"{"id":7}"#)
        }
    }

    @Test func noAnswerEndsAtTheDeadlineAndNoListenerFailsAtOnce() throws {
        let client = KeptHTTPClient(answerBytesMax: 1024, connect: WebhookConnector().connect)
        let silent = try FakeVerifyReceiptServer(reply: .silence)
        defer { silent.stop() }
        let started = ContinuousClock.now
        let outcome = Self.post(client, "http://127.0.0.1:\(silent.port)/", seconds: 1)
        #expect(Self.failure(outcome) == "no answer within the time limit")
        #expect(ContinuousClock.now - started < .seconds(10))

        let (closed, port) = try FakeVerifyReceiptServer.bindLoopback(listen: false)
        close(closed)
        #expect(Self.failure(Self.post(client, "http://127.0.0.1:\(port)/"))?.contains("connecting") == true)
        #expect(Self.failure(Self.post(client, "ftp://127.0.0.1/")) == "not an http or https URL")
    }
}
