import Foundation

// Usage: EmbedFilesTool OUTPUT.swift [--prefix PREFIX] FILE...
// Writes `enum EmbeddedFiles` with each file's bytes, keyed by file name;
// `--prefix` puts PREFIX before the names of the files after it (so two
// directories may hold files of the same name).
// Bytes are written as base64, so no file content can break the Swift source.
let arguments = CommandLine.arguments.dropFirst()
guard let outputPath = arguments.first else {
    FileHandle.standardError.write(Data("usage: EmbedFilesTool OUTPUT FILE...\n".utf8))
    exit(2)
}

var source = """
    // Generated at build time by EmbedFilesTool. Do not edit.
    import Foundation

    enum EmbeddedFiles {
        /// File name → contents, in file-name order.
        static let all: [(name: String, contents: Data)] = [

    """
var prefix = ""
var remaining = arguments.dropFirst()
while let path = remaining.popFirst() {
    if path == "--prefix", let next = remaining.popFirst() {
        prefix = next
        continue
    }
    let url = URL(fileURLWithPath: path)
    let data = try Data(contentsOf: url)
    let name = (prefix + url.lastPathComponent).replacingOccurrences(of: "\"", with: "")
    source += "        (\"\(name)\", Data(base64Encoded: \"\(data.base64EncodedString())\")!),\n"
}
source += """
        ]

        static func named(_ name: String) -> Data? {
            all.first { $0.name == name }?.contents
        }
    }

    """
let output = URL(fileURLWithPath: outputPath)
// Rewrite only on change, so an unchanged input does not force a recompile.
if (try? Data(contentsOf: output)) != Data(source.utf8) {
    try Data(source.utf8).write(to: output, options: .atomic)
}
