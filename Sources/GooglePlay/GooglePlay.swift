/// Google Play's side of a purchase: the Android Publisher API, reached with
/// a service account, and the real-time developer notifications Pub/Sub
/// pushes.
public enum GooglePlay {
    /// The OAuth scope of the Android Publisher API.
    public static let androidPublisherScope = "https://www.googleapis.com/auth/androidpublisher"

    /// The longest purchase token taken, in bytes, wherever one is read: a
    /// credit request, a push, the voided-purchases list. The ledger stores
    /// (and indexes) tokens up to this length; Google's run to a few
    /// hundred characters.
    public static let purchaseTokenBytesMax = 1_024
    /// The longest `orderId` taken, in bytes: an order id becomes the flowNO
    /// a purchase is credited (and its voids recorded) under, and a flowNO
    /// holds 128 bytes. Google's are about 24 (`GPA.3301-2345-6789-01234`).
    public static let orderIDBytesMax = 128
    /// The latest time taken from Google, in epoch milliseconds: the last
    /// millisecond of the year 9999. PostgreSQL's timestamps reach further,
    /// so whatever is taken can be stored.
    public static let millisecondsMax: Int64 = 253_402_300_799_999

    /// Whether `text` is what the service takes as a purchase token, or an
    /// order id, from Google: 1 to `bytesMax` bytes of visible ASCII (no
    /// spaces or controls), so it can be stored and logged as it is.
    public static func isVisibleASCII(_ text: String, bytesMax: Int) -> Bool {
        (1...bytesMax).contains(text.utf8.count) && text.utf8.allSatisfy { (0x21...0x7e).contains($0) }
    }
}
