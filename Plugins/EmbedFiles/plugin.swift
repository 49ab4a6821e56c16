import Foundation
import PackagePlugin

/// Compiles run-time files into the target that needs them, so the `wallet`
/// binary runs from any directory and in a slim container with nothing beside it.
///
/// A target embeds every regular file in its `Embedded/` directory. The
/// `WalletStore` target also embeds the package's `Migrations/*.sql`, and
/// `Migrations/functions/*.sql` under names that start with `functions/`.
@main
struct EmbedFiles: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        var inputs = try files(in: target.directoryURL.appending(path: "Embedded"))
        var functionInputs: [URL] = []
        if target.name == "WalletStore" {
            let migrations = context.package.directoryURL.appending(path: "Migrations")
            inputs += try files(in: migrations).filter { $0.pathExtension == "sql" }
            functionInputs = try files(in: migrations.appending(path: "functions")).filter { $0.pathExtension == "sql" }
        }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedFiles.swift")
        var arguments = [output.path] + inputs.map(\.path)
        if !functionInputs.isEmpty {
            arguments += ["--prefix", "functions/"] + functionInputs.map(\.path)
        }
        return [
            .buildCommand(
                displayName: "Embedding \(inputs.count + functionInputs.count) files into \(target.name)",
                executable: try context.tool(named: "EmbedFilesTool").url,
                arguments: arguments,
                inputFiles: inputs + functionInputs,
                outputFiles: [output]
            ),
        ]
    }

    private func files(in directory: URL) throws -> [URL] {
        let manager = FileManager.default
        guard manager.fileExists(atPath: directory.path) else { return [] }
        return try manager.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { !$0.hasDirectoryPath && !$0.lastPathComponent.hasPrefix(".") }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }
}
