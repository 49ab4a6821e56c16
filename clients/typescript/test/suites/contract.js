// The client against the API document the running service serves: every
// operation and problem code is implemented or excluded, and the check is
// itself shown to fail on a document that has more.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as client from "../../index.js";
import {
  compareWithDocument,
  decode,
  EXCLUDED_OPERATIONS,
  IMPLEMENTED_OPERATIONS,
  KNOWN_PROBLEM_CODES,
  PROBLEM_CLASSES,
  problemCodesOf,
  problemError,
  SHAPES,
  ShapeError,
  UnknownProblemError,
  WalletClient,
  WalletProblemError,
} from "../../index.js";
import { ctx } from "../support/context.js";

let served;
async function servedDocument() {
  served ??= await new WalletClient({ baseUrl: ctx.service.url }).getOpenAPIDocument();
  return structuredClone(served);
}

describe("contract with the served API document", () => {
  test("every operationId and problem code is implemented or excluded", async () => {
    const comparison = compareWithDocument(await servedDocument());
    assert.deepEqual(comparison.missingOperations, [], "operations the client neither implements nor excludes");
    assert.deepEqual(comparison.missingProblemCodes, [], "problem codes the client does not know");
    assert.deepEqual(comparison.staleOperations, [], "operations the document no longer has");
    assert.deepEqual(comparison.staleProblemCodes, [], "problem codes the document no longer has");
  });

  test("a doctored document with one more operation and one more code is reported", async () => {
    const document = await servedDocument();
    document.paths["/v1/refunds"] = {
      post: { operationId: "createRefund", responses: { 201: { description: "Refunded." } } },
    };
    document.components.schemas.ChargebackPendingProblem = {
      allOf: [
        { $ref: "#/components/schemas/Problem" },
        { properties: { code: { const: "chargeback_pending" }, status: { const: 409 } } },
      ],
    };
    document.components.schemas.LedgerFrozenProblem = {
      allOf: [{ $ref: "#/components/schemas/Problem" }, { properties: { code: { enum: ["ledger_frozen"] } } }],
    };
    const comparison = compareWithDocument(document);
    assert.deepEqual(comparison.missingOperations, ["createRefund"]);
    assert.deepEqual(comparison.missingProblemCodes, ["chargeback_pending", "ledger_frozen"]);

    // And the other way: a document that lost an operation and a code.
    const smaller = await servedDocument();
    delete smaller.paths["/v1/grants"];
    delete smaller.components.schemas.WalletBusyProblem;
    const shrunk = compareWithDocument(smaller);
    assert.deepEqual(shrunk.staleOperations, ["createGrant"]);
    assert.deepEqual(shrunk.staleProblemCodes, ["wallet_busy"]);
  });

  test("the excluded operations are the ones no game server or app backend calls", () => {
    assert.deepEqual(Object.keys(EXCLUDED_OPERATIONS).sort(),
      ["getMetrics", "receiveAppStoreNotification", "receiveGooglePlayNotification"]);
    for (const reason of Object.values(EXCLUDED_OPERATIONS)) assert.ok(reason.length > 10);
  });

  test("each implemented operationId is a method of WalletClient, and no excluded one is", () => {
    for (const id of IMPLEMENTED_OPERATIONS) {
      assert.equal(typeof WalletClient.prototype[id], "function", id);
    }
    for (const id of Object.keys(EXCLUDED_OPERATIONS)) assert.equal(WalletClient.prototype[id], undefined, id);
  });

  test("each known code has an error class named after it, with the members the document adds", async () => {
    const document = await servedDocument();
    assert.deepEqual(Object.keys(PROBLEM_CLASSES).sort(), [...KNOWN_PROBLEM_CODES].sort());
    const baseMembers = new Set(document.components.schemas.Problem.required);
    const extras = extraMembersByCode(document, baseMembers);
    for (const [code, made] of Object.entries(PROBLEM_CLASSES)) {
      const name = code.split("_").map((word) => word[0].toUpperCase() + word.slice(1)).join("") + "Error";
      assert.equal(made.name, name);
      assert.equal(made.code, code);
      assert.ok(made.prototype instanceof WalletProblemError);
      for (const member of extras.get(code) ?? []) {
        assert.ok(made.extraMembers.includes(member), `${name} lacks ${member}`);
      }
      const error = problemError(499, { code, title: "t", status: 499, detail: "d", instance: "i", extra: 1 });
      assert.ok(error instanceof made);
      assert.equal(error.body.extra, 1);
    }
    const unknown = problemError(418, { code: "teapot", title: "t", status: 418, detail: "d", instance: "i", spout: true });
    assert.ok(unknown instanceof UnknownProblemError);
    assert.equal(unknown.code, "teapot");
    assert.equal(unknown.body.spout, true);
  });

  test("problemCodesOf reads const and enum through allOf", async () => {
    const codes = problemCodesOf(await servedDocument());
    assert.ok(codes.includes("insufficient_funds"));
    assert.ok(codes.includes("verification_failed"));
    assert.equal(new Set(codes).size, codes.length);
  });

  test("every result shape requires what the document requires", async () => {
    const document = await servedDocument();
    const faults = [];
    for (const [name, shape] of Object.entries(SHAPES)) {
      const schema = document.components.schemas[name];
      if (!schema) continue;
      compareShape(document, shape, schema, name, faults);
    }
    assert.deepEqual(faults, []);
  });

  test("index.d.ts declares exactly what index.js exports", () => {
    const declarations = readFileSync(new URL("../../index.d.ts", import.meta.url), "utf8");
    const declared = [...declarations.matchAll(/^export declare (?:class|const|function) (\w+)/gm)].map((match) => match[1]);
    assert.deepEqual([...declared].sort(), Object.keys(client).sort());
  });

  test("decoding refuses a body without a required member and keeps unknown ones", () => {
    const balance = { user_id: "u", currency: "coin", balance: 1, held: 0, available: 1 };
    const debit = { id: 1, user_id: "u", currency: "coin", amount: 1, reason: null, entry_id: 1, created_at: "t" };
    const body = { debit: { ...debit, future_member: "kept" }, balance };
    assert.equal(decode(body, "DebitResponse"), body);
    assert.equal(body.debit.future_member, "kept");
    const { reason, ...withoutReason } = debit;
    assert.throws(() => decode({ debit: withoutReason, balance }, "DebitResponse"), ShapeError);
    assert.throws(() => decode({ debit: { ...debit, amount: 1.5 }, balance }, "DebitResponse"), ShapeError);
    assert.throws(() => decode({ debit, balance: { ...balance, held: null } }, "DebitResponse"), ShapeError);
  });
});

/** For each code, the members its *Problem schema requires beyond the Problem base. */
function extraMembersByCode(document, baseMembers) {
  const out = new Map();
  for (const [name, schema] of Object.entries(document.components.schemas)) {
    if (!name.endsWith("Problem") || !Array.isArray(schema.allOf)) continue;
    const codes = [];
    const required = [];
    for (const part of schema.allOf) {
      const code = part.properties?.code;
      if (code?.const) codes.push(code.const);
      for (const value of code?.enum ?? []) codes.push(value);
      for (const member of part.required ?? []) if (!baseMembers.has(member)) required.push(member);
    }
    for (const code of codes) out.set(code, [...(out.get(code) ?? []), ...required]);
  }
  return out;
}

function deref(document, schema) {
  let current = schema;
  for (let depth = 0; current && current.$ref && depth < 10; depth++) {
    current = current.$ref.replace(/^#\//, "").split("/").reduce((node, key) => node[key], document);
  }
  return current;
}

/** An object schema's required members and properties, through $ref, allOf and a nullable oneOf. */
function objectSchema(document, schema) {
  const resolved = deref(document, schema);
  if (Array.isArray(resolved.oneOf)) {
    const object = resolved.oneOf.map((part) => deref(document, part)).find((part) => part.type !== "null");
    return object ? objectSchema(document, object) : null;
  }
  const required = new Set(resolved.required ?? []);
  const properties = { ...(resolved.properties ?? {}) };
  for (const part of resolved.allOf ?? []) {
    const inner = objectSchema(document, part);
    if (!inner) continue;
    for (const member of inner.required) required.add(member);
    Object.assign(properties, inner.properties);
  }
  return { required, properties, items: resolved.items };
}

function compareShape(document, shape, schema, path, faults) {
  if (typeof shape === "string") return;
  if ("nullable" in shape) return compareShape(document, shape.nullable, schema, path, faults);
  if ("arrayOf" in shape) {
    const resolved = deref(document, schema);
    if (!resolved.items) return faults.push(`${path}: the document has no array here`);
    return compareShape(document, shape.arrayOf, resolved.items, `${path}[]`, faults);
  }
  const object = objectSchema(document, schema);
  if (!object) return faults.push(`${path}: the document has no object here`);
  const mine = new Set(Object.keys(shape).filter((key) => !key.endsWith("?")));
  for (const member of object.required) if (!mine.has(member)) faults.push(`${path}.${member}: required by the document, not checked`);
  for (const member of mine) if (!object.required.has(member)) faults.push(`${path}.${member}: checked, but optional in the document`);
  for (const [key, inner] of Object.entries(shape)) {
    const member = key.replace(/\?$/, "");
    if (object.properties[member]) compareShape(document, inner, object.properties[member], `${path}.${member}`, faults);
  }
}
