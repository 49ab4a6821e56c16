import Testing
import WalletClient

/// The client's manifest against the API document the running service
/// serves: every operation and every problem code in it is covered or
/// excluded on purpose. A doctored document proves the check can fail.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct ContractTests {
    @Test func theServedDocumentHasNothingTheClientNeitherCoversNorExcludes() async throws {
        let fixture = try await Fixture.make()
        let document = try await fixture.app.getOpenAPIDocument()

        let gaps = WalletClientManifest.gaps(in: document)
        #expect(gaps.isEmpty, "\(gaps)")

        // And nothing the manifest names is missing from the document: a
        // misspelt or retired operation would make the check above vacuous.
        let documented = WalletClientManifest.operationIDs(in: document)
        let named = WalletClientManifest.implementedOperations.union(WalletClientManifest.excludedOperations.keys)
        #expect(named.subtracting(documented).isEmpty, "\(named.subtracting(documented).sorted())")
        #expect(WalletClientManifest.implementedOperations.isDisjoint(with: WalletClientManifest.excludedOperations.keys))
        let codes = WalletClientManifest.problemCodes(in: document)
        #expect(codes.contains("insufficient_funds") && codes.contains("outcome_unknown"))
        #expect(WalletClientManifest.knownProblemCodes.subtracting(codes).isEmpty,
                "\(WalletClientManifest.knownProblemCodes.subtracting(codes).sorted())")
    }

    @Test func aDoctoredDocumentIsReportedWithItsNewOperationAndProblemCode() async throws {
        let fixture = try await Fixture.make()
        var document = try await fixture.app.getOpenAPIDocument()
        #expect(WalletClientManifest.gaps(in: document).isEmpty)

        document["paths"]?["/v1/teleports"] = [
            "post": ["operationId": "createTeleport", "responses": ["201": ["description": "Teleported."]]],
        ]
        document["components"]?["schemas"]?["TeleportRefusedProblem"] = [
            "allOf": [
                ["$ref": "#/components/schemas/Problem"],
                ["properties": ["code": ["const": "teleport_refused"], "status": ["const": 409]]],
            ],
        ]
        // A code given as an enum is found too.
        document["components"]?["schemas"]?["PortalProblem"] = [
            "properties": ["code": ["enum": ["portal_closed", "insufficient_funds"]]],
        ]

        let gaps = WalletClientManifest.gaps(in: document)
        #expect(gaps.operations == ["createTeleport"])
        #expect(gaps.problemCodes == ["portal_closed", "teleport_refused"])
        #expect(!gaps.isEmpty)
    }
}
