/// A map of at most `entriesMax` entries, shared between threads, that makes
/// room by dropping its least recently used entry: the one bounded cache of
/// the service, for every table that a client's input can grow.
///
/// Reading a key (`value`, `update`) or storing it makes it the most recently
/// used, so an entry is dropped only after `entriesMax` other keys have been
/// used since its own last use. A flood of new keys pushes out the entries
/// nobody touches, never one that keeps being used, and never all at once.
///
/// Entries may expire. A cache made with `expires` asks each value it stores
/// when it stops counting; from that instant the entry reads as absent, and
/// it is removed when next met or dropped in its turn. Expiry never makes
/// room out of order: the one rule for what is dropped is least recently
/// used. The instants are the caller's (`now`), so a test can move time.
///
/// Every operation holds a pthread mutex (`Locked`, which the thread
/// sanitizer sees) for constant time: a lookup in a dictionary and a few
/// links of a list kept in one array.
public final class BoundedCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry: Sendable {
        var value: Value
        var expires: ContinuousClock.Instant?
    }

    public let entriesMax: Int
    private let expiry: (@Sendable (Value) -> ContinuousClock.Instant)?
    private let table: Locked<RecencyList<Key, Entry>>

    /// A cache of at most `entriesMax` entries; with `expires`, each value
    /// stored says when its entry stops counting.
    public init(entriesMax: Int, expires: (@Sendable (Value) -> ContinuousClock.Instant)? = nil) {
        precondition(entriesMax >= 1, "a bounded cache holds at least one entry")
        self.entriesMax = entriesMax
        expiry = expires
        table = Locked(RecencyList(entriesMax: entriesMax))
    }

    /// Entries held now, expired ones not yet removed included; never more
    /// than `entriesMax`.
    public var count: Int {
        table.withLock { $0.count }
    }

    /// The value for `key` unless absent or expired at `now`; a hit becomes
    /// the most recently used, an expired entry is removed.
    public func value(forKey key: Key, now: ContinuousClock.Instant = .now) -> Value? {
        table.withLock { table in
            guard let entry = table.use(key) else { return nil }
            guard Self.isLive(entry, now: now) else {
                table.remove(key)
                return nil
            }
            return entry.value
        }
    }

    /// Stores `value` under `key` as the most recently used. A new key in a
    /// full cache first drops the least recently used entry.
    public func insert(_ value: Value, forKey key: Key) {
        let entry = Entry(value: value, expires: expiry?(value))
        table.withLock { $0.store(entry, forKey: key) }
    }

    /// Removes the entry for `key`, expired or not; its value if it was live
    /// at `now`.
    @discardableResult
    public func removeValue(forKey key: Key, now: ContinuousClock.Instant = .now) -> Value? {
        table.withLock { table in
            table.remove(key).flatMap { Self.isLive($0, now: now) ? $0.value : nil }
        }
    }

    /// Reads and changes the entry for `key` in one hold of the lock, so
    /// concurrent updates of a key never lose one another. `body` gets the
    /// live value (nil if absent or expired at `now`) and leaves the new one:
    /// a value is stored as the most recently used (a new key in a full cache
    /// first drops the least recently used entry), nil removes the entry. If
    /// `body` throws, nothing changes.
    public func update<Result, Failure: Error>(
        forKey key: Key, now: ContinuousClock.Instant = .now, _ body: (inout Value?) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try table.withLock { table throws(Failure) -> Result in
            var value = table.peek(key).flatMap { Self.isLive($0, now: now) ? $0.value : nil }
            let result = try body(&value)
            if let value {
                table.store(Entry(value: value, expires: expiry?(value)), forKey: key)
            } else {
                table.remove(key)
            }
            return result
        }
    }

    /// Removes every entry.
    public func removeAll() {
        table.withLock { $0.removeAll() }
    }

    /// Keys from the least to the most recently used: the order in which
    /// they would be dropped.
    func keysLeastRecentFirst() -> [Key] {
        table.withLock { $0.keysLeastRecentFirst() }
    }

    /// What is wrong with the table's structure; empty when it is sound.
    func invariantViolations() -> [String] {
        table.withLock { $0.invariantViolations() }
    }

    private static func isLive(_ entry: Entry, now: ContinuousClock.Instant) -> Bool {
        entry.expires.map { now < $0 } ?? true
    }
}

/// The table under `BoundedCache`, without the lock: a dictionary from key
/// to slot, and a doubly linked list through the slots from the least to the
/// most recently used. The slots are one dense array: removing an entry moves
/// the last slot into its place, so nothing removed lingers and no free list
/// is needed.
struct RecencyList<Key: Hashable, Value> {
    fileprivate struct Node {
        var key: Key
        var value: Value
        /// The next less recently used slot; nil for the least recent.
        var older: Int?
        /// The next more recently used slot; nil for the most recent.
        var newer: Int?
    }

    let entriesMax: Int
    private var nodes: [Node] = []
    private var slots: [Key: Int] = [:]
    private var oldest: Int?
    private var newest: Int?

    init(entriesMax: Int) {
        self.entriesMax = entriesMax
    }

    var count: Int { nodes.count }

    /// The value for `key` without changing its place.
    func peek(_ key: Key) -> Value? {
        slots[key].map { nodes[$0].value }
    }

    /// The value for `key`, made the most recently used.
    mutating func use(_ key: Key) -> Value? {
        guard let slot = slots[key] else { return nil }
        moveToNewest(slot)
        return nodes[slot].value
    }

    /// Stores `value` as the most recently used; a new key in a full table
    /// first drops the least recently used entry.
    mutating func store(_ value: Value, forKey key: Key) {
        if let slot = slots[key] {
            nodes[slot].value = value
            moveToNewest(slot)
            return
        }
        if nodes.count >= entriesMax, let oldest { remove(slot: oldest) }
        let slot = nodes.count
        nodes.append(Node(key: key, value: value, older: newest, newer: nil))
        if let newest { nodes[newest].newer = slot } else { oldest = slot }
        newest = slot
        slots[key] = slot
    }

    @discardableResult
    mutating func remove(_ key: Key) -> Value? {
        guard let slot = slots[key] else { return nil }
        let value = nodes[slot].value
        remove(slot: slot)
        return value
    }

    mutating func removeAll() {
        nodes.removeAll()
        slots.removeAll()
        oldest = nil
        newest = nil
    }

    func keysLeastRecentFirst() -> [Key] {
        var keys: [Key] = []
        keys.reserveCapacity(nodes.count)
        var slot = oldest
        while let current = slot, keys.count < nodes.count {
            keys.append(nodes[current].key)
            slot = nodes[current].newer
        }
        return keys
    }

    /// Walks the list both ways and checks it against the dictionary.
    func invariantViolations() -> [String] {
        var problems: [String] = []
        if nodes.count > entriesMax { problems.append("\(nodes.count) entries, above entriesMax \(entriesMax)") }
        if slots.count != nodes.count { problems.append("\(slots.count) keys for \(nodes.count) slots") }
        for (slot, node) in nodes.enumerated() where slots[node.key] != slot {
            problems.append("slot \(slot) is not where its key points")
        }
        var walked = 0
        var previous: Int?
        var slot = oldest
        while let current = slot, walked <= nodes.count {
            if nodes[current].older != previous { problems.append("slot \(current) links back to the wrong slot") }
            walked += 1
            previous = current
            slot = nodes[current].newer
        }
        if walked != nodes.count { problems.append("the list from the oldest holds \(walked) of \(nodes.count) slots") }
        if previous != newest { problems.append("the list does not end at the newest slot") }
        return problems
    }

    /// Takes the slot out of the list, leaving its neighbours linked.
    private mutating func unlink(_ slot: Int) {
        let node = nodes[slot]
        if let older = node.older { nodes[older].newer = node.newer } else { oldest = node.newer }
        if let newer = node.newer { nodes[newer].older = node.older } else { newest = node.older }
    }

    private mutating func moveToNewest(_ slot: Int) {
        guard newest != slot else { return }
        unlink(slot)
        // Another slot was the newest, so the list is not empty.
        nodes[slot].older = newest
        nodes[slot].newer = nil
        if let newest { nodes[newest].newer = slot }
        newest = slot
    }

    /// Removes the slot's entry and moves the last slot into its place.
    private mutating func remove(slot: Int) {
        unlink(slot)
        slots[nodes[slot].key] = nil
        let last = nodes.count - 1
        if slot != last {
            let moved = nodes[last]
            nodes[slot] = moved
            if let older = moved.older { nodes[older].newer = slot } else { oldest = slot }
            if let newer = moved.newer { nodes[newer].older = slot } else { newest = slot }
            slots[moved.key] = slot
        }
        nodes.removeLast()
    }
}

extension RecencyList: Sendable where Key: Sendable, Value: Sendable {}
extension RecencyList.Node: Sendable where Key: Sendable, Value: Sendable {}
