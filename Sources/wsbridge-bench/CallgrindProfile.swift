import Foundation

/// A callgrind output file, read for its self costs: the instructions each function ran itself
/// (a call's inclusive cost, the line after `calls=`, is not self cost), by name, and the
/// summary (a function's recursion levels counted as one). `object` keeps only the functions of object files whose path ends with it (the
/// daemon's binary, not libc). A function callgrind could not name is kept as its address
/// (`0x...`): `OrderFile` resolves it to the symbol that contains it.
struct CallgrindProfile {
    var selfCost: [String: Int] = [:]
    var total: Int?

    init(path: String, object: String? = nil) throws {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        // Callgrind's name compression: "(id) name" the first time, "(id)" after.
        var functionNames: [Substring: Substring] = [:]
        var objectNames: [Substring: Substring] = [:]
        func name(_ spec: Substring, _ table: inout [Substring: Substring]) -> Substring {
            guard spec.hasPrefix("("), let close = spec.firstIndex(of: ")") else { return spec }
            let id = spec[...close]
            let rest = spec[spec.index(after: close)...].drop { $0 == " " }
            if rest.isEmpty { return table[id] ?? id }
            table[id] = rest
            return rest
        }
        var inObject = object == nil
        var current: Substring?
        var skipNext = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("ob=") || line.hasPrefix("cob=") {
                let path = name(line.drop { $0 != "=" }.dropFirst(), &objectNames)
                if line.hasPrefix("ob="), let object { inObject = path.hasSuffix(object) }
                continue
            }
            if line.hasPrefix("fn=") {
                // A recursive call's level is a suffix ("name'2"): the same function.
                let function = name(line.dropFirst(3), &functionNames).prefix { $0 != "'" }
                current = inObject ? function : nil
                continue
            }
            if line.hasPrefix("cfn=") {
                _ = name(line.dropFirst(4), &functionNames)
                continue
            }
            if line.hasPrefix("calls=") {
                skipNext = true
                continue
            }
            if line.hasPrefix("summary:") || line.hasPrefix("totals:") {
                self.total = Int(line.split(separator: " ").last ?? "") ?? self.total
                continue
            }
            guard let first = line.first, first.isNumber || first == "+" || first == "-" || first == "*" else { continue }
            if skipNext {
                skipNext = false
                continue
            }
            let fields = line.split(separator: " ")
            if let current, fields.count >= 2, let cost = Int(fields[1]) { self.selfCost[String(current), default: 0] += cost }
        }
    }
}
