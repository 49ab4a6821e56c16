// The few Node.js globals these files use, declared here so that the example
// compiles with the TypeScript compiler alone (no @types/node to install).
declare const process: {
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string | undefined>>;
  exitCode: number | undefined;
};
