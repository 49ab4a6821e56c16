import GooglePlay
import Testing

struct GooglePlayScopeTests {
    @Test func theScopeIsTheAndroidPublisherOne() {
        #expect(GooglePlay.androidPublisherScope == "https://www.googleapis.com/auth/androidpublisher")
    }
}
