import CMicroHTTPD
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

// The C callbacks. They capture nothing: the server's state arrives as the
// retained `ServerCore` in `cls`, and each request's state as the retained
// `RequestContext` in the request pointer, created when the request line
// arrives and released when libmicrohttpd reports the request complete.

/// MHD_OPTION_URI_LOG_CALLBACK: called once per request with the raw request
/// target, before libmicrohttpd decodes it. Its result becomes `*req_cls`.
func requestLineCallback(
    _ cls: UnsafeMutableRawPointer?,
    _ uri: UnsafePointer<CChar>?,
    _ connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let cls, let connection else { return nil }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    let target = uri.map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) } ?? []
    let context = RequestContext(rawTarget: target, startedNanoseconds: DispatchTime.now().uptimeNanoseconds)
    core.requestLineReceived(context, connection: connection)
    return Unmanaged.passRetained(context).toOpaque()
}

/// The access handler: called after the headers, for each piece of body, and
/// once more when the request is complete (again after a resume).
func accessHandlerCallback(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?,
    _ version: UnsafePointer<CChar>?,
    _ uploadData: UnsafePointer<CChar>?,
    _ uploadDataSize: UnsafeMutablePointer<Int>?,
    _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let uploadDataSize, let contextPointer = requestContext?.pointee else {
        // The request-line callback always sets the context; without it there
        // is nothing sensible to do but close.
        return .NO
    }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    let context = Unmanaged<RequestContext>.fromOpaque(contextPointer).takeUnretainedValue()
    return core.handle(
        context, connection: connection, method: method, uploadData: uploadData, uploadDataSize: uploadDataSize)
}

/// MHD_OPTION_NOTIFY_COMPLETED: the request is over, answered or not.
func requestCompletedCallback(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ reason: MHD_RequestTerminationCode
) {
    guard let cls, let requestContext, let contextPointer = requestContext.pointee else { return }
    requestContext.pointee = nil
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    let context = Unmanaged<RequestContext>.fromOpaque(contextPointer).takeRetainedValue()
    core.completed(context, connection: connection, reason: reason)
}

/// MHD_OPTION_NOTIFY_CONNECTION: a connection was accepted, or is closing
/// (its socket still open).
func connectionNotifyCallback(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    switch code {
    case .CONNECTION_NOTIFY_STARTED: core.connectionStarted(connection)
    case .CONNECTION_NOTIFY_CLOSED: core.connectionClosed(connection)
    default: break
    }
}

/// MHD_get_connection_values_n iterator for request headers.
func collectHeaderCallback(
    _ cls: UnsafeMutableRawPointer?,
    _ kind: MHD_ValueKind,
    _ key: UnsafePointer<CChar>?,
    _ keySize: Int,
    _ value: UnsafePointer<CChar>?,
    _ valueSize: Int
) -> MHD_Result {
    guard let collector = cls?.assumingMemoryBound(to: HeaderCollector.self), let key else { return .YES }
    collector.pointee.totalBytes += keySize + valueSize
    guard collector.pointee.totalBytes <= collector.pointee.limitBytes else {
        collector.pointee.exceeded = true
        return .NO
    }
    let name = String(decoding: UnsafeRawBufferPointer(start: key, count: keySize), as: UTF8.self)
    let text = value.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self) } ?? ""
    collector.pointee.fields.append((name, text))
    return .YES
}

/// MHD_OPTION_EXTERNAL_LOGGER: libmicrohttpd's own messages, formatted here.
func libraryLogCallback(_ cls: UnsafeMutableRawPointer?, _ format: UnsafePointer<CChar>?, _ arguments: CVaListPointer?) {
    guard let cls, let format, let arguments else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    let message = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 512) { buffer -> String in
        _ = vsnprintf(buffer.baseAddress, buffer.count, format, arguments)
        return String(cString: buffer.baseAddress!)
    }
    core.recordLibraryMessage(message.trimmingTrailingNewlines())
}

private extension String {
    func trimmingTrailingNewlines() -> String {
        var view = Substring(self)
        while let last = view.last, last.isNewline { view = view.dropLast() }
        return String(view)
    }
}
