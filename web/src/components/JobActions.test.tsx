import { fireEvent, render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { Job, JobState } from "../api/types";
import { JobActions } from "./JobActions";

const job = (status: JobState, cancel_requested = false) =>
  ({ id: "job_1", name: "train", status, cancel_requested, stop_grace_s: 10 }) as Job;
const buttons = (status: JobState, cancel_requested = false) =>
  [...render(<JobActions job={job(status, cancel_requested)} onChange={() => undefined} />).container
    .querySelectorAll("button")].map((b) => b.getAttribute("title"));

describe("a job's actions follow the daemon's sets (lib/jobStates)", () => {
  it("offers cancel while queued or on a node, LOST too, and retry once ended or LOST", () => {
    expect(buttons("QUEUED")).toEqual(["Cancel job"]);
    expect(buttons("RUNNING")).toEqual(["Cancel job"]);
    expect(buttons("LOST")).toEqual(["Cancel job", "Retry job"]);
    expect(buttons("FAILED")).toEqual(["Retry job"]);
    expect(buttons("SUCCEEDED")).toEqual(["Retry job"]);
    expect(buttons("RUNNING", true)).toEqual([]);
  });

  it("says a LOST job is stopped when its node is back", () => {
    const { container, getByTitle } = render(<JobActions job={job("LOST")} onChange={() => undefined} />);
    fireEvent.click(getByTitle("Cancel job"));
    expect(container.ownerDocument.body.textContent).toContain("the job is stopped when the node is back");
  });
});
