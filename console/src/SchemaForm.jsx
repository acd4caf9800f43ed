// A form generated from a JSON Schema (what a yielding tool's `yield_schema` or an input
// request's schema becomes on the wire), validated in the browser before it is sent (with
// @cfworker/json-schema: no eval, so the page's Content-Security-Policy can forbid it). The
// server validates again: this only saves a person a round trip.
import { Validator } from "@cfworker/json-schema";
import { useMemo, useState } from "preact/hooks";

/** Errors of `value` against `schema`, by field path ("/answer"; "" for the whole value). */
export function check(schema, value) {
  const result = new Validator(schema, "2020-12", false).validate(value);
  return result.valid ? {} : errorsByPath(result.errors);
}

/** The schema a `$ref` names, within the root's `$defs` / `definitions`. */
function resolve(schema, root) {
  let current = schema || {};
  for (let hops = 0; current.$ref && hops < 16; hops += 1) {
    const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(current.$ref);
    const target = match && root[match[1]] && root[match[1]][decodeURIComponent(match[2])];
    if (!target) break;
    const { $ref, ...rest } = current;
    current = { ...target, ...rest };
  }
  return current;
}

/** What input a schema becomes: {kind, schema, nullable}. Optional fields (`X | None`, which
 * pydantic writes as anyOf [X, null]) become the field of X, left empty for null. */
export function fieldOf(schema, root) {
  let resolved = resolve(schema, root);
  let nullable = false;
  const options = resolved.anyOf || resolved.oneOf;
  if (options) {
    const others = options.filter((option) => resolve(option, root).type !== "null");
    nullable = others.length < options.length;
    if (others.length === 1) resolved = { ...resolve(others[0], root), title: resolved.title, description: resolved.description ?? resolve(others[0], root).description, default: resolved.default };
    else return { kind: "json", schema: resolved, nullable };
  }
  const type = Array.isArray(resolved.type) ? resolved.type.find((t) => t !== "null") : resolved.type;
  if (Array.isArray(resolved.type) && resolved.type.includes("null")) nullable = true;
  if (Array.isArray(resolved.enum)) return { kind: "enum", schema: resolved, nullable };
  if (type === "string") return { kind: "string", schema: resolved, nullable };
  if (type === "integer" || type === "number") return { kind: "number", schema: resolved, nullable };
  if (type === "boolean") return { kind: "boolean", schema: resolved, nullable };
  if (type === "object" && resolved.properties) return { kind: "object", schema: resolved, nullable };
  return { kind: "json", schema: resolved, nullable };
}

function initial(field, root) {
  const { kind, schema } = field;
  if (kind === "object") {
    const values = {};
    for (const [key, sub] of Object.entries(schema.properties)) values[key] = initial(fieldOf(sub, root), root);
    return values;
  }
  if (kind === "boolean") return schema.default === true;
  if (schema.default === undefined || schema.default === null) return "";
  return kind === "json" ? JSON.stringify(schema.default) : String(schema.default);
}

const MISSING = Symbol("missing");

/** The JSON value the inputs stand for (MISSING for an empty optional field). A JSON field
 * that does not parse is MISSING, with its error put in `errors` at its path. */
function valueOf(field, raw, root, path, errors) {
  const { kind, schema, nullable } = field;
  if (kind === "object") {
    const out = {};
    for (const [key, sub] of Object.entries(schema.properties)) {
      const value = valueOf(fieldOf(sub, root), raw[key], root, `${path}/${key}`, errors);
      if (value !== MISSING) out[key] = value;
    }
    return out;
  }
  if (kind === "boolean") return Boolean(raw);
  if (raw === "" || raw === undefined) return nullable ? null : MISSING;
  if (kind === "number") {
    const number = Number(raw);
    return Number.isFinite(number) ? number : raw;
  }
  if (kind === "enum") {
    const found = schema.enum.find((option) => String(option) === raw);
    return found === undefined ? raw : found;
  }
  if (kind === "json") {
    try {
      return JSON.parse(raw);
    } catch {
      errors[path] = "Not valid JSON.";
      return MISSING;
    }
  }
  return raw;
}

/** Wrapper errors ("Property x does not match schema") say less than the ones they wrap. */
const WRAPPERS = new Set(["properties", "items", "prefixItems", "allOf", "$ref", "additionalProperties", "unevaluatedProperties"]);

function errorsByPath(errors) {
  const found = {};
  for (const error of errors) {
    if (WRAPPERS.has(error.keyword)) continue;
    let path = error.instanceLocation.replace(/^#/, "");
    let message = error.error;
    if (error.keyword === "required") {
      const missing = /"([^"]+)"/.exec(error.error);
      if (missing) path = `${path}/${missing[1]}`;
      message = "Required.";
    }
    if (!found[path]) found[path] = message;
  }
  return found;
}

const prefixed = (errors, prefix) => Object.fromEntries(Object.entries(errors).map(([path, message]) => [prefix + path, message]));

/**
 * The form. `schema` a JSON Schema (an object schema gives one input per property; any other,
 * one input for the whole value). `onSubmit(value)` may return a promise; a rejection's
 * message is the caller's to show.
 */
export function SchemaForm({ schema, idPrefix, submitLabel = "Send", onSubmit, disabled }) {
  const root = schema || {};
  const rootField = useMemo(() => {
    const field = fieldOf(root, root);
    return field.kind === "object" ? field : { kind: "object", schema: { properties: { value: root }, required: ["value"] }, wrapped: true };
  }, [schema]);
  const [raw, setRaw] = useState(() => initial(rootField, root));
  const [errors, setErrors] = useState({});

  const submit = async (event) => {
    event.preventDefault();
    const unparsed = {};
    const built = valueOf(rootField, raw, root, "", unparsed);
    const value = rootField.wrapped ? built.value : built;
    const found = Object.keys(unparsed).length ? unparsed
      : rootField.wrapped ? prefixed(check(root, value === undefined ? null : value), "/value")
        : check(root, value);
    if (Object.keys(found).length) {
      setErrors(found);
      setTimeout(() => {
        const first = document.querySelector(`#${idPrefix} [aria-invalid="true"]`);
        if (first) first.focus();
      }, 0);
      return;
    }
    setErrors({});
    await onSubmit(value);
  };

  const summary = Object.keys(errors).length > 0;
  return (
    <form id={idPrefix} class="schema-form" onSubmit={submit} noValidate>
      <Fields field={rootField} raw={raw} path="" root={root} errors={errors} idPrefix={idPrefix}
        onChange={setRaw} />
      {summary && errors[""] && <p class="field-error" role="alert">{errors[""]}</p>}
      <button type="submit" disabled={disabled}>{submitLabel}</button>
    </form>
  );
}

/** The error of the field at `path`: its own, or one inside its value (an item of a list). */
function errorAt(errors, path) {
  if (errors[path]) return errors[path];
  const inside = Object.keys(errors).find((key) => key.startsWith(`${path}/`));
  return inside && `${inside.slice(path.length + 1)}: ${errors[inside]}`;
}

function Fields({ field, raw, path, root, errors, idPrefix, onChange }) {
  const required = new Set(field.schema.required || []);
  return Object.entries(field.schema.properties).map(([key, sub]) => {
    const child = fieldOf(sub, root);
    const childPath = `${path}/${key}`;
    const set = (value) => onChange({ ...raw, [key]: value });
    if (child.kind === "object") {
      return (
        <fieldset key={key}>
          <legend>{child.schema.title || key}</legend>
          <Fields field={child} raw={raw[key]} path={childPath} root={root} errors={errors}
            idPrefix={idPrefix} onChange={set} />
        </fieldset>
      );
    }
    return (
      <Field key={key} name={key} field={child} value={raw[key]} required={required.has(key)}
        error={errorAt(errors, childPath)} id={`${idPrefix}${childPath.replace(/[^A-Za-z0-9_-]/g, "-")}`}
        onInput={set} />
    );
  });
}

function Field({ name, field, value, required, error, id, onInput }) {
  const { kind, schema } = field;
  const label = schema.title || name;
  const hintId = `${id}-hint`;
  const errorId = `${id}-error`;
  const described = [schema.description ? hintId : null, error ? errorId : null].filter(Boolean).join(" ") || undefined;
  const common = { id, name, "aria-invalid": error ? "true" : undefined, "aria-describedby": described, "aria-required": required ? "true" : undefined };
  let input;
  if (kind === "boolean") {
    input = <input type="checkbox" {...common} checked={Boolean(value)} onChange={(e) => onInput(e.currentTarget.checked)} />;
  } else if (kind === "enum") {
    input = (
      <select {...common} value={value} onChange={(e) => onInput(e.currentTarget.value)}>
        {!required && <option value="">—</option>}
        {required && value === "" && <option value="" disabled>Choose…</option>}
        {schema.enum.map((option) => <option key={String(option)} value={String(option)}>{String(option)}</option>)}
      </select>
    );
  } else if (kind === "json") {
    input = <textarea {...common} rows={3} value={value} placeholder="JSON" onInput={(e) => onInput(e.currentTarget.value)} />;
  } else if (kind === "number") {
    input = <input type="number" {...common} value={value} step={schema.type === "integer" ? 1 : "any"}
      min={schema.minimum} max={schema.maximum} onInput={(e) => onInput(e.currentTarget.value)} />;
  } else {
    const long = (schema.maxLength || 0) > 200;
    input = long
      ? <textarea {...common} rows={3} value={value} maxLength={schema.maxLength} onInput={(e) => onInput(e.currentTarget.value)} />
      : <input type={schema.format === "date" ? "date" : schema.format === "email" ? "email" : "text"} {...common} value={value}
          maxLength={schema.maxLength} onInput={(e) => onInput(e.currentTarget.value)} />;
  }
  return (
    <div class={`field field-${kind}`}>
      {kind === "boolean"
        ? <label class="check">{input} {label}</label>
        : <><label for={id}>{label}{required && <span aria-hidden="true"> *</span>}</label>{input}</>}
      {schema.description && <small id={hintId} class="hint">{schema.description}</small>}
      {error && <small id={errorId} class="field-error">{error}</small>}
    </div>
  );
}
