import Foundation

/// What the game server keeps of its own: the orders it took, the items it
/// delivered, and how far it has read the wallet's event feed. A real game
/// keeps this in its database, and writes the feed's position in the same
/// transaction as what the events changed; here it is one JSON file, written
/// whole and renamed into place.
struct ShopState: Codable {
    /// The id of the last event handled: the next walk starts after it.
    var feedPosition: Int64 = 0
    var sales: [Sale] = []
    /// Per player, the price of the items already taken back for the debt
    /// they are in now, so that a debt is covered once, whichever event
    /// reports it. Cleared when an event shows the player above zero again.
    var debtCovered: [String: Int64] = [:]

    static func load(from url: URL) throws -> ShopState {
        guard FileManager.default.fileExists(atPath: url.path) else { return ShopState() }
        return try JSONDecoder().decode(ShopState.self, from: Data(contentsOf: url))
    }

    func save(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: url, options: .atomic)
    }
}

/// One order of the shop, from the moment it is taken.
struct Sale: Codable {
    enum Status: String, Codable {
        /// Taken; the hold, the delivery or the capture has not finished.
        case pending
        /// Refused: the player could not afford it.
        case refused
        /// Delivered and paid: the hold was captured.
        case delivered
        /// The delivery failed, and the hold was released.
        case released
        /// Delivered, then taken back from the player.
        case revoked
    }

    /// The order id; the wallet's Idempotency-Keys of its hold, capture and
    /// release are made from it, so a retried step never runs twice.
    var order: String
    var userID: String
    var item: String
    var price: Int64
    var holdID: Int64?
    var status: Status
    /// Why it was refused, released or revoked.
    var note: String?
}
