import { describe, expect, it } from "vitest";
import {
  EMPTY_FORM, formToRequest, formToToml, joinCommand, parseDuration, parseEnv, requestToForm, splitCommand, tomlToRequest,
} from "./jobForm";

describe("splitCommand", () => {
  it("splits like a POSIX shell", () => {
    expect(splitCommand(`python train.py --name "my run" --tag 'a b' x\\ y ""`)).toEqual(
      ["python", "train.py", "--name", "my run", "--tag", "a b", "x y", ""]);
    expect(splitCommand(`sh -c "echo \\"hi\\" \\$HOME"`)).toEqual(["sh", "-c", `echo "hi" $HOME`]);
    expect(splitCommand("  ")).toEqual([]);
  });

  it("refuses an unterminated quote", () => {
    expect(() => splitCommand(`python -c 'print(1)`)).toThrow(/unterminated single quote/);
  });

  it("is undone by joinCommand", () => {
    const argv = ["python", "-c", "print('hi')", "--x=1", "a b", "", 'say "x"'];
    expect(splitCommand(joinCommand(argv))).toEqual(argv);
  });
});

describe("form -> request", () => {
  const base = { ...EMPTY_FORM, command: "python train.py --lr 3e-4", cwd: "/home/me/proj" };

  it("maps every field to the API's names and types", () => {
    const r = formToRequest({ ...base, name: "vit", type: "EVALUATE", gpu: "2", priority: "5", retry: "3", timeout: "90m",
      env: "# comment\nWANDB_MODE=offline\n\nA=b=c", labels: "a100, fast ,", node: "box1" });
    expect(r).toEqual({ ok: true, request: {
      command: ["python", "train.py", "--lr", "3e-4"], cwd: "/home/me/proj", name: "vit", type: "EVALUATE", gpu: 2,
      priority: 5, retry: 3, timeout_s: 5400, env: { WANDB_MODE: "offline", A: "b=c" }, labels: ["a100", "fast"], node: "box1",
    } });
  });

  it("leaves defaults out of the body", () => {
    const r = formToRequest(base);
    expect(r).toEqual({ ok: true, request: { command: ["python", "train.py", "--lr", "3e-4"], cwd: "/home/me/proj", type: "TRAIN", gpu: 1 } });
  });

  it("names each field at fault", () => {
    const r = formToRequest({ ...EMPTY_FORM, command: "", cwd: "relative/dir", gpu: "65", priority: "1.5", timeout: "soon",
      env: "NOT VALID" });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(Object.keys(r.errors).sort()).toEqual(["command", "cwd", "env", "gpu", "priority", "timeout"]);
    expect(r.errors.cwd).toMatch(/absolute/);
    expect(r.errors.gpu).toMatch(/between 0 and 64/);
    expect(r.errors.env).toMatch(/line 1/);
  });

  it("parses durations and env lines", () => {
    expect(parseDuration("45")).toBe(45);
    expect(parseDuration("2h")).toBe(7200);
    expect(parseDuration("")).toBeNull();
    expect(() => parseDuration("0s")).toThrow();
    expect(() => parseEnv("1BAD=x")).toThrow(/bad variable name/);
  });
});

describe("TOML mode", () => {
  it("accepts a full job document", () => {
    const r = tomlToRequest(`
name = "sweep"
command = ["python", "train.py", "--lr", "0.1"]
cwd = "/data/proj"
type = "train"
gpu = 2
priority = -3
max_attempts = 4
timeout_s = 3600
stop_grace_s = 30.5
labels = ["a100"]
[env]
OMP_NUM_THREADS = "8"
`);
    expect(r).toEqual({ ok: true, request: { name: "sweep", command: ["python", "train.py", "--lr", "0.1"], cwd: "/data/proj",
      type: "TRAIN", gpu: 2, priority: -3, max_attempts: 4, timeout_s: 3600, stop_grace_s: 30.5, labels: ["a100"],
      env: { OMP_NUM_THREADS: "8" } } });
  });

  it("splits a command string and takes dir for cwd", () => {
    const r = tomlToRequest(`command = "python train.py --name 'a b'"\ndir = "/x"`);
    expect(r).toEqual({ ok: true, request: { command: ["python", "train.py", "--name", "a b"], cwd: "/x" } });
  });

  it("reports a syntax error with its position", () => {
    const r = tomlToRequest(`command = ["python"\ncwd = "/x"`);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors.toml).toBeTruthy();
  });

  it("reports unknown fields, wrong types, bounds and missing requirements", () => {
    const r = tomlToRequest(`
gpus = 100
priority = 2000000
type = "TRAINING"
env = { GOOD = "1", BAD = 2 }
labels = "a100"
shell = true
`);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.gpus).toMatch(/0 to 64/);
    expect(r.errors.priority).toMatch(/-1000000 to 1000000/);
    expect(r.errors.type).toMatch(/TRAIN, EVALUATE/);
    expect(r.errors.env).toMatch(/table of strings/);
    expect(r.errors.labels).toMatch(/array of strings/);
    expect(r.errors.shell).toMatch(/unknown field/);
    expect(r.errors.command).toMatch(/required/);
    expect(r.errors.cwd).toMatch(/required/);
  });

  it("round-trips the form through TOML", () => {
    const form = { ...EMPTY_FORM, name: "x", command: "python a.py --q 'a b'", cwd: "/p", gpu: "2", priority: "7", retry: "1",
      timeout: "1h", env: "A=1", labels: "l1, l2", node: "n1" };
    const back = tomlToRequest(formToToml(form));
    expect(back.ok).toBe(true);
    if (!back.ok) return;
    expect(requestToForm(back.request)).toEqual({ ...form, type: "TRAIN", timeout: "3600s" });
  });
});

describe("a job submitted again", () => {
  it("names env values the server hid, as comments that send nothing", () => {
    const form = requestToForm({ command: ["true"], env: { A: "1" }, hidden_env: ["WANDB_API_KEY"] });
    expect(form.env).toBe("A=1\n# WANDB_API_KEY=  (value hidden: type it again to pass it)");
    expect(parseEnv(form.env)).toEqual({ A: "1" });
  });
});
