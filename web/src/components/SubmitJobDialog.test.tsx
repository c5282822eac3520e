import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { SubmitJobDialog } from "./SubmitJobDialog";

function jsonResponse(status: number, body: unknown) {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

describe("SubmitJobDialog", () => {
  let fetchMock: ReturnType<typeof vi.fn>;
  beforeEach(() => {
    localStorage.clear();
    fetchMock = vi.fn();
    vi.stubGlobal("fetch", fetchMock);
  });
  afterEach(() => vi.unstubAllGlobals());

  it("posts the form as a JobSubmit with the CSRF and idempotency headers", async () => {
    fetchMock.mockResolvedValue(jsonResponse(201, { job: { id: "job_1", name: "train" } }));
    const onSubmitted = vi.fn();
    render(<SubmitJobDialog onClose={() => undefined} onSubmitted={onSubmitted} />);
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py --lr 1e-4" } });
    fireEvent.change(screen.getByLabelText("Working directory"), { target: { value: "/home/me/p" } });
    fireEvent.change(screen.getByLabelText("GPUs"), { target: { value: "2" } });
    fireEvent.click(screen.getByRole("button", { name: "Queue job" }));
    await waitFor(() => expect(onSubmitted).toHaveBeenCalledWith({ id: "job_1", name: "train" }));
    const [url, init] = fetchMock.mock.calls[0];
    expect(url).toBe("/api/v1/jobs");
    expect(init.method).toBe("POST");
    expect(init.credentials).toBe("same-origin");
    expect(init.headers["X-GPUPlane-CSRF"]).toBe("1");
    expect(init.headers["Idempotency-Key"]).toMatch(/^[0-9a-f]{32}$/);
    expect(JSON.parse(init.body)).toEqual({ command: ["python", "train.py", "--lr", "1e-4"], cwd: "/home/me/p", type: "TRAIN", gpu: 2 });
    expect(localStorage.getItem("gpuplane.lastCwd")).toBe("/home/me/p");
  });

  it("shows field errors without sending anything", () => {
    render(<SubmitJobDialog onClose={() => undefined} onSubmitted={() => undefined} />);
    fireEvent.click(screen.getByRole("button", { name: "Queue job" }));
    expect(fetchMock).not.toHaveBeenCalled();
    expect(screen.getByText(/the command to run/)).toBeTruthy();
    expect(screen.getByText(/the working directory/)).toBeTruthy();
  });

  it("puts the daemon's refusal next to the field it names", async () => {
    fetchMock.mockResolvedValue(jsonResponse(400, { error: { code: "bad_request", message: "cwd: directory /nope does not exist",
      details: { field: "cwd" } } }));
    render(<SubmitJobDialog onClose={() => undefined} onSubmitted={() => undefined} />);
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python x.py" } });
    fireEvent.change(screen.getByLabelText("Working directory"), { target: { value: "/nope" } });
    fireEvent.click(screen.getByRole("button", { name: "Queue job" }));
    expect(await screen.findByText("cwd: directory /nope does not exist")).toBeTruthy();
    expect(screen.getByLabelText("Working directory").getAttribute("aria-invalid")).toBe("true");
  });

  it("carries the form into TOML mode, validates it there and submits it", async () => {
    fetchMock.mockResolvedValue(jsonResponse(201, { job: { id: "job_2" } }));
    const onSubmitted = vi.fn();
    render(<SubmitJobDialog onClose={() => undefined} onSubmitted={onSubmitted} />);
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python eval.py" } });
    fireEvent.change(screen.getByLabelText("Working directory"), { target: { value: "/w" } });
    fireEvent.click(screen.getByRole("button", { name: "TOML" }));
    const editor = screen.getByLabelText("Job as TOML") as HTMLTextAreaElement;
    expect(editor.value).toContain('command = [ "python", "eval.py" ]');
    expect(editor.value).toContain('cwd = "/w"');

    fireEvent.change(editor, { target: { value: editor.value + "\ngpus = 99\n" } });
    fireEvent.click(screen.getByRole("button", { name: "Queue job" }));
    expect(await screen.findByText(/a whole number from 0 to 64/)).toBeTruthy();
    expect(fetchMock).not.toHaveBeenCalled();

    fireEvent.change(editor, { target: { value: 'command = "python eval.py --split test"\ncwd = "/w"\ngpu = 0\n' } });
    fireEvent.click(screen.getByRole("button", { name: "Queue job" }));
    await waitFor(() => expect(onSubmitted).toHaveBeenCalled());
    expect(JSON.parse(fetchMock.mock.calls[0][1].body)).toEqual({ command: ["python", "eval.py", "--split", "test"], cwd: "/w", gpu: 0 });
  });

  it("refuses to leave TOML mode on a syntax error", () => {
    render(<SubmitJobDialog onClose={() => undefined} onSubmitted={() => undefined} />);
    fireEvent.click(screen.getByRole("button", { name: "TOML" }));
    fireEvent.change(screen.getByLabelText("Job as TOML"), { target: { value: "command = [" } });
    fireEvent.click(screen.getByRole("button", { name: "Form" }));
    expect(screen.getByLabelText("Job as TOML")).toBeTruthy();
    expect(screen.getByText("syntax")).toBeTruthy();
  });
});
