import Foundation
import Testing
import TestSupport
import WalletCore
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// The API key cache keeps misses apart from hits.
@Suite(.timeLimit(.minutes(2)))
struct AuthenticatorCacheTests {
    @Test func aFloodOfUnknownKeysNeitherEvictsValidOnesNorCostsALookupEachRepeat() throws {
        let service = try TestService()
        defer { service.stop() }
        let clock = ManualClock(movesWithRealTime: false)
        let authenticator = Authenticator(ledger: service.application.ledger, clock: clock, timeToLiveSeconds: 1,
                                          entriesMax: 8, missesMax: 64)
        let valid = "Bearer " + service.gameServerKey
        #expect(try authenticator.client(authorization: valid).name == "game-server")
        #expect(authenticator.lookups == 1)

        // Many more random keys than either bound: each costs its one lookup.
        for _ in 0..<1_000 {
            #expect(throws: WalletError.unauthorized) {
                try authenticator.client(authorization: "Bearer " + APIKeys.makeSecret())
            }
        }
        #expect(authenticator.lookups == 1_001)
        // The valid key is still served from the cache.
        #expect(try authenticator.client(authorization: valid).name == "game-server")
        #expect(authenticator.lookups == 1_001)

        // A repeated unknown key costs one lookup per cache period: the
        // first try, then none until the period is over, however many tries.
        let unknown = "Bearer " + APIKeys.makeSecret()
        let before = authenticator.lookups
        func tryUnknown(_ times: Int) {
            for _ in 0..<times {
                #expect(throws: WalletError.unauthorized) { try authenticator.client(authorization: unknown) }
            }
        }
        tryUnknown(20)
        #expect(authenticator.lookups == before + 1)
        clock.advance(by: .milliseconds(999))
        tryUnknown(20)
        #expect(authenticator.lookups == before + 1, "still inside the period")
        clock.advance(by: .milliseconds(1))
        tryUnknown(20)
        #expect(authenticator.lookups == before + 2, "one lookup for the next period")
    }

    /// With room for two of each, a key in use and an unknown secret that
    /// keeps coming back both stay cached while others come and go: the
    /// least recently used entry makes room, so neither costs a new lookup.
    @Test func entriesInUseOutlastNewOnes() throws {
        let service = try TestService()
        defer { service.stop() }
        let authenticator = Authenticator(ledger: service.application.ledger, clock: ManualClock(movesWithRealTime: false),
                                          timeToLiveSeconds: 60, entriesMax: 2, missesMax: 2)
        let admin = "Bearer " + service.adminKey
        #expect(try authenticator.client(authorization: admin).name == "admin")
        #expect(try authenticator.client(authorization: "Bearer " + service.gameServerKey).name == "game-server")
        #expect(try authenticator.client(authorization: admin).name == "admin")
        #expect(try authenticator.client(authorization: "Bearer " + service.appBackendKey).name == "app-backend")
        #expect(authenticator.lookups == 3)
        #expect(try authenticator.client(authorization: admin).name == "admin")
        #expect(authenticator.lookups == 3, "the key in use is still cached")

        let returning = "Bearer " + APIKeys.makeSecret()
        #expect(throws: WalletError.unauthorized) { try authenticator.client(authorization: returning) }
        for _ in 0..<10 {
            #expect(throws: WalletError.unauthorized) {
                try authenticator.client(authorization: "Bearer " + APIKeys.makeSecret())
            }
            #expect(throws: WalletError.unauthorized) { try authenticator.client(authorization: returning) }
        }
        #expect(authenticator.lookups == 3 + 1 + 10, "the returning secret cost one lookup")
    }
}
