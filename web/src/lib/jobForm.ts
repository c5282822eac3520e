// The submit dialog's two modes, as pure functions: the form's fields become a JobSubmit
// body, and a TOML document is checked against the same rules (POST /api/v1/jobs) before
// anything is sent, with messages that name the field at fault.

import { parse as parseToml, stringify as stringifyToml } from "smol-toml";
import { JOB_TYPES, type JobSubmit, type JobType } from "../api/types";

export const MAX_PRIORITY = 1_000_000;
export const MAX_GPUS = 64;

export interface JobForm {
  name: string;
  command: string;
  cwd: string;
  type: JobType;
  gpu: string;
  priority: string;
  retry: string;
  timeout: string;
  env: string;
  labels: string;
  node: string;
}

export const EMPTY_FORM: JobForm = {
  name: "", command: "", cwd: "", type: "TRAIN", gpu: "1", priority: "0", retry: "0", timeout: "", env: "", labels: "",
  node: "",
};

export type Result = { ok: true; request: JobSubmit } | { ok: false; errors: Record<string, string> };

/** Split a command line as a POSIX shell would (quotes and backslashes), without running one. */
export function splitCommand(line: string): string[] {
  const out: string[] = [];
  let current = "";
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote === "'") {
      if (c === "'") quote = null;
      else current += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "\\" && i + 1 < line.length && '"\\$`\n'.includes(line[i + 1])) current += line[++i];
      else current += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\") {
      if (i + 1 < line.length) {
        const next = line[++i];
        if (next !== "\n") current += next;
        inWord = true;
      }
    } else if (/\s/.test(c)) {
      if (inWord) out.push(current);
      current = "";
      inWord = false;
    } else {
      current += c;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unterminated ${quote === "'" ? "single" : "double"} quote`);
  if (inWord) out.push(current);
  return out;
}

/** Quote an argv back into one line that splitCommand reads the same. */
export function joinCommand(argv: readonly string[]): string {
  return argv.map((a) => {
    if (a !== "" && /^[\w@%+=:,./-]+$/.test(a)) return a;
    if (!a.includes("'")) return `'${a}'`;
    return `"${a.replace(/(["\\$`])/g, "\\$1")}"`;
  }).join(" ");
}

/** "90", "90s", "15m", "2h", "1d" -> seconds; "" -> null. */
export function parseDuration(text: string): number | null {
  const t = text.trim();
  if (!t) return null;
  const m = /^(\d+(?:\.\d+)?)\s*([smhd]?)$/.exec(t);
  if (!m) throw new Error("a duration like 90s, 30m, 12h or 2d");
  const n = Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as "" | "s" | "m" | "h" | "d"];
  if (n <= 0) throw new Error("must be longer than zero");
  return n;
}

/** KEY=VALUE lines; blank lines and # comments are skipped. */
export function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(`line ${i + 1}: expected NAME=value`);
    const key = line.slice(0, eq).trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new Error(`line ${i + 1}: bad variable name "${key}"`);
    env[key] = line.slice(eq + 1);
  });
  return env;
}

function intIn(text: string, low: number, high: number): number {
  const t = text.trim();
  if (!/^-?\d+$/.test(t)) throw new Error("a whole number");
  const n = Number(t);
  if (n < low || n > high) throw new Error(`between ${low} and ${high}`);
  return n;
}

export function formToRequest(form: JobForm): Result {
  const errors: Record<string, string> = {};
  const request: JobSubmit = { command: [], cwd: form.cwd.trim() };
  const attempt = (field: string, fn: () => void) => {
    try {
      fn();
    } catch (e) {
      errors[field] = (e as Error).message;
    }
  };
  attempt("command", () => {
    const argv = splitCommand(form.command);
    if (!argv.length) throw new Error("the command to run, e.g. python train.py --lr 3e-4");
    request.command = argv;
  });
  if (!request.cwd) errors.cwd = "the working directory (an absolute path on the node)";
  else if (!request.cwd.startsWith("/")) errors.cwd = "an absolute path, starting with /";
  if (form.name.trim()) request.name = form.name.trim();
  if (form.name.trim().length > 200) errors.name = "at most 200 characters";
  request.type = form.type;
  attempt("gpu", () => { request.gpu = intIn(form.gpu || "0", 0, MAX_GPUS); });
  attempt("priority", () => {
    const p = intIn(form.priority || "0", -MAX_PRIORITY, MAX_PRIORITY);
    if (p) request.priority = p;
  });
  attempt("retry", () => {
    const r = intIn(form.retry || "0", 0, 100);
    if (r) request.retry = r;
  });
  attempt("timeout", () => {
    const s = parseDuration(form.timeout);
    if (s !== null) request.timeout_s = s;
  });
  attempt("env", () => {
    const env = parseEnv(form.env);
    if (Object.keys(env).length) request.env = env;
  });
  const labels = form.labels.split(",").map((s) => s.trim()).filter(Boolean);
  if (labels.length) request.labels = labels;
  if (form.node.trim()) request.node = form.node.trim();
  return Object.keys(errors).length ? { ok: false, errors } : { ok: true, request };
}

const FIELDS = new Set(["command", "cwd", "dir", "name", "type", "gpu", "gpus", "env", "labels", "node", "priority",
  "max_attempts", "retry", "timeout_s", "stop_grace_s"]);

function isInt(v: unknown): v is number | bigint {
  return typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v));
}

/** Check a TOML job document and turn it into a request; `errors` keys are field names ("toml" for syntax). */
export function tomlToRequest(text: string): Result {
  let doc: Record<string, unknown>;
  try {
    doc = parseToml(text) as Record<string, unknown>;
  } catch (e) {
    const message = (e as Error).message.split("\n")[0];
    return { ok: false, errors: { toml: message } };
  }
  const errors: Record<string, string> = {};
  const request: Partial<JobSubmit> & Record<string, unknown> = {};
  for (const [key, value] of Object.entries(doc)) {
    if (!FIELDS.has(key)) {
      errors[key] = `unknown field (known: ${[...FIELDS].join(", ")})`;
      continue;
    }
    switch (key) {
      case "command":
        if (typeof value === "string") {
          try {
            request.command = splitCommand(value);
          } catch (e) {
            errors.command = (e as Error).message;
          }
        } else if (Array.isArray(value) && value.every((a) => typeof a === "string")) {
          request.command = value as string[];
        } else {
          errors.command = "a string (split like a shell would) or an array of strings";
        }
        if (request.command && (!request.command.length || !request.command[0])) {
          errors.command = "must name a program to run";
        }
        break;
      case "cwd":
      case "dir":
        if (typeof value !== "string" || !value.startsWith("/")) errors[key] = "an absolute path, starting with /";
        else request.cwd = value;
        break;
      case "name":
      case "node":
        if (typeof value !== "string" || !value.trim()) errors[key] = "a non-empty string";
        else if (key === "name" && value.length > 200) errors.name = "at most 200 characters";
        else request[key] = value;
        break;
      case "type":
        if (typeof value !== "string" || !(JOB_TYPES as readonly string[]).includes(value.toUpperCase())) {
          errors.type = `one of ${JOB_TYPES.join(", ")}`;
        } else request.type = value.toUpperCase() as JobType;
        break;
      case "gpu":
      case "gpus":
        if (!isInt(value) || Number(value) < 0 || Number(value) > MAX_GPUS) errors[key] = `a whole number from 0 to ${MAX_GPUS}`;
        else request.gpu = Number(value);
        break;
      case "priority":
        if (!isInt(value) || Math.abs(Number(value)) > MAX_PRIORITY) errors.priority = `a whole number from -${MAX_PRIORITY} to ${MAX_PRIORITY}`;
        else request.priority = Number(value);
        break;
      case "max_attempts":
        if (!isInt(value) || Number(value) < 1 || Number(value) > 101) errors.max_attempts = "a whole number from 1 to 101";
        else request.max_attempts = Number(value);
        break;
      case "retry":
        if (!isInt(value) || Number(value) < 0 || Number(value) > 100) errors.retry = "a whole number from 0 to 100";
        else request.retry = Number(value);
        break;
      case "timeout_s":
      case "stop_grace_s":
        if ((typeof value !== "number" && typeof value !== "bigint") || !(Number(value) > 0)) errors[key] = "a number of seconds, more than zero";
        else request[key] = Number(value);
        break;
      case "env":
        if (typeof value !== "object" || value === null || Array.isArray(value) ||
          !Object.values(value).every((v) => typeof v === "string")) {
          errors.env = "a table of strings, e.g. [env] CUDA_LAUNCH_BLOCKING = \"1\"";
        } else if (Object.keys(value).some((k) => !/^[A-Za-z_][A-Za-z0-9_]*$/.test(k))) {
          errors.env = "variable names are letters, digits and _";
        } else request.env = value as Record<string, string>;
        break;
      case "labels":
        if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) errors.labels = "an array of strings";
        else request.labels = value as string[];
        break;
    }
  }
  if (!("command" in doc)) errors.command = "required: command = \"python train.py\"";
  if (!("cwd" in doc) && !("dir" in doc)) errors.cwd = "required: cwd = \"/path/to/project\"";
  return Object.keys(errors).length ? { ok: false, errors } : { ok: true, request: request as JobSubmit };
}

const TOML_HINT = "# Required: command (a list, or a string split like a shell would), cwd.\n" +
  "# Optional: name, type, gpu, node, labels, priority, retry or max_attempts, timeout_s, stop_grace_s, [env].\n";

/** The TOML the dialog shows when switching from the form (what the form holds so far). */
export function formToToml(form: JobForm): string {
  const doc: Record<string, unknown> = {};
  if (form.name.trim()) doc.name = form.name.trim();
  let argv: string[] = [];
  try {
    argv = splitCommand(form.command);
  } catch {
    argv = [];
  }
  doc.command = argv;
  doc.cwd = form.cwd.trim();
  doc.type = form.type;
  doc.gpu = Number(form.gpu) || 0;
  if (Number(form.priority)) doc.priority = Number(form.priority);
  if (Number(form.retry)) doc.retry = Number(form.retry);
  try {
    const t = parseDuration(form.timeout);
    if (t !== null) doc.timeout_s = t;
  } catch {
    // an unfinished duration stays in the form
  }
  const labels = form.labels.split(",").map((s) => s.trim()).filter(Boolean);
  if (labels.length) doc.labels = labels;
  if (form.node.trim()) doc.node = form.node.trim();
  try {
    const env = parseEnv(form.env);
    if (Object.keys(env).length) doc.env = env;
  } catch {
    // idem
  }
  return `${TOML_HINT}${stringifyToml(doc)}\n`;
}

/** A job to submit again: its request, and the env names whose values the server keeps hidden. */
export type JobDraft = Partial<JobSubmit> & { hidden_env?: string[] };

/** A request back into form fields (switching from TOML to the form, or "submit again"). A hidden
 * value becomes a comment line naming the variable: nothing is sent for it until it is typed again. */
export function requestToForm(req: JobDraft): JobForm {
  const hidden = (req.hidden_env ?? []).map((k) => `# ${k}=  (value hidden: type it again to pass it)`);
  return {
    name: req.name ?? "",
    command: req.command ? joinCommand(req.command) : "",
    cwd: req.cwd ?? "",
    type: req.type ?? "TRAIN",
    gpu: String(req.gpu ?? 1),
    priority: String(req.priority ?? 0),
    retry: String(req.retry ?? (req.max_attempts ? req.max_attempts - 1 : 0)),
    timeout: req.timeout_s ? `${req.timeout_s}s` : "",
    env: [...Object.entries(req.env ?? {}).map(([k, v]) => `${k}=${v}`), ...hidden].join("\n"),
    labels: (req.labels ?? []).join(", "),
    node: req.node ?? "",
  };
}
