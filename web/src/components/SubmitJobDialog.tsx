// Queue a job: a form for the common fields, or a TOML document for everything
// (POST /api/v1/jobs). Both are checked here first; the daemon's answer names any field
// it refuses, shown next to that field.

import { Children, cloneElement, isValidElement, useId, useMemo, useRef, useState, type ReactElement, type ReactNode } from "react";
import { api, ApiError, idempotencyKey } from "../api/client";
import { JOB_TYPES, type Job, type JobType, type NodeInfo } from "../api/types";
import {
  EMPTY_FORM, formToRequest, formToToml, requestToForm, splitCommand, tomlToRequest, type JobDraft, type JobForm,
} from "../lib/jobForm";
import { Dialog } from "./Dialog";
import { Icon } from "./Icon";
import { Segmented } from "./ui";

const LAST_CWD = "gpuplane.lastCwd";

export function SubmitJobDialog({ onClose, onSubmitted, nodes, initial }: {
  onClose: () => void; onSubmitted: (job: Job) => void; nodes?: NodeInfo[]; initial?: JobDraft }) {
  const [mode, setMode] = useState<"form" | "toml">("form");
  const [form, setForm] = useState<JobForm>(() => {
    if (initial) return requestToForm(initial);
    return { ...EMPTY_FORM, cwd: localStorage.getItem(LAST_CWD) ?? "" };
  });
  const [toml, setToml] = useState("");
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [serverError, setServerError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const key = useRef(idempotencyKey());

  const set = (field: keyof JobForm) => (e: { target: { value: string } }) => {
    setForm((f) => ({ ...f, [field]: e.target.value }));
    key.current = idempotencyKey(); // another body: another key
    if (errors[field]) setErrors(({ [field]: _, ...rest }) => rest);
  };

  const argv = useMemo(() => {
    try {
      return splitCommand(form.command);
    } catch {
      return null;
    }
  }, [form.command]);

  const switchMode = (next: "form" | "toml") => {
    if (next === mode) return;
    setServerError(null);
    if (next === "toml") {
      setToml(formToToml(form));
      setErrors({});
      setMode("toml");
      return;
    }
    const result = tomlToRequest(toml);
    if (!result.ok && result.errors.toml) {
      setErrors(result.errors);
      return;
    }
    if (result.ok) setForm(requestToForm(result.request));
    setErrors({});
    setMode("form");
  };

  const submit = async () => {
    const result = mode === "form" ? formToRequest(form) : tomlToRequest(toml);
    if (!result.ok) {
      setErrors(result.errors);
      return;
    }
    setErrors({});
    setServerError(null);
    setBusy(true);
    try {
      const job = await api.submitJob(result.request, key.current);
      localStorage.setItem(LAST_CWD, result.request.cwd);
      onSubmitted(job);
    } catch (e) {
      const err = e as ApiError;
      const field = typeof err.details?.field === "string" ? err.details.field : null;
      if (field && mode === "form") setErrors({ [field === "max_attempts" ? "retry" : field]: err.message });
      else setServerError(err.message);
      setBusy(false);
    }
  };

  const tomlErrors = Object.entries(errors);

  return (
    <Dialog title="Submit a job" onClose={onClose} wide footer={
      <>
        <span className="foot-hint">{mode === "form" ? "Runs without a shell: write sh -c '…' for pipes." :
          "Fields as in POST /api/v1/jobs."}</span>
        <button className="btn" onClick={onClose}>Cancel</button>
        <button className="btn btn-primary" onClick={submit} disabled={busy}>{busy ? "Submitting…" : "Queue job"}</button>
      </>
    }>
      <div className="dialog-toolbar">
        <Segmented label="Editor" value={mode} onChange={switchMode}
          options={[{ id: "form", label: "Form" }, { id: "toml", label: "TOML" }]} />
      </div>
      {mode === "form" ? (
        <form className="form-grid" onSubmit={(e) => { e.preventDefault(); void submit(); }}>
          <Field label="Command" wide error={errors.command}>
            <input className="mono" value={form.command} onChange={set("command")} autoFocus spellCheck={false}
              placeholder="python train.py --config configs/base.yaml" aria-invalid={!!errors.command} />
            {argv && argv.length > 1 && !errors.command && (
              <div className="argv" aria-label="Arguments">
                {argv.map((a, i) => <code key={i}>{a}</code>)}
              </div>
            )}
          </Field>
          <Field label="Working directory" wide error={errors.cwd}>
            <input className="mono" value={form.cwd} onChange={set("cwd")} spellCheck={false}
              placeholder="/home/me/projects/model" aria-invalid={!!errors.cwd} />
          </Field>
          <Field label="Name" error={errors.name}>
            <input value={form.name} onChange={set("name")} placeholder={argv?.[0]?.split("/").pop() || "from the program"} />
          </Field>
          <Field label="Type">
            <select value={form.type} onChange={(e) => setForm((f) => ({ ...f, type: e.target.value as JobType }))}>
              {JOB_TYPES.map((t) => <option key={t} value={t}>{t.toLowerCase()}</option>)}
            </select>
          </Field>
          <Field label="GPUs" error={errors.gpu}>
            <input type="number" min={0} max={64} value={form.gpu} onChange={set("gpu")} aria-invalid={!!errors.gpu} />
          </Field>
          <Field label="Node" error={errors.node}>
            <select value={form.node} onChange={(e) => setForm((f) => ({ ...f, node: e.target.value }))}>
              <option value="">any node</option>
              {nodes?.map((n) => <option key={n.id} value={n.name}>{n.name}</option>)}
            </select>
          </Field>
          <Field label="Priority" error={errors.priority}>
            <input type="number" value={form.priority} onChange={set("priority")} aria-invalid={!!errors.priority} />
          </Field>
          <Field label="Retries after failure" error={errors.retry}>
            <input type="number" min={0} max={100} value={form.retry} onChange={set("retry")} aria-invalid={!!errors.retry} />
          </Field>
          <Field label="Timeout" error={errors.timeout}>
            <input value={form.timeout} onChange={set("timeout")} placeholder="none (e.g. 12h)" aria-invalid={!!errors.timeout} />
          </Field>
          <Field label="Labels">
            <input value={form.labels} onChange={set("labels")} placeholder="comma, separated" />
          </Field>
          <Field label="Environment" wide error={errors.env}>
            <textarea className="mono" rows={3} value={form.env} onChange={set("env")} spellCheck={false}
              placeholder={"WANDB_MODE=offline\nOMP_NUM_THREADS=8"} aria-invalid={!!errors.env} />
          </Field>
          <button type="submit" hidden />
        </form>
      ) : (
        <div className="toml-mode">
          <textarea className="mono toml" rows={16} value={toml} spellCheck={false} aria-label="Job as TOML"
            onChange={(e) => { setToml(e.target.value); key.current = idempotencyKey(); setErrors({}); }}
            onKeyDown={(e) => { if (e.key === "Enter" && (e.metaKey || e.ctrlKey)) void submit(); }} />
          {tomlErrors.length > 0 && (
            <ul className="toml-errors" role="alert">
              {tomlErrors.map(([k, v]) => <li key={k}><Icon name="alert" size={13} /><b>{k === "toml" ? "syntax" : k}</b> {v}</li>)}
            </ul>
          )}
        </div>
      )}
      {serverError && <div className="banner banner-bad" role="alert"><Icon name="alert" />{serverError}</div>}
    </Dialog>
  );
}

/** A labelled control; the error below it is tied to it with aria-describedby. */
function Field({ label, wide, error, children }: { label: string; wide?: boolean; error?: string; children: ReactNode }) {
  const id = useId();
  const [control, ...rest] = Children.toArray(children);
  return (
    <div className={wide ? "field span-2" : "field"}>
      <label htmlFor={id}>{label}</label>
      {isValidElement(control)
        ? cloneElement(control as ReactElement<Record<string, unknown>>, { id, "aria-describedby": error ? `${id}-error` : undefined })
        : control}
      {error && <div className="field-error" id={`${id}-error`} role="alert">{error}</div>}
      {rest}
    </div>
  );
}

/** A job's submit body, to queue it again with changes; env values the server hid are named, not sent. */
export function jobToRequest(job: Job): JobDraft {
  const entries = Object.entries(job.env);
  const env = Object.fromEntries(entries.filter((e): e is [string, string] => e[1] !== null));
  return {
    name: job.name, command: job.command, cwd: job.cwd ?? "", type: job.type, gpu: job.gpu, env,
    hidden_env: entries.filter(([, v]) => v === null).map(([k]) => k),
    labels: job.labels, node: job.node ?? undefined, priority: job.priority, max_attempts: job.max_attempts,
    timeout_s: job.timeout_s,
  };
}
