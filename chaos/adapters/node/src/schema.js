// The shapes of protocol version 1, read from the protocol's JSON Schema.
//
// `protocol.schema.json` beside this module is a copy of the committed
// protocol/schema/protocol.schema.json (generated from the Rust types of
// agentchaos-protocol); protocol/tests/schema.rs fails when the copy
// differs, and `UPDATE_SCHEMA=1 cargo test -p agentchaos-protocol`
// rewrites it. It ships inside the package, so the kit validates the same
// way wherever it is installed.
//
// The checks accept exactly what the schema accepts (validated by Ajv, JSON
// Schema 2020-12) and name the first part that does not fit. This module
// holds no shape of its own, only the two facts about ids and history
// nodes the schema cannot say.

import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";

const SCHEMA_FILE = new URL("./protocol.schema.json", import.meta.url);

/** Types whose events are nodes of the history tree (they carry `parent`). */
export const MESSAGE_LIKE = new Set(["user_message", "assistant_message", "tool_call", "tool_result", "compaction"]);

/** A line, a body or an event does not fit the schema; the message names the field. */
export class BadShape extends Error {}

function load() {
  try {
    return JSON.parse(readFileSync(SCHEMA_FILE, "utf8"));
  } catch (e) {
    throw new Error(`cannot read the packaged protocol schema ${SCHEMA_FILE.pathname}: ${e.message}`);
  }
}

const DOCUMENT = load();
const DEFS = DOCUMENT.$defs;
// `format` names such as uint64 are Rust's, not JSON Schema's: the
// integer bounds beside them carry the check.
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
// The definitions are added once, under one id, and every validator
// refers to them there: Ajv compiles each definition once for the
// process, not once per validator (which made start-up cost 0.6 s).
const ROOT = "urn:agentchaos:protocol";
ajv.addSchema({ $id: ROOT, $defs: DEFS });

function validator(schema) {
  return ajv.compile(JSON.parse(JSON.stringify(schema).replaceAll('"#/$defs/', `"${ROOT}#/$defs/`)));
}

/**
 * A validator for each variant of a tagged union, by its tag's value,
 * compiled when first asked for: a store process serves a few ops and
 * event types, not all of them.
 */
function variants(union, tag) {
  const own = Object.fromEntries(Object.entries(union).filter(([k]) => k !== "oneOf" && k !== "description"));
  const schemas = new Map(union.oneOf.map((v) => [v.properties[tag].const, { allOf: [own, v] }]));
  const compiled = new Map();
  return {
    has: (name) => schemas.has(name),
    get(name) {
      if (!compiled.has(name)) compiled.set(name, validator(schemas.get(name)));
      return compiled.get(name);
    },
  };
}

const REQUESTS = variants(DEFS.RequestLine, "op");
const EVENTS = variants(DEFS.Event, "type");

/** Every capability name the protocol knows. */
export const CAPABILITIES = DEFS.Capability.oneOf.map((v) => v.const);

/** The first way `value` does not fit, in one line, or null. */
function problem(validate, value) {
  if (validate(value)) return null;
  const error = validate.errors[0];
  const where = error.instancePath
    .split("/")
    .slice(1)
    .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p}`))
    .join("");
  let message = `${error.message}${error.params && error.params.additionalProperty ? ` (${error.params.additionalProperty})` : ""}`;
  if (message.length > 200) message = `${message.slice(0, 200)}…`;
  return where ? `at ${where}: ${message}` : message;
}

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

/** Returns `req` if it fits $defs/RequestLine, else throws `BadShape`. */
export function checkRequest(req) {
  if (!isObject(req)) throw new BadShape("a request is a JSON object");
  const op = req.op;
  if (typeof op !== "string" || !REQUESTS.has(op)) throw new BadShape(`unknown op ${JSON.stringify(op)}`);
  if (op === "append" && "event" in req) {
    try {
      checkEvent(req.event);
    } catch (e) {
      if (e instanceof BadShape) throw new BadShape(`append: event does not fit: ${e.message}`);
      throw e;
    }
  }
  const p = problem(REQUESTS.get(op), req);
  if (p !== null) throw new BadShape(`${op}: ${p}`);
  return req;
}

/** Returns `event` if it fits $defs/Event, else throws `BadShape`. */
export function checkEvent(event) {
  if (!isObject(event)) throw new BadShape("an event is a JSON object");
  const kind = event.type;
  if (typeof kind !== "string" || !EVENTS.has(kind)) throw new BadShape(`unknown event type ${JSON.stringify(kind)}`);
  const p = problem(EVENTS.get(kind), event);
  if (p !== null) throw new BadShape(`${kind}: ${p}`);
  return event;
}

/** The seq an event id `e<seq>` names (canonical form only), else null. */
export function seqOfId(eventId) {
  if (typeof eventId !== "string" || !/^e(0|[1-9][0-9]*)$/.test(eventId)) return null;
  const seq = Number(eventId.slice(1));
  return Number.isSafeInteger(seq) ? seq : null;
}
