/// Google Play's side of a purchase: the Android Publisher API, reached with
/// a service account, and the real-time developer notifications Pub/Sub
/// pushes.
public enum GooglePlay {
    /// The OAuth scope of the Android Publisher API.
    public static let androidPublisherScope = "https://www.googleapis.com/auth/androidpublisher"
}
