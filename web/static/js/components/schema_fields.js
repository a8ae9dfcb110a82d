// Form fields drawn from a JSON Schema (what GET /api/monikers returns for each
// moniker's config, and for the keys every session accepts).  Simple fields
// (numbers, integers, booleans, enums, strings) become inputs; anything else is
// left to the JSON box of the form.  read() returns only the fields filled in.
import { h } from "../core/dom.js";

// {type: "integer"} | {anyOf: [{type: "integer", ...}, {type: "null"}]} -> {schema, nullable}
function unwrap(prop) {
  if (prop.anyOf) {
    const real = prop.anyOf.filter((p) => p.type !== "null");
    if (real.length === 1) return { schema: { ...prop, ...real[0], anyOf: undefined }, nullable: true };
    return { schema: prop, nullable: true };
  }
  return { schema: prop, nullable: false };
}

export function isSimple(prop) {
  const { schema } = unwrap(prop);
  return Boolean(schema.enum) || ["integer", "number", "boolean", "string"].includes(schema.type);
}

const labelOf = (name) => name.replace(/_s$/, " (seconds)").replace(/_/g, " ");

export function fieldsFor(schema, names, prefix) {
  const props = (schema && schema.properties) || {};
  const fields = [];
  for (const name of names || Object.keys(props)) {
    const prop = props[name];
    if (!prop || !isSimple(prop)) continue;
    fields.push(field(name, prop, prefix));
  }
  return fields;
}

function field(name, prop, prefix) {
  const { schema, nullable } = unwrap(prop);
  const id = `${prefix}-${name}`;
  const hint = schema.description || prop.description;
  const testid = `${prefix}-${name}`;
  let input;
  if (schema.type === "boolean") {
    input = h("input", { type: "checkbox", id, name, checked: schema.default === true || prop.default === true,
      dataset: { kind: "boolean", testid } });
    return h("label.check", { for: id }, input, " ", labelOf(name), hint ? h("small", " — " + hint) : null);
  }
  if (schema.enum) {
    input = h("select", { id, name, dataset: { kind: "enum", testid } },
      nullable ? h("option", { value: "" }, "(default)") : null,
      schema.enum.map((v) => h("option", { value: v, selected: v === prop.default }, v)));
  } else if (schema.type === "integer" || schema.type === "number") {
    const min = schema.minimum ?? (schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum : undefined);
    input = h("input", { type: "number", id, name, inputmode: "decimal", step: schema.type === "integer" ? "1" : "any",
      min: min !== undefined ? String(min) : undefined, max: schema.maximum !== undefined ? String(schema.maximum) : undefined,
      placeholder: prop.default !== undefined && prop.default !== null ? String(prop.default) : "empty: none",
      dataset: { kind: schema.type, testid } });
  } else {
    input = h("input", { type: "text", id, name, placeholder: prop.default ? String(prop.default) : "",
      dataset: { kind: "string", testid } });
  }
  return h("label", { for: id }, labelOf(name), hint ? h("small", hint) : null, input);
}

// The values the person filled in (empty fields are left out: the defaults apply).
export function read(container) {
  const out = {};
  container.querySelectorAll("[data-kind]").forEach((input) => {
    const kind = input.dataset.kind;
    if (kind === "boolean") {
      if (input.checked !== input.defaultChecked) out[input.name] = input.checked;
      return;
    }
    if (input.value === "") return;
    if (kind === "integer" || kind === "number") out[input.name] = Number(input.value);
    else out[input.name] = input.value;
  });
  return out;
}
