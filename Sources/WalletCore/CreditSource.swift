/// How a credit request's purchase is vouched for: a mode of
/// `WALLET_CREDIT_VERIFICATION`, and the `source` a credit records.
public enum CreditSource: String, Sendable, CaseIterable {
    /// A StoreKit 2 signed transaction (JWS), verified offline.
    case appStoreJWS = "appstore-jws"
    /// A StoreKit 1 receipt, verified with Apple's verifyReceipt.
    case appStoreReceipt = "appstore-receipt"
    /// A bare transaction id, turned into a signed transaction by the App
    /// Store Server API's Get Transaction Info and verified like one.
    case appStoreAPI = "appstore-api"
    /// A Google Play purchase token, looked up with the Android Publisher API.
    case googlePlay = "googleplay"
    /// The calling app backend vouches for the purchase.
    case caller
    /// The App Store's own ONE_TIME_CHARGE notification, signed by Apple,
    /// whose `appAccountToken` names the player: no call from the app.
    case appStoreNotification = "appstore-notification"
}
