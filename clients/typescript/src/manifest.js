// What this client covers of the service's API document, and the check
// that compares it with a document (the one GET /openapi.json serves).
import { readFileSync } from "node:fs";

const manifest = JSON.parse(readFileSync(new URL("../manifest.json", import.meta.url), "utf8"));

export const MANIFEST = deepFreeze(manifest);
export const IMPLEMENTED_OPERATIONS = MANIFEST.operations.implemented;
export const EXCLUDED_OPERATIONS = MANIFEST.operations.excluded;
export const KNOWN_PROBLEM_CODES = MANIFEST.problemCodes;

const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** Every operationId under `paths`, in document order. */
export function operationIdsOf(document) {
  const ids = [];
  const paths = isObject(document) && isObject(document.paths) ? document.paths : {};
  for (const item of Object.values(paths)) {
    if (!isObject(item)) continue;
    for (const method of HTTP_METHODS) {
      const operation = item[method];
      if (isObject(operation) && typeof operation.operationId === "string") ids.push(operation.operationId);
    }
  }
  return ids;
}

/**
 * Every problem code the document names: the `const` and `enum` values of
 * the `code` member in each `*Problem` schema of `components.schemas`,
 * looked for through `allOf`, `oneOf` and `anyOf`.
 */
export function problemCodesOf(document) {
  const codes = new Set();
  const schemas = isObject(document) && isObject(document.components) && isObject(document.components.schemas)
    ? document.components.schemas
    : {};
  const visit = (schema, depth) => {
    if (!isObject(schema) || depth > 16) return;
    const code = isObject(schema.properties) ? schema.properties.code : undefined;
    if (isObject(code)) {
      if (typeof code.const === "string") codes.add(code.const);
      if (Array.isArray(code.enum)) for (const value of code.enum) if (typeof value === "string") codes.add(value);
    }
    for (const key of ["allOf", "oneOf", "anyOf"]) {
      if (Array.isArray(schema[key])) for (const part of schema[key]) visit(part, depth + 1);
    }
  };
  for (const [name, schema] of Object.entries(schemas)) {
    if (name.endsWith("Problem")) visit(schema, 0);
  }
  return [...codes].sort();
}

/**
 * Compares a document with what this client knows. `missing*` lists what the
 * document has and the client neither implements nor excludes; `stale*` what
 * the client lists and the document no longer has.
 */
export function compareWithDocument(document, known = MANIFEST) {
  const implemented = new Set(known.operations.implemented);
  const excluded = new Set(Object.keys(known.operations.excluded));
  const codes = new Set(known.problemCodes);
  const documentOperations = operationIdsOf(document);
  const documentCodes = problemCodesOf(document);
  const inDocument = new Set(documentOperations);
  const codesInDocument = new Set(documentCodes);
  return {
    missingOperations: documentOperations.filter((id) => !implemented.has(id) && !excluded.has(id)),
    missingProblemCodes: documentCodes.filter((code) => !codes.has(code)),
    staleOperations: [...implemented, ...excluded].filter((id) => !inDocument.has(id)),
    staleProblemCodes: [...codes].filter((code) => !codesInDocument.has(code)),
  };
}

function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function deepFreeze(value) {
  if (typeof value === "object" && value !== null) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
