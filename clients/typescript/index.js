// The wallet service's client for Node 18 and later (ES module, no dependencies).
export { WalletClient, CLIENT_VERSION } from "./src/client.js";
export * from "./src/errors.js";
export {
  MANIFEST,
  IMPLEMENTED_OPERATIONS,
  EXCLUDED_OPERATIONS,
  KNOWN_PROBLEM_CODES,
  operationIdsOf,
  problemCodesOf,
  compareWithDocument,
} from "./src/manifest.js";
export { decode, SHAPES, ShapeError } from "./src/decode.js";
