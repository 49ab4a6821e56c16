import AppStore
import Foundation
import Testing

@Suite struct NameBasedUUIDTests {
    // RFC 9562 appendix A.4, and values computed independently with
    // Python's uuid.uuid5.
    @Test(.timeLimit(.minutes(1)))
    func knownAnswers() {
        #expect(
            NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "www.example.com")
                == "2ed6657d-e927-568b-95e1-2665a8aea6a2"
        )
        #expect(
            NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "python.org")
                == "886313e1-3b8a-5372-9b90-0c9aee199e5d"
        )
        #expect(
            NameBasedUUID.v5(namespace: NameBasedUUID.urlNamespace, name: "https://www.python.org/")
                == "5406f80d-92e9-51cd-a176-77445955e733"
        )
        #expect(
            NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "")
                == "4ebd0208-8328-5d69-8c44-ec50939c0967"
        )
        // A namespace of our own, and a name outside ASCII (hashed as UTF-8).
        #expect(
            NameBasedUUID.v5(namespace: "7e3fb20b-4cdb-47cc-936d-99d65f608138", name: "user-42")
                == "7d924c5a-bdfb-5135-9969-6c88da06c5a2"
        )
        #expect(
            NameBasedUUID.v5(namespace: "7e3fb20b-4cdb-47cc-936d-99d65f608138", name: "ユーザー")
                == "af5a2e77-0e64-5777-b138-5f873dd918ed"
        )
    }

    @Test(.timeLimit(.minutes(1)))
    func namespaceFormsAgree() {
        let text = "6BA7B810-9DAD-11D1-80B4-00C04FD430C8"
        let bytes: [UInt8] = [
            0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
        ]
        let expected = "2ed6657d-e927-568b-95e1-2665a8aea6a2"
        #expect(NameBasedUUID.v5(namespace: text, name: "www.example.com") == expected)
        #expect(NameBasedUUID.v5(namespace: text.lowercased(), name: "www.example.com") == expected)
        #expect(NameBasedUUID.v5(namespaceBytes: bytes, name: "www.example.com") == expected)
    }

    @Test(.timeLimit(.minutes(1)))
    func aNamespaceThatIsNotAUUIDGivesNothing() {
        #expect(NameBasedUUID.v5(namespace: "", name: "x") == nil)
        #expect(NameBasedUUID.v5(namespace: "not-a-uuid", name: "x") == nil)
        #expect(NameBasedUUID.v5(namespace: "6ba7b810-9dad-11d1-80b4-00c04fd430c", name: "x") == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func versionAndVariantBitsAreSet() throws {
        // Bounded: 200 names.
        for index in 0..<200 {
            let text = NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "name-\(index)")
            #expect(text.count == 36)
            #expect(text == text.lowercased())
            let uuid = try #require(UUID(uuidString: text))
            #expect(uuid.uuid.6 >> 4 == 5)
            #expect(uuid.uuid.8 >> 6 == 0b10)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func distinctNamesAndNamespacesGiveDistinctUUIDs() {
        let a = NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "user-1")
        let b = NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "user-2")
        let c = NameBasedUUID.v5(namespace: NameBasedUUID.urlNamespace, name: "user-1")
        #expect(Set([a, b, c]).count == 3)
        #expect(NameBasedUUID.v5(namespace: NameBasedUUID.dnsNamespace, name: "user-1") == a)
    }
}
