public import Foundation

extension Thread {
    /// The most bytes of a thread's name Linux keeps (16 with the NUL).
    public static var nameBytesMax: Int { 15 }

    /// Names the calling thread as `top -H`, `perf`, a debugger and
    /// `Thread.current.name` show it; Linux keeps the first `nameBytesMax`
    /// bytes, cut here at a character's edge.
    ///
    /// Foundation on Linux passes a name on to the system only once it holds
    /// the thread's handle, which the starting thread learns after the new
    /// one may already run: a name set before the start is dropped, one set
    /// first thing inside the thread now and then too, and the thread keeps
    /// the name of the thread that started it. The C library's call that
    /// needs no handle is not visible to Swift, so the thread writes its own
    /// name where the kernel keeps it (proc(5): /proc/thread-self/comm).
    public static func nameCurrent(_ name: String) {
        var kept = Substring(name)
        while kept.utf8.count > nameBytesMax { kept = kept.dropLast() }
        #if os(Linux)
        // A thread's name is a help to people, never a reason to stop.
        try? String(kept).write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
        #else
        current.name = String(kept)
        #endif
    }
}
